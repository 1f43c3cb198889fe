// The job's shared-memory segments, signal pads and symmetric heap.
//
// Note [Segment lifetime]
// Rank r creates "/kiln-<secret>-<r>" (O_EXCL, mode 0600: another user
// cannot open it, and another job does not know the secret), maps every
// peer's segment, then meets the others at a barrier and unlinks its own
// name: from then on no name is left in /dev/shm, and the memory goes when
// the last process mapping it exits, even if every rank is killed with
// SIGKILL. A rank killed before that barrier leaves its name behind; the
// launcher removes the job's names when the job ends.
//
// Note [Signal pads]
// As in PyTorch, the slot for (channel, source) lives in the destination's
// pad: put_signal compare-and-swaps it 0 -> 1 with release order (waiting
// while the previous signal is unconsumed), wait_signal 1 -> 0 with acquire,
// so pads reset themselves and a signal orders the writes before it. Every
// wait spins, then yields, then sleeps (ranks may outnumber cores), and
// gives up at its timeout, or sooner when the peer's process is gone.
#include "distributed/world.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

namespace kiln::distributed {

using kiln::detail::concat;

namespace {

constexpr uint64_t kMagic = 0x6b696c6e73796d6dULL;  // "kilnsymm"
std::atomic<int64_t> g_default_timeout_ms{-1};

int env_int(const char* name, int fallback) {
  return static_cast<int>(detail::env_count(name, fallback, 1 << 20));
}

}  // namespace

std::string new_job_secret() {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  unsigned char bytes[16] = {};
  urandom.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  if (!urandom) throw DistributedError("[distributed] cannot read /dev/urandom for the job's secret");
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) s += {hex[b >> 4], hex[b & 15]};
  return s;
}

namespace detail {

int64_t env_count(const char* name, int64_t fallback, int64_t max) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (*end || errno || x < 0 || x > max)
    throw DistributedError(concat("[distributed] ", name, "='", v, "' is not a count in [0, ", max, "]"));
  return x;
}

}  // namespace detail

JobEnv job_env() {
  JobEnv e;
  e.rank = env_int("RANK", 0);
  e.world_size = env_int("WORLD_SIZE", 1);
  e.local_rank = env_int("LOCAL_RANK", e.rank);
  e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size);
  if (const char* s = std::getenv("KILN_JOB_SECRET")) e.secret = s;
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  e.master_port = env_int("MASTER_PORT", e.master_port);
  if (e.master_port < 1 || e.master_port > 65535)
    throw DistributedError(concat("[distributed] MASTER_PORT ", e.master_port, " is not a TCP port"));
  if (e.local_world_size < 1 || e.local_rank >= e.local_world_size || e.world_size % e.local_world_size != 0)
    throw DistributedError(concat("[distributed] LOCAL_RANK ", e.local_rank, " and LOCAL_WORLD_SIZE ",
                                  e.local_world_size, " do not fit WORLD_SIZE ", e.world_size));
  if (e.world_size < 1 || e.rank >= e.world_size)
    throw DistributedError(concat("[distributed] RANK ", e.rank, " is not below WORLD_SIZE ", e.world_size));
  if (e.world_size > 1 && e.secret.empty())
    throw DistributedError(concat("[distributed] WORLD_SIZE is ", e.world_size,
                                          " but KILN_JOB_SECRET is unset: start the ranks with `kiln run --nproc N`"));
  for (char c : e.secret)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      throw DistributedError("[distributed] KILN_JOB_SECRET must be letters and digits");
  return e;
}

int64_t default_timeout_ms() {
  int64_t t = g_default_timeout_ms.load(std::memory_order_relaxed);
  if (t < 0) {
    t = detail::env_count("KILN_DIST_TIMEOUT_MS", 30000, int64_t{1} << 40);
    if (t == 0) throw DistributedError("[distributed] KILN_DIST_TIMEOUT_MS must be positive: every wait has a timeout");
    g_default_timeout_ms.store(t, std::memory_order_relaxed);
  }
  return t;
}

void set_default_timeout_ms(int64_t ms) {
  check(ms > 0, "distributed.set_default_timeout_ms", "the timeout must be positive (got ", ms,
        " ms): every wait has a timeout");
  g_default_timeout_ms.store(ms, std::memory_order_relaxed);
}

namespace detail {

using Clock = std::chrono::steady_clock;

int64_t resolve_timeout(int64_t timeout_ms) { return timeout_ms > 0 ? timeout_ms : default_timeout_ms(); }

namespace {

std::string segment_name(const std::string& secret, int rank) {
  return "/kiln-" + secret + "-" + std::to_string(rank);
}

// 1 GiB, or less where /dev/shm is small (a container's is often 64 MiB):
// at most half of it per local rank. Pages count only once written, but a
// write past /dev/shm's size is a SIGBUS. From the size, not the free space,
// so every rank computes the same.
int64_t default_heap_mb(int local_world_size) {
  struct statvfs st {};
  if (::statvfs("/dev/shm", &st) != 0) return 1024;
  const uint64_t total = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  return std::clamp<int64_t>(static_cast<int64_t>(total / 2 / std::max(1, local_world_size) >> 20), 1, 1024);
}

bool process_gone(int32_t pid) { return pid > 0 && ::kill(pid, 0) == -1 && errno == ESRCH; }

// Polls `done` until it holds, the deadline passes, or `peer_gone` says the
// peer cannot answer any more. Returns whether `done` held.
template <class Done, class Gone>
bool wait_for(Done done, Clock::time_point deadline, Gone peer_gone) {
  for (uint64_t i = 0;; ++i) {
    if (done()) return true;
    if (i < 128) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else if (i < 2048) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if ((i & 63) == 63 && (Clock::now() > deadline || peer_gone())) return done();
  }
}

}  // namespace

World& World::get() {
  static World* world = new World();  // never destroyed: tensors may outlive statics
  return *world;
}

World::World() : env_(job_env()) {
  const char* op = "distributed.init";
  if (env_.secret.empty()) env_.secret = new_job_secret();  // a world of one, started by hand
  const int64_t heap_mb = env_int("KILN_SYMM_HEAP_MB", default_heap_mb(env_.local_world_size));
  segment_bytes_ = kHeapOffset + static_cast<size_t>(heap_mb) * (size_t{1} << 20);
  check(kPadOffset + signal_pad_bytes() <= kHeapOffset, op, "world size ", world_size(), " is too large");
  const int W = world_size(), me = rank();
  bases_.assign(W, nullptr);
  auto map = [&](int fd) {
    void* p = ::mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw DistributedError(concat("[", op, "] mmap failed: ", std::strerror(errno)));
    return static_cast<uint8_t*>(p);
  };
  const std::string own = segment_name(env_.secret, me);
  const int fd = ::shm_open(own.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    throw DistributedError(concat("[", op, "] rank ", me, " cannot create its segment: ", std::strerror(errno),
                                  errno == EEXIST ? " (another process of this job already did: two ranks with one RANK?)" : ""));
  if (::ftruncate(fd, static_cast<off_t>(segment_bytes_)) != 0) {
    ::close(fd);
    ::shm_unlink(own.c_str());
    throw DistributedError(concat("[", op, "] cannot size the segment: ", std::strerror(errno)));
  }
  bases_[me] = map(fd);
  SegmentHeader& h = header(me);
  h.rank = me;
  h.world_size = W;
  h.pid = static_cast<int32_t>(::getpid());
  std::atomic_ref<uint64_t>(h.magic).store(kMagic, std::memory_order_release);

  const auto deadline = Clock::now() + std::chrono::milliseconds(default_timeout_ms());
  for (int r = 0; r < W; ++r) {
    if (r == me) continue;
    const std::string name = segment_name(env_.secret, r);
    int pfd = -1;
    struct stat st {};
    const bool opened = wait_for(
        [&] {
          if (pfd < 0) pfd = ::shm_open(name.c_str(), O_RDWR, 0);
          return pfd >= 0 && ::fstat(pfd, &st) == 0 && st.st_size > 0;
        },
        deadline, [] { return false; });
    if (!opened) {
      if (pfd >= 0) ::close(pfd);
      ::shm_unlink(own.c_str());
      throw DistributedError(concat("[", op, "] rank ", me, " waited ", default_timeout_ms(), " ms for rank ", r,
                                    "'s segment: rank ", r, " never started or died before it joined"));
    }
    if (static_cast<size_t>(st.st_size) != segment_bytes_) {
      ::close(pfd);
      ::shm_unlink(own.c_str());
      throw DistributedError(concat("[", op, "] rank ", r, "'s segment is ", st.st_size, " bytes, rank ", me, "'s ",
                                    segment_bytes_, ": KILN_SYMM_HEAP_MB must be the same on every rank"));
    }
    bases_[r] = map(pfd);
    const bool ready = wait_for(
        [&] { return std::atomic_ref<uint64_t>(header(r).magic).load(std::memory_order_acquire) == kMagic; },
        deadline, [] { return false; });
    check(ready, op, "rank ", r, "'s segment never became ready");
  }
  try {
    barrier(0, 0, op);
  } catch (...) {
    ::shm_unlink(own.c_str());
    throw;
  }
  ::shm_unlink(own.c_str());  // Note [Segment lifetime]
  free_[0] = heap_bytes();
}

void World::flip_slot(bool put, int peer, int channel, int64_t timeout_ms, const char* op) {
  const int W = world_size();
  check(peer >= 0 && peer < W, op, "rank ", peer, " is not in the world of ", W);
  check(channel >= 0 && channel < symm_mem::kNumChannels, op, "channel ", channel, " is not in [0, ",
        symm_mem::kNumChannels, ")");
  // The slot of (channel, source) in the destination's pad: put raises it
  // 0 -> 1 with release, wait takes it 1 -> 0 with acquire.
  std::atomic_ref<uint32_t> slot(put ? signal_pad(peer)[channel * W + rank()] : signal_pad(rank())[channel * W + peer]);
  const uint32_t from = put ? 0 : 1;
  const std::memory_order order = put ? std::memory_order_release : std::memory_order_acquire;
  const int64_t ms = resolve_timeout(timeout_ms);
  const bool ok = wait_for(
      [&] {
        uint32_t expected = from;
        return slot.compare_exchange_strong(expected, 1 - from, order, std::memory_order_relaxed);
      },
      Clock::now() + std::chrono::milliseconds(ms), [&] { return process_gone(header(peer).pid); });
  if (ok) return;
  // The message is only made here: signals are the collectives' hot path.
  const std::string what = put ? concat("to signal rank ", peer, " on channel ", channel)
                               : concat("for a signal from rank ", peer, " on channel ", channel);
  if (process_gone(header(peer).pid))
    throw DistributedError(concat("[", op, "] rank ", rank(), " was waiting ", what, ", and rank ", peer, " has exited"));
  throw DistributedError(concat("[", op, "] rank ", rank(), " waited ", ms, " ms ", what, ": rank ", peer, " ",
                                put ? "did not take the previous signal (hung?)" : "did not answer (hung?)"));
}

void World::put_signal(int dst, int channel, int64_t timeout_ms, const char* op) {
  flip_slot(true, dst, channel, timeout_ms, op);
}

void World::wait_signal(int src, int channel, int64_t timeout_ms, const char* op) {
  flip_slot(false, src, channel, timeout_ms, op);
}

void World::barrier(int channel, int64_t timeout_ms, const char* op) {
  const int W = world_size();
  // Rank me signals me+1, me+2, ... first, so no one peer is signalled by
  // every rank at once.
  for (int k = 1; k < W; ++k) put_signal((rank() + k) % W, channel, timeout_ms, op);
  for (int k = 1; k < W; ++k) wait_signal((rank() - k + W) % W, channel, timeout_ms, op);
}

World::Block World::allocate(size_t bytes) {
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  std::lock_guard<std::mutex> lock(heap_mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < rounded) continue;
    const size_t offset = it->first, left = it->second - rounded;
    free_.erase(it);
    if (left) free_[offset + rounded] = left;
    Block b{offset, rounded, next_serial_++};
    allocated_[offset] = b;
    return b;
  }
  throw DistributedError(concat("[symm_mem.empty] the symmetric heap (", heap_bytes() >> 20,
                                " MiB, KILN_SYMM_HEAP_MB) has no free block of ", rounded, " bytes"));
}

void World::release(size_t offset) {
  std::lock_guard<std::mutex> lock(heap_mu_);
  auto a = allocated_.find(offset);
  if (a == allocated_.end()) return;
  size_t start = offset, bytes = a->second.bytes;
  allocated_.erase(a);
  auto next = free_.find(start + bytes);
  if (next != free_.end()) {
    bytes += next->second;
    free_.erase(next);
  }
  auto prev = free_.lower_bound(start);
  if (prev != free_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      bytes += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = bytes;
}

World::Block World::block_at(size_t offset, const char* op) const {
  std::lock_guard<std::mutex> lock(heap_mu_);
  auto it = allocated_.upper_bound(offset);
  if (it != allocated_.begin()) {
    --it;
    if (offset < it->first + it->second.bytes) return it->second;
  }
  fail(op, "the tensor is not in the symmetric heap: allocate it with symm_mem::empty");
}

}  // namespace detail
}  // namespace kiln::distributed
