// Checkpoints in the safetensors format (byte-compatible with Hugging Face's
// and PyTorch's), the byte-level tokenizer and the text dataset of `kiln train`.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "kiln/nn.h"

namespace kiln::io {

// Writes atomically: a temporary file in the same directory, fsync, rename.
void save_safetensors(const std::string& path, const nn::StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  nn::StateDict tensors;  // views of the mapped file when aligned, else copies
  std::map<std::string, std::string> metadata;
};
// Maps the file; any malformation is a kiln::Error naming what is wrong.
SafetensorsFile load_safetensors(const std::string& path);
// The same checks on bytes in memory (the file loader uses it too).
SafetensorsFile parse_safetensors(const std::string& bytes);

// Bytes are tokens: vocabulary 256, any UTF-8 text round-trips.
std::vector<int64_t> encode(const std::string& text);
std::string decode(const std::vector<int64_t>& tokens);

// A corpus of documents split into train and validation by document, after
// removing exact duplicates, so no text appears on both sides.
class TextDataset {
 public:
  // Documents are separated by lines holding only `separator` (fortune's "%").
  TextDataset(const std::string& text, double val_fraction = 0.1, uint64_t seed = 0, const std::string& separator = "%");
  // (x, y) of shape (batch, context): random windows and the same shifted by one.
  std::pair<Tensor, Tensor> batch(bool validation, int64_t batch, int64_t context) const;
  int64_t train_tokens() const { return static_cast<int64_t>(train_.size()); }
  int64_t val_tokens() const { return static_cast<int64_t>(val_.size()); }
  int64_t duplicates_removed() const { return duplicates_; }

 private:
  std::vector<int64_t> train_, val_;
  int64_t duplicates_ = 0;
};

std::string read_file(const std::string& path);

}  // namespace kiln::io
