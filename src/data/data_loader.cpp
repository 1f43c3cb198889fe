// DataLoader (kiln/data.h).
//
// Note [Worker threads]
// An epoch fixes its batches' sample indices up front. Workers claim batch
// numbers in order from a shared counter, at most num_workers *
// prefetch_factor beyond the one the consumer waits for, build them (get
// every sample, collate) and file them by number; the consumer takes batch
// b when it is filed, so batches arrive in order whatever thread built
// them. Threads, not processes: get() is const and must be thread-safe, as
// kiln's ops are. An error is filed in the batch's place and rethrown when
// the consumer reaches it. The epoch's destructor (the loop ended or was
// left early) raises `stop`, wakes every worker and joins them: a worker
// blocked on space sees stop, one building finishes its batch first.
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <variant>

#include "kiln/autograd.h"
#include "kiln/data.h"
#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln::data {

class DataLoader::Epoch {
 public:
  Epoch(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options,
        std::vector<std::vector<int64_t>> batches)
      : dataset_(std::move(dataset)), options_(options), batches_(std::move(batches)) {
    for (int w = 0; w < options_.num_workers; ++w) workers_.emplace_back([this] { work(); });
  }

  ~Epoch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    space_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  Example take(int64_t b) {
    if (workers_.empty()) return build(b);
    std::variant<Example, std::exception_ptr> result;
    {
      std::unique_lock<std::mutex> lock(mu_);
      filed_.wait(lock, [&] { return done_.count(b) > 0; });
      result = std::move(done_.at(b));
      done_.erase(b);
      next_to_take_ = b + 1;
    }
    space_.notify_all();
    if (auto* e = std::get_if<std::exception_ptr>(&result)) std::rethrow_exception(*e);
    return std::get<Example>(std::move(result));
  }

 private:
  Example build(int64_t b) const {
    NoGradGuard no_grad;
    const std::vector<int64_t>& indices = batches_[static_cast<size_t>(b)];
    std::vector<Example> samples;
    samples.reserve(indices.size());
    for (int64_t i : indices) samples.push_back(dataset_->get(i));
    return options_.collate_fn(samples);
  }

  void work() {
    const int64_t n = static_cast<int64_t>(batches_.size());
    const int64_t in_flight = static_cast<int64_t>(options_.num_workers) * options_.prefetch_factor;
    for (;;) {
      int64_t b;
      {
        std::unique_lock<std::mutex> lock(mu_);
        space_.wait(lock, [&] { return stop_ || next_to_build_ >= n || next_to_build_ < next_to_take_ + in_flight; });
        if (stop_ || next_to_build_ >= n) return;
        b = next_to_build_++;
      }
      std::variant<Example, std::exception_ptr> result;
      try {
        result = build(b);
      } catch (...) {
        result = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_.emplace(b, std::move(result));
      }
      filed_.notify_all();
    }
  }

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::vector<std::vector<int64_t>> batches_;
  std::mutex mu_;
  std::condition_variable filed_, space_;
  std::map<int64_t, std::variant<Example, std::exception_ptr>> done_;
  int64_t next_to_build_ = 0, next_to_take_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  check(dataset_ != nullptr, "DataLoader", "expected a data set but got none");
  check(options_.batch_size >= 1, "DataLoader", "batch_size must be at least 1 but got ", options_.batch_size);
  check(options_.num_workers >= 0, "DataLoader", "num_workers must be non-negative but got ", options_.num_workers);
  check(options_.prefetch_factor >= 1, "DataLoader", "prefetch_factor must be at least 1 but got ",
        options_.prefetch_factor);
  check(static_cast<bool>(options_.collate_fn), "DataLoader", "collate_fn is empty");
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_->size(), bs = options_.batch_size;
  return options_.drop_last ? n / bs : (n + bs - 1) / bs;
}

DataLoader::Iterator DataLoader::begin() {
  const int64_t n = dataset_->size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  if (options_.shuffle) {
    Tensor perm;
    if (options_.generator) {
      perm = randperm(n, *options_.generator);
    } else {
      Generator epoch(static_cast<uint64_t>(randint(0, int64_t{1} << 62, {}).item<int64_t>()));
      perm = randperm(n, epoch);
    }
    const int64_t* p = perm.data_ptr<int64_t>();
    order.assign(p, p + n);
  } else {
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  }
  std::vector<std::vector<int64_t>> batches(static_cast<size_t>(size()));
  for (size_t b = 0; b < batches.size(); ++b) {
    const size_t from = b * static_cast<size_t>(options_.batch_size);
    batches[b].assign(order.begin() + static_cast<std::ptrdiff_t>(from),
                      order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), from + static_cast<size_t>(options_.batch_size))));
  }
  return Iterator(std::make_shared<Epoch>(dataset_, options_, std::move(batches)), 0, size());
}

DataLoader::Iterator DataLoader::end() { return Iterator(nullptr, size(), size()); }

DataLoader::Iterator::Iterator(std::shared_ptr<Epoch> epoch, int64_t index, int64_t end)
    : epoch_(std::move(epoch)), index_(index), end_(end) {
  load();
}

void DataLoader::Iterator::load() {
  if (index_ < end_) {
    batch_ = epoch_->take(index_);
  } else {
    batch_.clear();
    epoch_.reset();
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  load();
  return *this;
}

}  // namespace kiln::data
