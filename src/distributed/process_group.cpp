// The "symm" process group: torch.distributed's collectives on one machine
// over symmetric memory. Each rank copies its input into a scratch block of
// its symmetric heap (the same offset on every rank), the ranks meet at a
// barrier, and each reads what it needs straight from its peers' scratch
// blocks: one copy in, one read across. Tensors larger than the scratch
// go through it in pieces where the collective allows (all_reduce,
// broadcast, send/recv).
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>

#include "distributed/group_util.h"
#include "distributed/symmetric_memory.h"
#include "kiln/runtime.h"

namespace kiln::distributed {

using detail::World;
using namespace detail;

namespace {

// Channels: 0 and 1 for the collectives' barriers, 2 and 3 for
// point-to-point (data ready, data taken).
constexpr int kDataReady = 2, kDataTaken = 3;
// The first bytes of the scratch block hold this rank's all_to_all_v splits.
constexpr size_t kSplitsBytes = 8192;

class SymmGroup final : public ProcessGroup {
 public:
  SymmGroup() : w_(World::get()) {
    // 256 MiB, or a quarter of a smaller heap.
    const int64_t scratch_mb = std::clamp<int64_t>(static_cast<int64_t>(w_.heap_bytes() >> 22), 1, 256);
    scratch_ = w_.allocate(static_cast<size_t>(detail::env_count("KILN_SYMM_SCRATCH_MB", scratch_mb, 1 << 20)) << 20);
    check(scratch_.bytes > kSplitsBytes, "distributed.init_process_group", "KILN_SYMM_SCRATCH_MB must be at least 1");
    one_shot_max_ = static_cast<size_t>(detail::env_count(
        "KILN_SYMM_ONE_SHOT_MAX_BYTES", static_cast<int64_t>(default_one_shot_max(size())), int64_t{1} << 50));
    w_.barrier(0, 0, "distributed.init_process_group");
  }
  ~SymmGroup() override {
    if (release_scratch_) w_.release(scratch_.offset);
  }
  void keep_scratch() { release_scratch_ = false; }

  int rank() const override { return w_.rank(); }
  int size() const override { return w_.world_size(); }
  std::string backend() const override { return "symm"; }
  size_t one_shot_max_bytes() const override { return one_shot_max_; }
  void set_one_shot_max_bytes(size_t bytes) override { one_shot_max_ = bytes; }

  void all_reduce_impl(Tensor& t, ReduceOp op, int64_t timeout_ms) override {
    const char* name = "distributed.all_reduce";
    Contiguous c(t);
    const size_t elem = element_size(t.dtype());
    const int64_t n = t.numel(), piece = static_cast<int64_t>(capacity() / elem);
    const int W = size(), me = rank();
    for (int64_t start = 0; start < n; start += piece) {
      const int64_t count = std::min(piece, n - start);
      uint8_t* data = c.bytes() + start * elem;
      std::memcpy(scratch(me), data, count * elem);
      w_.barrier(0, timeout_ms, name);  // every rank's piece is staged
      if (static_cast<size_t>(count) * elem <= one_shot_max_) {
        detail::reduce(t.dtype(), op, scratches(0), data, 0, count);
        w_.barrier(1, timeout_ms, name);  // every rank has read every piece
        continue;
      }
      // Two-shot: reduce this rank's slice in its scratch, then gather.
      const int64_t slice = (count + W - 1) / W;
      auto lo = [&](int r) { return std::min<int64_t>(count, r * slice); };
      auto hi = [&](int r) { return std::min<int64_t>(count, (r + 1) * slice); };
      detail::reduce(t.dtype(), op, scratches(0), scratch(me), lo(me), hi(me));
      w_.barrier(1, timeout_ms, name);  // every slice is reduced
      parallel_for(0, W, 1, [&](int64_t a, int64_t b) {
        for (int64_t r = a; r < b; ++r)
          std::memcpy(data + lo(r) * elem, scratch(r) + lo(r) * elem, (hi(r) - lo(r)) * elem);
      });
      w_.barrier(0, timeout_ms, name);  // every rank has gathered
    }
    c.finish();
  }

  void broadcast_impl(Tensor& t, int src, int64_t timeout_ms) override {
    const char* name = "distributed.broadcast";
    Contiguous c(t);
    const size_t total = static_cast<size_t>(t.numel()) * element_size(t.dtype());
    for (size_t start = 0; start < total; start += capacity()) {
      const size_t bytes = std::min(capacity(), total - start);
      if (rank() == src) std::memcpy(scratch(src), c.bytes() + start, bytes);
      w_.barrier(0, timeout_ms, name);
      if (rank() != src) std::memcpy(c.bytes() + start, scratch(src), bytes);
      w_.barrier(1, timeout_ms, name);
    }
    c.finish();
  }

  void all_gather_impl(Tensor& out, const Tensor& input, int64_t timeout_ms) override {
    const char* name = "distributed.all_gather";
    const Tensor in = input.contiguous();
    const size_t bytes = staged_bytes(in, name);
    Contiguous c(out);
    std::memcpy(scratch(rank()), in.raw_data(), bytes);
    w_.barrier(0, timeout_ms, name);
    for (int r = 0; r < size(); ++r) std::memcpy(c.bytes() + r * bytes, scratch(r), bytes);
    w_.barrier(1, timeout_ms, name);
    c.finish();
  }

  void reduce_scatter_impl(Tensor& out, const Tensor& input, ReduceOp op, int64_t timeout_ms) override {
    const char* name = "distributed.reduce_scatter";
    const Tensor in = input.contiguous();
    const size_t bytes = staged_bytes(in, name);
    Contiguous c(out);
    std::memcpy(scratch(rank()), in.raw_data(), bytes);
    w_.barrier(0, timeout_ms, name);
    detail::reduce(out.dtype(), op, scratches(bytes / size() * rank()), c.bytes(), 0, out.numel());
    w_.barrier(1, timeout_ms, name);
    c.finish();
  }

  void all_to_all_v_impl(Tensor& out, const Tensor& input, const std::vector<int64_t>& output_splits,
                         const std::vector<int64_t>& input_splits, int64_t timeout_ms) override {
    const char* name = "distributed.all_to_all_v";
    const int W = size(), me = rank();
    const Tensor in = input.contiguous();
    const size_t bytes = staged_bytes(in, name);
    const size_t row_bytes = static_cast<size_t>(shape_numel(row_shape(in))) * element_size(in.dtype());
    Contiguous c(out);
    std::memcpy(splits(me), input_splits.data(), W * sizeof(int64_t));
    std::memcpy(scratch(me), in.raw_data(), bytes);
    w_.barrier(0, timeout_ms, name);
    std::string mismatch;
    size_t out_row = 0;
    for (int p = 0; p < W; ++p) {
      const int64_t* theirs = splits(p);
      if (theirs[me] != output_splits[p]) {
        if (mismatch.empty()) mismatch = splits_mismatch(p, me, theirs[me], output_splits[p]);
        out_row += output_splits[p];
        continue;
      }
      int64_t first = 0;
      for (int k = 0; k < me; ++k) first += theirs[k];
      std::memcpy(c.bytes() + out_row * row_bytes, scratch(p) + first * row_bytes, theirs[me] * row_bytes);
      out_row += theirs[me];
    }
    w_.barrier(1, timeout_ms, name);  // the peers finish too, so none hangs on an error here
    if (!mismatch.empty()) fail(name, mismatch);
    c.finish();
  }

  void send_impl(const Tensor& t, int dst, int64_t timeout_ms) override {
    const char* name = "distributed.send";
    const Tensor in = t.contiguous();
    const size_t total = static_cast<size_t>(in.numel()) * element_size(in.dtype());
    const auto* data = static_cast<const uint8_t*>(in.raw_data());
    size_t start = 0;
    do {  // one round even for an empty tensor, so recv returns too
      const size_t bytes = std::min(capacity(), total - start);
      std::memcpy(scratch(rank()), data + start, bytes);
      w_.put_signal(dst, kDataReady, timeout_ms, name);
      w_.wait_signal(dst, kDataTaken, timeout_ms, name);
      start += bytes;
    } while (start < total);
  }

  void recv_impl(Tensor& t, int src, int64_t timeout_ms) override {
    const char* name = "distributed.recv";
    Contiguous c(t);
    const size_t total = static_cast<size_t>(t.numel()) * element_size(t.dtype());
    size_t start = 0;
    do {
      const size_t bytes = std::min(capacity(), total - start);
      w_.wait_signal(src, kDataReady, timeout_ms, name);
      std::memcpy(c.bytes() + start, scratch(src), bytes);
      w_.put_signal(src, kDataTaken, timeout_ms, name);
      start += bytes;
    } while (start < total);
    c.finish();
  }

  void barrier_impl(int64_t timeout_ms) override { w_.barrier(0, timeout_ms, "distributed.barrier"); }

 private:
  // Where one-shot stops winning, from kiln-bench-collectives on the 2-core
  // machine of BENCHMARKS.md (measured at 4 KiB, 64 KiB, 1 MiB, 64 MiB):
  // with 2 ranks one-shot is faster up to 1 MiB and two-shot at 64 MiB;
  // with 4, one-shot at 64 KiB and two-shot from 1 MiB.
  static size_t default_one_shot_max(int world_size) { return world_size <= 2 ? size_t{1} << 20 : size_t{256} << 10; }

  uint8_t* scratch(int r) const { return w_.heap(r) + scratch_.offset + kSplitsBytes; }
  int64_t* splits(int r) const { return reinterpret_cast<int64_t*>(w_.heap(r) + scratch_.offset); }
  size_t capacity() const { return scratch_.bytes - kSplitsBytes; }
  std::vector<const uint8_t*> scratches(size_t byte_offset) const {
    std::vector<const uint8_t*> b;
    for (int r = 0; r < size(); ++r) b.push_back(scratch(r) + byte_offset);
    return b;
  }
  size_t staged_bytes(const Tensor& in, const char* name) const {
    const size_t bytes = static_cast<size_t>(in.numel()) * element_size(in.dtype());
    check(bytes <= capacity(), name, "the input's ", bytes, " bytes exceed the scratch buffer's ", capacity(),
          " (KILN_SYMM_SCRATCH_MB)");
    return bytes;
  }

  World& w_;
  World::Block scratch_{};
  size_t one_shot_max_ = 0;
  bool release_scratch_ = true;
};

std::mutex g_mu;
std::unique_ptr<ProcessGroup> g_default;

}  // namespace

namespace detail {
std::unique_ptr<ProcessGroup> make_symm_group() { return std::make_unique<SymmGroup>(); }
}  // namespace detail

ProcessGroup& init_process_group(const std::string& backend) {
  const char* name = "distributed.init_process_group";
  std::lock_guard<std::mutex> lock(g_mu);
  check(!g_default, name, "the default process group is already initialized (destroy_process_group ends it)");
  check(backend == "symm" || backend == "auto" || backend == "gloo", name, "unknown backend '", backend,
        "' (expected symm, gloo or auto)");
  const JobEnv env = job_env();
  const bool one_node = env.local_world_size == env.world_size;
  check(backend != "symm" || one_node, name, "backend 'symm' serves the ranks of one machine; this job has ",
        env.world_size, " ranks, ", env.local_world_size, " per node: use 'gloo' or 'auto'");
  // "auto": shared memory where every rank shares this machine, else
  // shared memory inside nodes and gloo across them.
  g_default = backend == "gloo" ? make_gloo_group(env) : one_node ? make_symm_group() : make_hierarchical_group(env);
  return *g_default;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_default != nullptr;
}

ProcessGroup& default_group() {
  std::lock_guard<std::mutex> lock(g_mu);
  check(g_default != nullptr, "distributed", "the default process group is not initialized: call init_process_group");
  return *g_default;
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_default) return;
  // The peers must be done reading this rank's scratch before it is reused.
  // A survivor of a dead peer cannot know that: it keeps the block (a leak
  // in its heap, nothing else) and still ends the group, so it can exit
  // cleanly.
  try {
    g_default->barrier(1000);
  } catch (const DistributedError&) {
    if (auto* symm = dynamic_cast<SymmGroup*>(g_default.get())) symm->keep_scratch();
  }
  g_default.reset();
}

int get_rank() { return default_group().rank(); }
int get_world_size() { return default_group().size(); }

}  // namespace kiln::distributed
