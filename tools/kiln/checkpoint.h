// The checkpoint layout shared by `kiln train` and `kiln generate`: model
// tensors under "model.", AdamW state under "optim.", the GPT config, step
// and data seed in __metadata__.
#pragma once
#include <string>

#include "kiln/gpt.h"
#include "kiln/io.h"
#include "kiln/optim.h"

namespace kiln::cli {

struct TrainState {
  int64_t step = 0;
  uint64_t seed = 0;
  // The default generator's state after `step` steps (get_rng_state), so a
  // resumed run draws the batches the uninterrupted run would have drawn.
  // Undefined in checkpoints written before it was saved.
  Tensor rng_state;
};

// A metadata field as a whole decimal integer in [lo, hi] (Note [Checkpoint
// metadata is untrusted] in checkpoint.cpp); anything else is an error naming it.
int64_t checkpoint_meta_int(const io::SafetensorsFile& f, const std::string& key, int64_t lo, int64_t hi);

// Refuses, before any training, a destination that cannot take the
// checkpoint: a missing or unwritable directory, something not a regular
// file, an existing checkpoint without --overwrite (or a missing one with
// --resume).
void check_checkpoint_destination(const std::string& path, bool resume, bool overwrite);
// Refuses to write non-finite parameters: a good checkpoint is never
// replaced by a diverged one.
void save_checkpoint(const std::string& path, const nn::GPT& model, const optim::AdamW* opt, const TrainState& st);
// The same from the model's tensors (a model whose experts are sharded over
// ranks, gathered by the caller).
void save_checkpoint(const std::string& path, const nn::StateDict& model_tensors, const nn::GPTConfig& c,
                     const optim::AdamW* opt, const TrainState& st);
// Builds the model from the stored config and loads its weights.
std::unique_ptr<nn::GPT> load_model(const std::string& path, TrainState* st = nullptr);
// Loads the optimizer state into an optimizer over the loaded model's parameters.
void load_optimizer(const std::string& path, optim::AdamW& opt);

// The stream validation windows come from (kiln train's evaluations and
// kiln eval): its own, seeded from the run's seed, so evaluating never
// moves the training batches' stream.
Generator validation_generator(uint64_t seed);

// The default corpus: every fortune file of Debian's `fortunes` package.
std::string default_corpus();

}  // namespace kiln::cli
