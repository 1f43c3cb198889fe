// Checkpoint save/load for the GPT of the main job; see checkpoint.h.
#include "checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln::cli {
namespace {

const char* kOp = "checkpoint";

}  // namespace

// Note [Checkpoint metadata is untrusted]
// A checkpoint may come from anywhere. Every metadata field is parsed as a
// whole decimal integer in its range ("1 junk", "abc", "-0x1" and overflow
// are errors naming the field), and every tensor the config implies
// (GPT::state_shapes) must be present with its shape before a single module
// is built, so a lying n_layer or block_size cannot make the loader allocate
// more than the file itself holds.
int64_t checkpoint_meta_int(const io::SafetensorsFile& f, const std::string& key, int64_t lo, int64_t hi) {
  auto it = f.metadata.find(key);
  check(it != f.metadata.end(), kOp, "metadata has no '", key, "': not a kiln train checkpoint");
  const std::string& text = it->second;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  check(ec == std::errc() && end == text.data() + text.size() && !text.empty(), kOp, "metadata '", key, "' is \"",
        text, "\", not an integer");
  check(v >= lo && v <= hi, kOp, "metadata '", key, "' is ", v, " but must be in [", lo, ", ", hi, "]");
  return v;
}

namespace {

nn::GPTConfig config_of(const io::SafetensorsFile& f) {
  auto format = f.metadata.find("format");
  check(format != f.metadata.end() && format->second == "kiln-gpt", kOp,
        "metadata 'format' is not \"kiln-gpt\": not a kiln train checkpoint");
  constexpr int64_t kMax = int64_t{1} << 31;
  nn::GPTConfig c;
  c.vocab_size = checkpoint_meta_int(f, "vocab_size", 1, kMax);
  c.block_size = checkpoint_meta_int(f, "block_size", 1, kMax);
  c.n_layer = checkpoint_meta_int(f, "n_layer", 1, kMax);
  c.n_head = checkpoint_meta_int(f, "n_head", 1, kMax);
  c.n_embd = checkpoint_meta_int(f, "n_embd", 1, kMax);
  check(c.n_embd % c.n_head == 0, kOp, "metadata n_embd ", c.n_embd, " is not a multiple of n_head ", c.n_head);
  if (f.metadata.count("n_experts")) {  // a mixture-of-experts GPT (older checkpoints have none)
    // Every expert is 4 tensors per block: bounded by the file before use.
    c.n_experts = checkpoint_meta_int(f, "n_experts", 0, static_cast<int64_t>(f.tensors.size()));
    if (c.n_experts > 0) c.expert_top_k = checkpoint_meta_int(f, "expert_top_k", 1, c.n_experts);
    check(!f.tensors.count("model.blocks.0.mlp.experts." + std::to_string(c.n_experts) + ".up.weight"), kOp,
          "metadata n_experts is ", c.n_experts, " but the checkpoint holds more experts");
  }
  // The table has n_layer blocks: bound n_layer by the file before making it.
  // The n_layer + 1-th block must be absent too: the metadata must not undercount.
  check(static_cast<size_t>(c.n_layer) <= f.tensors.size(), kOp, "metadata n_layer is ", c.n_layer,
        " but the file holds only ", f.tensors.size(), " tensors");
  const std::string implied = detail::concat(" (metadata: vocab_size ", c.vocab_size, ", block_size ", c.block_size,
                                             ", n_layer ", c.n_layer, ", n_head ", c.n_head, ", n_embd ", c.n_embd, ")");
  for (const auto& [name, shape] : nn::GPT::state_shapes(c)) {
    auto it = f.tensors.find("model." + name);
    check(it != f.tensors.end(), kOp, "has no tensor 'model.", name, "', which the metadata implies", implied);
    check(it->second.sizes() == shape, kOp, "model.", name, " has shape ", shape_str(it->second.sizes()),
          " but the metadata implies ", shape_str(shape), implied);
  }
  check(!f.tensors.count("model.blocks." + std::to_string(c.n_layer) + ".ln1.weight"), kOp, "metadata n_layer is ",
        c.n_layer, " but the checkpoint holds more blocks");
  return c;
}

}  // namespace

void check_checkpoint_destination(const std::string& path, bool resume, bool overwrite) {
  namespace fs = std::filesystem;
  check(!path.empty(), "train", "--out is empty");
  const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  std::error_code ec;
  check(fs::is_directory(dir, ec), "train", "--out '", path, "': directory '", dir.string(), "' does not exist");
  // A file actually created there, not access(W_OK): root passes that test
  // for a read-only file system or /proc, and the run then failed only at
  // its first save, its training lost.
  std::string probe = (dir / ".kiln-out-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  check(fd >= 0, "train", "--out '", path, "': directory '", dir.string(), "' is not writable (", std::strerror(errno),
        ")");
  ::close(fd);
  ::unlink(probe.c_str());
  const fs::file_status status = fs::symlink_status(path, ec);
  if (!fs::exists(status)) {
    check(!resume, "train", "--resume: there is no checkpoint at '", path, "'");
    return;
  }
  check(fs::is_regular_file(status), "train", "--out '", path, "' exists and is not a regular file");
  check(resume || overwrite, "train", "--out '", path,
        "' already exists: pass --resume to continue it or --overwrite to replace it");
}

void save_checkpoint(const std::string& path, const nn::GPT& model, const optim::AdamW* opt, const TrainState& st) {
  save_checkpoint(path, model.state_dict(), model.config(), opt, st);
}

void save_checkpoint(const std::string& path, const nn::StateDict& model_tensors, const nn::GPTConfig& c,
                     const optim::AdamW* opt, const TrainState& st) {
  {
    NoGradGuard no_grad;
    // x * 0 is 0 for every finite x and NaN for inf and NaN: one reduction per tensor.
    for (const auto& [name, t] : model_tensors)
      check(is_floating(t.dtype()) ? sum(t * 0).item<double>() == 0 : true, kOp, "parameter '", name,
            "' is not finite: not saved, '", path, "' keeps its last finite state");
  }
  nn::StateDict all = nn::add_prefix(model_tensors, "model.");
  if (opt) all.merge(nn::add_prefix(opt->state_dict(), "optim."));
  if (st.rng_state.defined()) all.emplace("rng_state", st.rng_state);
  io::save_safetensors(path, all,
                       {{"format", "kiln-gpt"},
                        {"vocab_size", std::to_string(c.vocab_size)},
                        {"block_size", std::to_string(c.block_size)},
                        {"n_layer", std::to_string(c.n_layer)},
                        {"n_head", std::to_string(c.n_head)},
                        {"n_embd", std::to_string(c.n_embd)},
                        {"n_experts", std::to_string(c.n_experts)},
                        {"expert_top_k", std::to_string(c.expert_top_k)},
                        {"step", std::to_string(st.step)},
                        {"seed", std::to_string(st.seed)}});
}

std::unique_ptr<nn::GPT> load_model(const std::string& path, TrainState* st) {
  io::SafetensorsFile f = io::load_safetensors(path);
  auto model = std::make_unique<nn::GPT>(config_of(f));
  model->load_state_dict(nn::select_prefix(f.tensors, "model."));
  if (st) {
    st->step = checkpoint_meta_int(f, "step", 0, std::numeric_limits<int64_t>::max() / 2);
    st->seed = static_cast<uint64_t>(checkpoint_meta_int(f, "seed", 0, std::numeric_limits<int64_t>::max()));
    const auto rng = f.tensors.find("rng_state");
    st->rng_state = rng == f.tensors.end() ? Tensor() : rng->second;
    if (st->rng_state.defined())
      check(st->rng_state.dtype() == kUInt8 && st->rng_state.sizes() == Shape{16}, kOp, "tensor 'rng_state' is ",
            st->rng_state.dtype(), " of shape ", shape_text(st->rng_state.sizes()), " but must be uint8 of shape [16]");
  }
  return model;
}

// Checkpoints written before parameter groups hold AdamW's state as "step"
// (one count for every parameter) and "<i>.exp_avg", ...: read into the
// current layout, the groups' options from the optimizer as it is.
nn::StateDict from_flat_adamw_layout(const nn::StateDict& old, const optim::AdamW& opt) {
  nn::StateDict s = opt.state_dict();
  for (auto it = s.begin(); it != s.end();) it = it->first.rfind("state.", 0) == 0 ? s.erase(it) : std::next(it);
  const Tensor step = old.at("step").to(kFloat32);
  for (const auto& [k, v] : old) {
    if (k == "step") continue;
    const std::string index = k.substr(0, k.find('.'));
    s["state." + k] = v;
    s["state." + index + ".step"] = step;
  }
  return s;
}

void load_optimizer(const std::string& path, optim::AdamW& opt) {
  const nn::StateDict state = nn::select_prefix(io::load_safetensors(path).tensors, "optim.");
  try {
    opt.load_state_dict(state.count("step") ? from_flat_adamw_layout(state, opt) : state);
  } catch (const Error& e) {  // which file: the state's checks name only its keys
    fail("train", "the optimizer state in '", path, "' (keys 'optim.*'): ", e.what());
  }
}

Generator validation_generator(uint64_t seed) { return Generator(seed ^ 0x76616c6964617465u); }  // "validate"

std::string default_corpus() {
  const std::filesystem::path dir = "/usr/share/games/fortunes";
  check(std::filesystem::is_directory(dir), "train", "no --data given and ", dir.string(),
        " is missing: install Debian's 'fortunes' package (make demo does)");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && !e.is_symlink() && !e.path().has_extension()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& p : files) text += io::read_file(p.string()) + "\n%\n";
  return text;
}

}  // namespace kiln::cli
