// What every process-group backend checks and how it stages tensors.
// Internal to src/distributed.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/distributed.h"
#include "kiln/runtime.h"

namespace kiln::distributed::detail {

using kiln::detail::concat;

// What a collective works on: t itself when contiguous, else a contiguous
// copy that finish() writes back.
struct Contiguous {
  Tensor& t;
  Tensor work;
  explicit Contiguous(Tensor& t) : t(t), work(t.is_contiguous() ? t : t.contiguous()) {}
  uint8_t* bytes() { return static_cast<uint8_t*>(work.raw_data()); }
  void finish() {
    if (!work.is_same(t)) t.copy_(work);
  }
};

inline int64_t rows(const Tensor& t) { return t.dim() == 0 ? 1 : t.size(0); }
inline Shape row_shape(const Tensor& t) {
  return t.dim() == 0 ? Shape{} : Shape(t.sizes().begin() + 1, t.sizes().end());
}
inline size_t byte_size(const Tensor& t) { return static_cast<size_t>(t.numel()) * element_size(t.dtype()); }

inline void check_cpu(const Tensor& t, const char* name) {
  check(t.defined() && t.device().type() == DeviceType::CPU, name, "expects defined CPU tensors");
}
inline void check_rank(int r, int world_size, const char* name) {
  check(r >= 0 && r < world_size, name, "rank ", r, " is not in the group of ", world_size);
}
// big must have want_rows rows of small's row shape and dtype.
inline void check_rows(const Tensor& big, const Tensor& small, int64_t want_rows, const char* name, const char* what) {
  check(big.dim() >= 1 && big.dtype() == small.dtype() && rows(big) == want_rows && row_shape(big) == row_shape(small),
        name, "sizes ", shape_str(big.sizes()), " ", dtype_name(big.dtype()), " must have ", what, " rows (",
        want_rows, ") of shape ", shape_str(row_shape(small)), " and dtype ", dtype_name(small.dtype()));
}
// all_to_all_v's operands: one dtype, rows of one shape, W splits per side
// that count their tensor's rows.
inline void check_all_to_all_v(const Tensor& out, const Tensor& input, const std::vector<int64_t>& output_splits,
                               const std::vector<int64_t>& input_splits, int world_size, const char* name) {
  check_cpu(out, name);
  check_cpu(input, name);
  check(input.dim() >= 1 && out.dim() >= 1 && input.dtype() == out.dtype() && row_shape(input) == row_shape(out),
        name, "input ", shape_str(input.sizes()), " ", dtype_name(input.dtype()), " and output ",
        shape_str(out.sizes()), " ", dtype_name(out.dtype()), " must have the same dtype and rows of one shape");
  auto check_splits = [&](const std::vector<int64_t>& s, const Tensor& t, const char* which) {
    int64_t sum = 0;
    for (int64_t x : s) {
      check(x >= 0, name, which, " splits must not be negative");
      sum += x;
    }
    check(static_cast<int>(s.size()) == world_size && sum == rows(t), name, which, " splits must be ", world_size,
          " counts summing to its ", rows(t), " rows");
  };
  check_splits(input_splits, input, "input");
  check_splits(output_splits, out, "output");
}
// The text of a splits mismatch: rank `from` sends `sent` rows to rank
// `to`, which expects `expected`.
inline std::string splits_mismatch(int from, int to, int64_t sent, int64_t expected) {
  return concat("rank ", from, " sends ", sent, " rows to rank ", to, ", which expects ", expected, " (output_splits[",
                from, "])");
}

// The backends (process_group.cpp, gloo_group.cpp, hierarchical_group.cpp).
// symm: the ranks of this machine. gloo: the job's ranks `members` (global
// ranks; empty: all). symm+gloo: every rank, symm inside nodes and gloo
// across them.
std::unique_ptr<ProcessGroup> make_symm_group();
std::unique_ptr<ProcessGroup> make_gloo_group(const JobEnv& env, std::vector<int> members = {});
std::unique_ptr<ProcessGroup> make_hierarchical_group(const JobEnv& env);

}  // namespace kiln::distributed::detail
