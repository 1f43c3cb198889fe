// The intra-op thread pool. One job at a time: the caller splits a range into
// tasks, workers and the caller take tasks from an atomic counter, and the
// caller waits until all are done. Between jobs a worker spins for a short
// while (kSpin) and then sleeps on a condition variable, so an idle kiln uses
// no CPU; the caller waits for the last task the same way.
//
// Why spin: in a training step parallel jobs come a few microseconds apart,
// and on this project's VM a futex sleep plus wake-up costs more than that
// (hundreds of context switches per GPT step). Spinning made the eager and
// the compiled GPT step measurably faster (alternating runs, libraries side
// by side; the figures are in this comment's commit).
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/runtime.h"

namespace kiln {
namespace {

thread_local bool in_parallel_region = false;

constexpr auto kSpin = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// True once ready() holds, false if kSpin passed first.
template <class Ready>
bool spin_until(const Ready& ready) {
  const auto limit = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (ready()) return true;
    if (i % 64 == 0 && std::chrono::steady_clock::now() > limit) return false;
    cpu_relax();
  }
}

class ThreadPool {
 public:
  // A worker that cannot be started (the user's process limit, memory) is
  // an error naming the count; those already started are joined first, so
  // nothing waits on a pool half made (it once hung in its destructor).
  explicit ThreadPool(int threads) : threads_(threads) {
    try {
      for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
    } catch (const std::system_error& e) {
      const size_t started = workers_.size();
      stop_workers();
      fail("set_num_threads", "could not start a pool of ", threads, " threads: thread ", started + 2,
           " failed (", e.what(), "; the user's process limit, ulimit -u?)");
    }
  }
  ~ThreadPool() { stop_workers(); }
  int threads() const { return threads_; }

  void run(int64_t ntasks, const std::function<void(int64_t)>& task) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one job at a time
    {
      std::lock_guard<std::mutex> lock(mu_);
      // First close the previous job's claims (an index no job reaches):
      // a worker late from it that read this job's ntasks_ would otherwise
      // still claim an index of that job and count it here.
      const uint64_t job = generation_.load() + 1;
      next_.store(job << 32 | 0xffffffffu);
      task_.store(&task);
      ntasks_.store(ntasks);
      done_.store(0);
      error_ = nullptr;
      // Then open this job's: a worker that sees its number in the claim
      // counter also sees this job's task_, ntasks_ and done_.
      next_.store(job << 32);
      generation_.store(job);
    }
    cv_.notify_all();
    work(generation_.load());
    auto all_done = [&] { return done_.load() == ntasks; };
    if (!spin_until(all_done)) {
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait(lock, all_done);
    }
    std::lock_guard<std::mutex> lock(mu_);
    task_.store(nullptr);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Claims and runs tasks of job `job` until none is left. A claim is a
  // compare-exchange on (job number << 32 | next index), so a worker late
  // from an earlier job never takes, or counts, a task of a later one.
  void work(uint64_t job) {
    in_parallel_region = true;
    for (;;) {
      uint64_t claim = next_.load();
      const int64_t n = ntasks_.load();
      if (claim >> 32 != (job & 0xffffffffu) || static_cast<int64_t>(claim & 0xffffffffu) >= n) break;
      if (!next_.compare_exchange_weak(claim, claim + 1)) continue;
      try {
        (*task_.load())(static_cast<int64_t>(claim & 0xffffffffu));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      if (done_.fetch_add(1) + 1 == n) {
        std::lock_guard<std::mutex> lock(mu_);  // the caller checks and sleeps under mu_: no lost wake-up
        done_cv_.notify_all();
      }
    }
    in_parallel_region = false;
  }
  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }
  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      auto woken = [&] { return stop_.load() || generation_.load() != seen; };
      if (!spin_until(woken)) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, woken);
      }
      if (stop_.load()) return;
      seen = generation_.load();
      work(seen);
    }
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex job_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  // Atomics all: a worker late from the previous job reads them unlocked.
  std::atomic<const std::function<void(int64_t)>*> task_{nullptr};
  std::atomic<int64_t> ntasks_{0}, done_{0};
  std::atomic<uint64_t> next_{0};  // job number << 32 | next task index
  std::atomic<uint64_t> generation_{0};  // changed under mu_, read while spinning
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

int default_threads() {
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

// Note [Resizing the pool]
// set_num_threads replaces the pool while other threads may be inside
// parallel_for on the old one. Each parallel_for therefore holds a
// shared_ptr to the pool it runs on, and the old pool is destroyed (its
// workers joined) by whichever of set_num_threads or the last such caller
// lets go of it last. A worker never holds one: a parallel_for inside a
// task runs serially before it would look up the pool, so no worker can
// end up joining itself.
std::mutex pool_mu;
std::shared_ptr<ThreadPool>& pool_slot() {
  static std::shared_ptr<ThreadPool> pool;
  return pool;
}

// Every pool, the default one or one of set_num_threads, comes with
// OpenBLAS set to one thread (Note [One thread pool] in matmul_kernel.cpp).
std::shared_ptr<ThreadPool> make_pool(int n) {
  openblas_set_num_threads(1);
  return std::make_shared<ThreadPool>(n);
}

// The default pool, one thread per core; where its threads cannot all be
// started, the calling thread alone (the results are the same).
std::shared_ptr<ThreadPool> pool() {
  std::lock_guard<std::mutex> lock(pool_mu);
  auto& p = pool_slot();
  if (!p) {
    try {
      p = make_pool(default_threads());
    } catch (const Error&) {
      p = make_pool(1);
    }
  }
  return p;
}

// Note [Bounded thread count]: more threads than this many per core only
// add switching, and an unbounded count let one call exhaust the user's
// process limit (every other program of the user then failed to fork).
constexpr int kMaxThreadsPerCore = 8;
constexpr int kMaxThreadsFloor = 64;

}  // namespace

void set_num_threads(int n) {
  const int most = std::max(kMaxThreadsFloor, kMaxThreadsPerCore * default_threads());
  check(n >= 1 && n <= most, "set_num_threads", "expected a thread count >= 1 and <= ", most, " (",
        kMaxThreadsPerCore, " per core, at least ", kMaxThreadsFloor, ") but got ", n);
  // A pool that cannot start throws here, and the current one stays.
  std::shared_ptr<ThreadPool> fresh = make_pool(n), old;
  {
    std::lock_guard<std::mutex> lock(pool_mu);
    old = std::exchange(pool_slot(), std::move(fresh));
  }
  // `old` is released here, outside the lock: if no parallel_for still runs
  // on it, its workers are joined now, else by the last caller to finish.
}

int get_num_threads() { return pool()->threads(); }

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  if (in_parallel_region) {  // before the pool is looked up: Note [Resizing the pool]
    fn(begin, end);
    return;
  }
  grain = std::max<int64_t>(grain, 1);
  const int64_t n = end - begin;
  const std::shared_ptr<ThreadPool> held = pool();
  ThreadPool& p = *held;
  if (p.threads() == 1 || n < 2 * grain) {
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
