// All-reduce on symmetric memory: every rank reads its peers' buffers
// directly. Elements are reduced in rank order 0, 1, ..., W-1 by whichever
// rank reduces them, so every rank gets bit-identical results; 16-bit
// floats accumulate in float32.
#include <algorithm>
#include <cstring>

#include "distributed/group_util.h"
#include "distributed/symmetric_memory.h"
#include "kiln/runtime.h"

namespace kiln::distributed {

ReduceOp reduce_op_from_name(const std::string& name) {
  if (name == "sum") return ReduceOp::Sum;
  if (name == "avg") return ReduceOp::Avg;
  if (name == "max") return ReduceOp::Max;
  if (name == "min") return ReduceOp::Min;
  fail("distributed", "unknown reduce op '", name, "' (expected sum, avg, max or min)");
}

namespace {

template <class T> struct AccumulatorOf { using type = float; };
template <> struct AccumulatorOf<int64_t> { using type = int64_t; };

// NaN wins max and min, as in PyTorch's reductions.
template <class A>
A combine(ReduceOp op, A acc, A x) {
  switch (op) {
    case ReduceOp::Max: return (x > acc || x != x) ? x : acc;
    case ReduceOp::Min: return (x < acc || x != x) ? x : acc;
    default: return acc + x;
  }
}

// dst[lo, hi) = the reduction over ranks of src[r][lo, hi), a tile at a
// time (the tile stays in L1 while each rank's slice streams past).
template <class T>
void reduce_range(ReduceOp op, const std::vector<const T*>& src, T* dst, int64_t lo, int64_t hi) {
  using A = typename AccumulatorOf<T>::type;
  constexpr int64_t kTile = 1024;
  A acc[kTile];
  const int W = static_cast<int>(src.size());
  for (int64_t t0 = lo; t0 < hi; t0 += kTile) {
    const int64_t n = std::min(kTile, hi - t0);
    for (int64_t j = 0; j < n; ++j) acc[j] = static_cast<A>(src[0][t0 + j]);
    for (int r = 1; r < W; ++r) {
      const T* s = src[r] + t0;
      if (op == ReduceOp::Sum || op == ReduceOp::Avg)
        for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<A>(s[j]);
      else
        for (int64_t j = 0; j < n; ++j) acc[j] = combine(op, acc[j], static_cast<A>(s[j]));
    }
    if (op == ReduceOp::Avg)
      for (int64_t j = 0; j < n; ++j) acc[j] /= static_cast<A>(W);
    for (int64_t j = 0; j < n; ++j) dst[t0 + j] = static_cast<T>(acc[j]);
  }
}

}  // namespace

namespace detail {

void check_reduction(DType dtype, ReduceOp op, const char* name) {
  check(dtype == kFloat32 || dtype == kFloat16 || dtype == kBFloat16 || dtype == kInt64, name,
        "expects float32, float16, bfloat16 or int64, got ", dtype_name(dtype));
  check(!(op == ReduceOp::Avg && dtype == kInt64), name, "'avg' needs a floating dtype, got int64");
}

void reduce(DType dtype, ReduceOp op, const std::vector<const uint8_t*>& bases, void* dst, int64_t lo, int64_t hi) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    std::vector<const T*> src;
    for (const uint8_t* b : bases) src.push_back(reinterpret_cast<const T*>(b));
    parallel_for(lo, hi, 1 << 15, [&](int64_t a, int64_t b) { reduce_range<T>(op, src, static_cast<T*>(dst), a, b); });
  };
  switch (dtype) {
    case kFloat32: return run(float{});
    case kFloat16: return run(Half{});
    case kBFloat16: return run(BFloat16{});
    case kInt64: return run(int64_t{});
    default: break;
  }
}

}  // namespace detail

namespace symm_mem {

using detail::World;

namespace {

// Where t (contiguous, in the symmetric heap) lies on every rank.
std::vector<const uint8_t*> peer_buffers(World& w, const Tensor& t, const char* name) {
  check(t.defined() && t.is_contiguous(), name, "expects a contiguous tensor (got sizes ", shape_str(t.sizes()),
        ", strides ", shape_str(t.strides()), ")");
  // Checks every rank offers the same buffer; t may start inside it.
  const std::vector<void*> buffers = detail::rendezvous(t, name)->buffer_ptrs();
  const auto within = static_cast<const uint8_t*>(t.raw_data()) - static_cast<const uint8_t*>(buffers[w.rank()]);
  std::vector<const uint8_t*> bases;
  for (void* b : buffers) bases.push_back(static_cast<const uint8_t*>(b) + within);
  return bases;
}

// The checks every reduction makes; the buffers of t on every rank.
std::vector<const uint8_t*> peer_buffers(World& w, const Tensor& t, ReduceOp op, const char* name) {
  detail::check_reduction(t.dtype(), op, name);
  return peer_buffers(w, t, name);
}

}  // namespace

Tensor one_shot_all_reduce(const Tensor& input, const std::string& reduce_op) {
  const char* name = "symm_mem.one_shot_all_reduce";
  World& w = World::get();
  const ReduceOp op = reduce_op_from_name(reduce_op);
  const auto bases = peer_buffers(w, input, op, name);
  Tensor out = kiln::empty(input.sizes(), input.dtype());
  w.barrier(0, 0, name);  // every rank's input is written
  detail::reduce(input.dtype(), op, bases, out.raw_data(), 0, input.numel());
  w.barrier(1, 0, name);  // every rank has read every input
  return out;
}

Tensor& two_shot_all_reduce_(Tensor& input, const std::string& reduce_op) {
  const char* name = "symm_mem.two_shot_all_reduce_";
  World& w = World::get();
  const ReduceOp op = reduce_op_from_name(reduce_op);
  const auto bases = peer_buffers(w, input, op, name);
  const int W = w.world_size(), me = w.rank();
  const int64_t n = input.numel(), chunk = (n + W - 1) / W;
  const size_t elem = element_size(input.dtype());
  auto lo = [&](int r) { return std::min<int64_t>(n, r * chunk); };
  auto hi = [&](int r) { return std::min<int64_t>(n, (r + 1) * chunk); };
  w.barrier(0, 0, name);  // every rank's input is written
  // Reduce-scatter: this rank owns chunk `me` and reduces it in place.
  uint8_t* mine = const_cast<uint8_t*>(bases[me]);
  detail::reduce(input.dtype(), op, bases, mine, lo(me), hi(me));
  w.barrier(1, 0, name);  // every chunk is reduced
  // All-gather: copy the other chunks from their owners.
  parallel_for(0, W, 1, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r)
      if (r != me && hi(r) > lo(r))
        std::memcpy(mine + lo(r) * elem, bases[r] + lo(r) * elem, (hi(r) - lo(r)) * elem);
  });
  w.barrier(0, 0, name);  // every rank has copied before anyone writes again
  return input;
}

namespace {

// A W-fold split along dim 0 (gather: out has W times input's rows;
// scatter: input has W times out's).
void check_split(const Tensor& big, const Tensor& small, int W, const char* name) {
  using detail::rows, detail::row_shape;
  check(big.dim() >= 1 && big.dtype() == small.dtype() && rows(big) == W * rows(small) &&
            row_shape(big) == row_shape(small),
        name, "sizes ", shape_str(big.sizes()), " ", dtype_name(big.dtype()), " and ", shape_str(small.sizes()), " ",
        dtype_name(small.dtype()), ": the larger must have ", W, " times the rows of the smaller, of one shape and dtype");
}

}  // namespace

Tensor& reduce_scatter_out(const Tensor& input, Tensor& out, const std::string& reduce_op) {
  const char* name = "symm_mem.reduce_scatter_out";
  World& w = World::get();
  const ReduceOp op = reduce_op_from_name(reduce_op);
  const auto bases = peer_buffers(w, input, op, name);
  check(out.defined(), name, "expects a defined output");
  check_split(input, out, w.world_size(), name);
  const int64_t n = out.numel();
  const size_t mine = static_cast<size_t>(n * w.rank()) * element_size(input.dtype());
  std::vector<const uint8_t*> slices;
  for (const uint8_t* b : bases) slices.push_back(b + mine);
  detail::Contiguous c(out);
  w.barrier(0, 0, name);  // every rank's input is written
  detail::reduce(input.dtype(), op, slices, c.bytes(), 0, n);
  w.barrier(1, 0, name);  // every rank has read its slices
  c.finish();
  return out;
}

Tensor& all_gather_out(const Tensor& input, Tensor& out) {
  const char* name = "symm_mem.all_gather_out";
  World& w = World::get();
  const auto bases = peer_buffers(w, input, name);
  check(out.defined(), name, "expects a defined output");
  check_split(out, input, w.world_size(), name);
  const size_t bytes = detail::byte_size(input);
  detail::Contiguous c(out);
  w.barrier(0, 0, name);  // every rank's input is written
  parallel_for(0, w.world_size(), 1, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) std::memcpy(c.bytes() + r * bytes, bases[r], bytes);
  });
  w.barrier(1, 0, name);  // every rank has read every input
  c.finish();
  return out;
}

}  // namespace symm_mem
}  // namespace kiln::distributed
