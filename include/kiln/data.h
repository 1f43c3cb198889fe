// Data sets and the data loader, as torch.utils.data has them: a Dataset is
// indexed samples (a sample is a list of tensors: input, target, ...); a
// DataLoader batches them, shuffled from a seeded generator, optionally
// produced ahead by worker threads.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "kiln/runtime.h"
#include "kiln/tensor.h"

namespace kiln::data {

// One sample, or one batch: the fields of a Python tuple, in order.
using Example = std::vector<Tensor>;

// A map-style data set. get() is called from the loader's worker threads at
// once, so it must be safe to call concurrently (it is const).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
};

// Samples are the rows (index along dim 0) of tensors of equal length.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override;
  Example get(int64_t index) const override;

 private:
  std::vector<Tensor> tensors_;
};

// The samples of `dataset` at `indices`, in that order.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override;
  Example get(int64_t index) const override;
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

// The data sets one after another.
class ConcatDataset : public Dataset {
 public:
  explicit ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets);
  int64_t size() const override;
  Example get(int64_t index) const override;

 private:
  std::vector<std::shared_ptr<const Dataset>> datasets_;
  std::vector<int64_t> ends_;  // cumulative sizes
};

// Splits `dataset` into non-overlapping random subsets of the given lengths
// (summing to its size), or of the given fractions (summing to 1; the
// remainder spread one each over the first subsets, as PyTorch does).
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths, Generator& generator);
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions, Generator& generator);

// Stacks field i of every sample into field i of the batch (a new dim 0).
Example default_collate(const std::vector<Example>& samples);

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;  // drop a last batch smaller than batch_size
  // Threads that build batches ahead of the consumer; 0 builds each batch
  // on the calling thread when it is asked for.
  int num_workers = 0;
  int prefetch_factor = 2;  // batches in flight per worker
  std::function<Example(const std::vector<Example>&)> collate_fn = default_collate;
  // Shuffling draws from this generator (it must outlive the loader); without
  // one each epoch seeds its order from the default generator, so
  // manual_seed fixes every epoch's order (PyTorch's RandomSampler).
  Generator* generator = nullptr;
};

// for (const data::Example& batch : loader) { ... }: one epoch per loop.
// Batches arrive in order whatever the workers; an error from get() or the
// collate function is raised on the consumer when it reaches that batch.
// Leaving the loop early stops the workers (none is left running).
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  int64_t size() const;  // batches per epoch

  class Epoch;
  class Iterator {
   public:
    const Example& operator*() const { return batch_; }
    const Example* operator->() const { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return index_ == other.index_; }
    bool operator!=(const Iterator& other) const { return index_ != other.index_; }

   private:
    friend class DataLoader;
    Iterator(std::shared_ptr<Epoch> epoch, int64_t index, int64_t end);
    void load();  // batch index_, or past the end: release the epoch (its workers stop)
    std::shared_ptr<Epoch> epoch_;
    int64_t index_, end_;
    Example batch_;
  };
  Iterator begin();  // starts an epoch
  Iterator end();

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
};

}  // namespace kiln::data

KILN_API_END
