// TensorDataset, Subset, ConcatDataset, random_split and default_collate
// (kiln/data.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/data.h"
#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln::data {
namespace {

void check_index(const char* op, int64_t index, int64_t size) {
  check(index >= 0 && index < size, op, "index ", index, " is out of range for a data set of ", size, " samples");
}

}  // namespace

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  check(!tensors_.empty(), "TensorDataset", "expected at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    check(tensors_[i].defined() && tensors_[i].dim() >= 1, "TensorDataset", "tensor ", i,
          " must have a first dimension to index samples by, but it is ",
          tensors_[i].defined() ? "0-dim" : "undefined");
    check(tensors_[i].size(0) == tensors_[0].size(0), "TensorDataset", "size mismatch between tensors: tensor 0 has ",
          tensors_[0].size(0), " samples (shape ", shape_text(tensors_[0].sizes()), ") and tensor ", i, " has ",
          tensors_[i].size(0), " (shape ", shape_text(tensors_[i].sizes()), ")");
  }
}

int64_t TensorDataset::size() const { return tensors_[0].size(0); }

Example TensorDataset::get(int64_t index) const {
  check_index("TensorDataset", index, size());
  Example e;
  e.reserve(tensors_.size());
  for (const Tensor& t : tensors_) e.push_back(t.select(0, index));
  return e;
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  check(dataset_ != nullptr, "Subset", "expected a data set but got none");
  for (int64_t i : indices_) check_index("Subset", i, dataset_->size());
}

int64_t Subset::size() const { return static_cast<int64_t>(indices_.size()); }

Example Subset::get(int64_t index) const {
  check_index("Subset", index, size());
  return dataset_->get(indices_[static_cast<size_t>(index)]);
}

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets) : datasets_(std::move(datasets)) {
  check(!datasets_.empty(), "ConcatDataset", "expected at least one data set");
  int64_t total = 0;
  for (size_t i = 0; i < datasets_.size(); ++i) {
    check(datasets_[i] != nullptr, "ConcatDataset", "data set ", i, " is null");
    total += datasets_[i]->size();
    ends_.push_back(total);
  }
}

int64_t ConcatDataset::size() const { return ends_.back(); }

Example ConcatDataset::get(int64_t index) const {
  check_index("ConcatDataset", index, size());
  const size_t d = static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), index) - ends_.begin());
  return datasets_[d]->get(index - (d == 0 ? 0 : ends_[d - 1]));
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths, Generator& generator) {
  check(dataset != nullptr, "random_split", "expected a data set but got none");
  int64_t total = 0;
  for (int64_t l : lengths) {
    check(l >= 0, "random_split", "lengths must be non-negative but got ", shape_text(lengths));
    total += l;
  }
  check(total == dataset->size(), "random_split", "the lengths ", shape_text(lengths), " sum to ", total,
        " but the data set has ", dataset->size(), " samples");
  const Tensor perm = randperm(total, generator);
  const int64_t* p = perm.data_ptr<int64_t>();
  std::vector<std::shared_ptr<Subset>> out;
  int64_t start = 0;
  for (int64_t l : lengths) {
    out.push_back(std::make_shared<Subset>(dataset, std::vector<int64_t>(p + start, p + start + l)));
    start += l;
  }
  return out;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions, Generator& generator) {
  check(dataset != nullptr, "random_split", "expected a data set but got none");
  double sum = 0;
  for (double f : fractions) {
    check(f >= 0 && f <= 1, "random_split", "fractions must be in [0, 1] but one is ", f);
    sum += f;
  }
  check(std::fabs(sum - 1) <= 1e-9, "random_split", "the fractions sum to ", sum, ", not 1");
  const int64_t n = dataset->size();
  std::vector<int64_t> lengths;
  int64_t given = 0;
  for (double f : fractions) given += lengths.emplace_back(static_cast<int64_t>(std::floor(static_cast<double>(n) * f)));
  for (size_t i = 0; given < n; i = (i + 1) % lengths.size(), ++given) ++lengths[i];  // round-robin remainder
  return random_split(std::move(dataset), lengths, generator);
}

Example default_collate(const std::vector<Example>& samples) {
  check(!samples.empty(), "default_collate", "expected at least one sample");
  const size_t fields = samples[0].size();
  Example batch;
  for (size_t f = 0; f < fields; ++f) {
    std::vector<Tensor> column;
    column.reserve(samples.size());
    for (size_t s = 0; s < samples.size(); ++s) {
      check(samples[s].size() == fields, "default_collate", "sample ", s, " has ", samples[s].size(),
            " fields but sample 0 has ", fields);
      const Tensor& t = samples[s][f];
      check(t.sizes() == samples[0][f].sizes() && t.dtype() == samples[0][f].dtype(), "default_collate", "field ", f,
            " of sample ", s, " is ", t.dtype(), " of shape ", shape_text(t.sizes()), " but sample 0's is ",
            samples[0][f].dtype(), " of shape ", shape_text(samples[0][f].sizes()), ": samples must match to stack");
      column.push_back(t);
    }
    batch.push_back(stack(column, 0));
  }
  return batch;
}

}  // namespace kiln::data
