// Checkpoints in the safetensors format (byte-compatible with Hugging Face's
// and PyTorch's), the byte-level tokenizer and the text dataset of `kiln
// train`, and readers of other tools' data files (IDX, CSV, .npy).
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <map>
#include <string>
#include <vector>

#include "kiln/nn.h"
#include "kiln/runtime.h"

namespace kiln::io {

// Writes atomically: a temporary file in the same directory, fsync, rename.
void save_safetensors(const std::string& path, const nn::StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  nn::StateDict tensors;  // views of the file's bytes (read whole) when aligned, else copies
  std::map<std::string, std::string> metadata;
};
// Reads the file whole (never mapped: a file changed meanwhile is an error,
// not a SIGBUS later); any malformation is a kiln::Error naming what is wrong.
SafetensorsFile load_safetensors(const std::string& path);
// The same checks on bytes in memory (the file loader uses it too).
SafetensorsFile parse_safetensors(const std::string& bytes);

// Bytes are tokens: vocabulary 256, any UTF-8 text round-trips.
std::vector<int64_t> encode(const std::string& text);
std::string decode(const std::vector<int64_t>& tokens);

// A corpus of documents split into train and validation after removing
// exact duplicate documents, so no text appears on both sides. Documents
// are separated by lines holding only `separator`; an empty separator means
// "%" (fortune files) when the text has such lines, else the whole text is
// one document. With at least kMinDocumentsToSplit distinct documents, whole
// documents go to validation (a seeded shuffle picks val_fraction of them);
// with fewer (a single book, a licence text), each document is split by
// position: its last val_fraction to validation, the rest to training.
class TextDataset {
 public:
  static constexpr size_t kMinDocumentsToSplit = 10;
  TextDataset(const std::string& text, double val_fraction = 0.1, uint64_t seed = 0, const std::string& separator = "");
  // (x, y) of shape (batch, context): random windows and the same shifted by one.
  std::pair<Tensor, Tensor> batch(bool validation, int64_t batch, int64_t context) const;
  // The same with the windows drawn from `generator`.
  std::pair<Tensor, Tensor> batch(bool validation, int64_t batch, int64_t context, Generator& generator) const;
  int64_t train_tokens() const { return static_cast<int64_t>(train_.size()); }
  int64_t val_tokens() const { return static_cast<int64_t>(val_.size()); }
  int64_t documents() const { return documents_; }
  int64_t duplicates_removed() const { return duplicates_; }
  bool split_by_position() const { return by_position_; }

 private:
  // Bytes are the tokens (vocabulary 256): one byte each, widened to int64
  // only in the batches.
  std::vector<uint8_t> train_, val_;
  int64_t documents_ = 0, duplicates_ = 0;
  bool by_position_ = false;
};

std::string read_file(const std::string& path);

// Data files of other tools, read into tensors (errors name the file and
// what is wrong; sizes are checked against the bytes before allocating).
// The IDX format of MNIST-style data sets, gzip-compressed or plain: its
// dtype (uint8, int8, int16, int32, float32, float64) and shape.
Tensor load_idx(const std::string& path);
// A CSV of numbers as a [rows, columns] tensor (blank lines skipped;
// `header` skips the first line).
Tensor load_csv(const std::string& path, bool header = false, char delimiter = ',', DType dtype = kFloat32);
// NumPy's .npy (little-endian bool, integer and float dtypes; C or Fortran
// order); save_npy writes version 1.0, C order, atomically.
Tensor load_npy(const std::string& path);
void save_npy(const std::string& path, const Tensor& t);
// NumPy's .npz (numpy.savez / savez_compressed): its arrays by name (the
// members without ".npy"), stored or deflated; save_npz writes them stored,
// or deflated when compress, atomically.
std::map<std::string, Tensor> load_npz(const std::string& path);
void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays, bool compress = false);

}  // namespace kiln::io

KILN_API_END
