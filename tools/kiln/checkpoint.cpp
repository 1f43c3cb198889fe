// Checkpoint save/load for the GPT of the main job; see checkpoint.h.
#include "checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "kiln/error.h"

namespace kiln::cli {
namespace {

int64_t meta_int(const io::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata.find(key);
  check(it != f.metadata.end(), "checkpoint", "metadata has no '", key, "': not a kiln train checkpoint");
  return std::stoll(it->second);
}

nn::GPTConfig config_of(const io::SafetensorsFile& f) {
  nn::GPTConfig c;
  c.vocab_size = meta_int(f, "vocab_size");
  c.block_size = meta_int(f, "block_size");
  c.n_layer = meta_int(f, "n_layer");
  c.n_head = meta_int(f, "n_head");
  c.n_embd = meta_int(f, "n_embd");
  return c;
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::GPT& model, const optim::AdamW* opt, const TrainState& st) {
  nn::StateDict all;
  for (auto& [k, v] : model.state_dict()) all.emplace("model." + k, v);
  if (opt)
    for (auto& [k, v] : opt->state_dict()) all.emplace("optim." + k, v);
  const nn::GPTConfig& c = model.config();
  io::save_safetensors(path, all,
                       {{"format", "kiln-gpt"},
                        {"vocab_size", std::to_string(c.vocab_size)},
                        {"block_size", std::to_string(c.block_size)},
                        {"n_layer", std::to_string(c.n_layer)},
                        {"n_head", std::to_string(c.n_head)},
                        {"n_embd", std::to_string(c.n_embd)},
                        {"step", std::to_string(st.step)},
                        {"seed", std::to_string(st.seed)}});
}

// Tensors under `prefix`, with the prefix removed.
nn::StateDict with_prefix(const io::SafetensorsFile& f, const std::string& prefix) {
  nn::StateDict out;
  for (auto& [k, v] : f.tensors)
    if (k.rfind(prefix, 0) == 0) out.emplace(k.substr(prefix.size()), v);
  return out;
}

std::unique_ptr<nn::GPT> load_model(const std::string& path, TrainState* st) {
  io::SafetensorsFile f = io::load_safetensors(path);
  auto model = std::make_unique<nn::GPT>(config_of(f));
  model->load_state_dict(with_prefix(f, "model."));
  if (st) {
    st->step = meta_int(f, "step");
    st->seed = static_cast<uint64_t>(meta_int(f, "seed"));
  }
  return model;
}

void load_optimizer(const std::string& path, optim::AdamW& opt) {
  opt.load_state_dict(with_prefix(io::load_safetensors(path), "optim."));
}

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
