// The intra-op thread pool. One job at a time: the caller splits a range into
// tasks, workers and the caller take tasks from an atomic counter, and the
// caller waits until all are done. Workers sleep on a condition variable
// between jobs, so an idle kiln uses no CPU.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/error.h"
#include "kiln/runtime.h"

namespace kiln {
namespace {

thread_local bool in_parallel_region = false;

class ThreadPool {
 public:
  explicit ThreadPool(int threads) : threads_(threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int threads() const { return threads_; }

  void run(int64_t ntasks, const std::function<void(int64_t)>& task) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one job at a time
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      ntasks_ = ntasks;
      next_.store(0);
      done_ = 0;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_ == ntasks_; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    in_parallel_region = true;
    for (;;) {
      int64_t i = next_.fetch_add(1);
      if (i >= ntasks_) break;
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (++done_ == ntasks_) done_cv_.notify_all();
    }
    in_parallel_region = false;
  }
  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (generation_ != seen && task_ != nullptr); });
        if (stop_) return;
        seen = generation_;
      }
      work();
    }
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex job_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t ntasks_ = 0;
  std::atomic<int64_t> next_{0};
  int64_t done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

int default_threads() {
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

std::mutex pool_mu;
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}

// Every pool, the default one or one of set_num_threads, comes with
// OpenBLAS set to one thread (Note [One thread pool] in matmul_kernel.cpp).
std::unique_ptr<ThreadPool> make_pool(int n) {
  openblas_set_num_threads(1);
  return std::make_unique<ThreadPool>(n);
}

ThreadPool& pool() {
  std::lock_guard<std::mutex> lock(pool_mu);
  auto& p = pool_slot();
  if (!p) p = make_pool(default_threads());
  return *p;
}

}  // namespace

void set_num_threads(int n) {
  check(n >= 1, "set_num_threads", "expected a thread count >= 1 but got ", n);
  std::lock_guard<std::mutex> lock(pool_mu);
  pool_slot() = make_pool(n);
}

int get_num_threads() { return pool().threads(); }

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t n = end - begin;
  ThreadPool& p = pool();
  if (in_parallel_region || p.threads() == 1 || n < 2 * grain) {
    fn(begin, end);
    return;
  }
  // A few tasks per thread balance uneven work without many small tasks.
  const int64_t ntasks = std::min<int64_t>((n + grain - 1) / grain, 4 * p.threads());
  const int64_t chunk = (n + ntasks - 1) / ntasks;
  p.run(ntasks, [&](int64_t t) {
    int64_t b = begin + t * chunk;
    int64_t e = std::min(end, b + chunk);
    if (b < e) fn(b, e);
  });
}

}  // namespace kiln
