// Note [Checkpoint metadata is untrusted]: every metadata field of a
// crafted checkpoint is checked before the model is built.
#include <filesystem>

#include "checkpoint.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// A small real checkpoint, then the same tensors with one metadata field replaced.
std::string checkpoint_with(const std::string& key, const std::string& value) {
  const std::string good = ::testing::TempDir() + "/good_ckpt.safetensors";
  if (!std::filesystem::exists(good)) {
    nn::GPTConfig c;
    c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.block_size = 8;
    nn::GPT model(c);
    cli::save_checkpoint(good, model, nullptr, cli::TrainState{5, 7, Tensor()});
  }
  io::SafetensorsFile f = io::load_safetensors(good);
  if (value.empty()) f.metadata.erase(key);
  else f.metadata[key] = value;
  const std::string path = ::testing::TempDir() + "/crafted_ckpt.safetensors";
  io::save_safetensors(path, f.tensors, f.metadata);
  return path;
}

TEST(Checkpoint, ValidMetadataLoads) {
  cli::TrainState st;
  auto model = cli::load_model(checkpoint_with("step", "5"), &st);
  EXPECT_EQ(model->config().n_layer, 2);
  EXPECT_EQ(st.step, 5);
  EXPECT_EQ(st.seed, 7u);
}

TEST(Checkpoint, EveryMetadataFieldIsChecked) {
  struct Case {
    const char *key, *value, *needle;
  };
  const Case cases[] = {
      {"n_head", "0", "must be in [1, "},                       // was SIGFPE
      {"n_layer", "abc", "is \"abc\", not an integer"},         // was std::invalid_argument
      {"n_layer", "99999999999999999999", "not an integer"},    // was std::out_of_range
      {"n_layer", "1000000000", "holds only"},                  // was built until memory ran out
      {"n_layer", "3", "model.blocks.2."},                      // a block missing
      {"n_layer", "1", "holds more blocks"},                    // a block left over
      {"n_layer", "1 junk", "not an integer"},                  // was read as 1
      {"n_layer", " 2", "not an integer"},
      {"block_size", "1000000000", "model.wpe.weight"},         // was a heap overflow in randn
      {"n_embd", "32", "metadata implies [32]"},
      {"n_head", "3", "not a multiple of n_head"},
      {"vocab_size", "-256", "must be in [1, "},
      {"step", "-1000000", "must be in [0, "},                  // was a million NaN steps
      {"seed", "-1", "must be in [0, "},
      {"step", "", "has no 'step'"},
      {"format", "other", "not a kiln train checkpoint"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.key) + " = '" + c.value + "'");
    const std::string path = checkpoint_with(c.key, c.value);
    cli::TrainState st;
    expect_error([&] { cli::load_model(path, &st); }, {"[checkpoint]", c.needle});
  }
}

// The loader's shape table is the model's: names and shapes agree with a real state_dict.
TEST(Checkpoint, StateShapesMatchARealModel) {
  nn::GPTConfig c;
  c.n_layer = 3, c.n_head = 2, c.n_embd = 12, c.block_size = 5, c.vocab_size = 7;
  std::map<std::string, Shape> real;
  for (const auto& [name, t] : nn::GPT(c).state_dict()) real.emplace(name, t.sizes());
  EXPECT_EQ(nn::GPT::state_shapes(c), real);
  c.n_experts = 3;  // a mixture-of-experts GPT: router and experts in place of the MLP
  real.clear();
  for (const auto& [name, t] : nn::GPT(c).state_dict()) real.emplace(name, t.sizes());
  EXPECT_EQ(nn::GPT::state_shapes(c), real);
  EXPECT_TRUE(real.count("blocks.2.mlp.experts.2.down.bias"));
}

// A mixture-of-experts GPT saves, loads (its experts from the metadata) and
// gives the same logits; a checkpoint claiming fewer experts than it holds
// is refused.
TEST(Checkpoint, AMixtureOfExpertsGptRoundTrips) {
  nn::GPTConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.block_size = 6, c.n_experts = 4, c.expert_top_k = 2;
  manual_seed(9);
  nn::GPT model(c);
  const std::string path = ::testing::TempDir() + "moe_gpt.safetensors";
  const Tensor rng = get_rng_state();
  cli::save_checkpoint(path, model, nullptr, cli::TrainState{3, 1, rng});
  cli::TrainState st;
  auto loaded = cli::load_model(path, &st);
  EXPECT_EQ(st.step, 3);
  EXPECT_EQ(values(st.rng_state), values(rng));  // the generator's position travels with the weights
  EXPECT_EQ(loaded->config().n_experts, 4);
  EXPECT_EQ(loaded->config().expert_top_k, 2);
  const Tensor idx = randint(0, 256, {2, 6});
  EXPECT_EQ(max(abs(loaded->forward(idx) - model.forward(idx))).item<double>(), 0.0);
  io::SafetensorsFile f = io::load_safetensors(path);
  nn::StateDict t;
  for (auto& [k, v] : f.tensors) t.emplace(k, v);
  std::map<std::string, std::string> meta(f.metadata.begin(), f.metadata.end());
  meta["n_experts"] = "3";
  io::save_safetensors(path, t, meta);
  expect_error([&] { cli::load_model(path); }, {"[checkpoint]", "n_experts is 3", "more experts"});
}

TEST(Checkpoint, OptimizerStateInTheEarlierFlatLayoutStillResumes) {
  nn::GPTConfig c;
  c.n_layer = 1, c.n_head = 2, c.n_embd = 8, c.block_size = 4;
  manual_seed(10);
  nn::GPT model(c);
  optim::AdamW opt(model.parameters(), {});
  const Tensor idx = randint(0, 256, {2, 4});
  nn::cross_entropy(model.forward(idx).view({-1, 256}), idx.view({-1})).backward();
  opt.step(), opt.step();
  // The layout of checkpoints before parameter groups: "step" and "<i>.exp_avg", ...
  nn::StateDict tensors;
  for (const auto& [k, v] : model.state_dict()) tensors.emplace("model." + k, v);
  tensors.emplace("optim.step", scalar_tensor(int64_t{2}, kInt64));
  for (const auto& [k, v] : opt.state_dict())
    if (k.rfind("state.", 0) == 0 && k.find(".step") == std::string::npos) tensors.emplace("optim." + k.substr(6), v);
  const std::string path = ::testing::TempDir() + "flat_optim.safetensors";
  io::save_safetensors(path, tensors, {});
  optim::AdamW resumed(model.parameters(), {});
  cli::load_optimizer(path, resumed);
  const nn::StateDict want = opt.state_dict(), got = resumed.state_dict();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, v] : want) EXPECT_EQ(values(got.at(k)), values(v)) << k;
}

TEST(Checkpoint, DestinationIsCheckedBeforeTraining) {
  const std::string dir = ::testing::TempDir();
  const std::string existing = checkpoint_with("step", "5");
  expect_error([] { cli::check_checkpoint_destination("/nonexistent-dir/x.safetensors", false, false); },
               {"[train]", "does not exist"});
  expect_error([&] { cli::check_checkpoint_destination(existing, false, false); }, {"[train]", "--overwrite"});
  EXPECT_NO_THROW(cli::check_checkpoint_destination(existing, false, true));
  EXPECT_NO_THROW(cli::check_checkpoint_destination(existing, true, false));
  expect_error([&] { cli::check_checkpoint_destination(dir, false, true); }, {"[train]", "not a regular file"});
  expect_error([&] { cli::check_checkpoint_destination(dir + "/absent.safetensors", true, false); },
               {"[train]", "no checkpoint"});
}

TEST(Checkpoint, NonFiniteParametersAreNeverSaved) {
  nn::GPTConfig c;
  c.n_layer = 1, c.n_head = 2, c.n_embd = 16, c.block_size = 8;
  nn::GPT model(c);
  const std::string path = ::testing::TempDir() + "/finite_ckpt.safetensors";
  cli::save_checkpoint(path, model, nullptr, cli::TrainState{1, 0, Tensor()});
  const std::string before = io::read_file(path);
  {
    NoGradGuard g;
    model.blocks[0].mlp->fc.weight.select(0, 3).select(0, 1).fill_(std::numeric_limits<double>::infinity());
  }
  expect_error([&] { cli::save_checkpoint(path, model, nullptr, cli::TrainState{2, 0, Tensor()}); },
               {"[checkpoint]", "blocks.0.mlp.fc.weight", "not finite"});
  EXPECT_EQ(io::read_file(path), before);
}

}  // namespace
}  // namespace kiln::test
