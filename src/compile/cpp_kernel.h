// A generated loop as the cpp backend hands it from code generation
// (cpp_backend.cpp) to the runtime (cpp_runtime.cpp): which graph values it
// reads and writes, how it indexes them, and the loaded function.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cpp_toolchain.h"
#include "graph.h"

namespace kiln::compiler::detail {

using FusedFn = void (*)(const float* const* in, const float* scalars, float* const* out, int64_t lo, int64_t hi);

struct FusedKernel final : FusedEntry {
  const std::vector<int>& nodes() const override { return node_list; }
  // Checks that this call's values fit the loop, then runs it over the
  // thread pool (cpp_runtime.cpp).
  bool run(std::vector<Tensor>& vals, const Trace& t) const override;

  std::vector<int> node_list;  // in order
  std::vector<int> inputs;   // tensor inputs
  // Per input: how the loop indexes it, 'j' per element (rows * cols
  // elements), 'r' per row (rows elements), 'c' per column (cols elements),
  // 'q' as rows of `width` elements placed in a column range (the input of
  // a slice_backward over the last dim).
  std::vector<char> index;
  std::vector<int64_t> width;
  std::vector<int> scalars;  // 0-dim inputs, read once per call
  std::vector<int> outputs;  // values needed after the loop
  // Per output: the index in inputs of the graph input it overwrites in
  // place (the loop writes a written-back value straight into its
  // destination, Note [Writes to real tensors]), or -1.
  std::vector<int> in_place;
  // A value whose shape is the iteration space: rows of `cols` elements
  // (its last dim). cols == 0: one flat loop over all elements.
  int space_value = -1;
  int64_t cols = 0;
  // A norm computed row by row at the head of the loop: its input, weight
  // and bias (-1 when absent).
  int row_x = -1, row_w = -1, row_b = -1;
  // Reshapes inside the loop whose results are needed after it: run as
  // views of their (stored) source once the loop is done.
  std::vector<std::pair<int, int>> views_after;  // (node, its input)
  std::vector<int> col_sums;  // outputs (indices) that are ColSums: out[] holds the chunks' partial rows
  std::string symbol;
  FusedFn fn = nullptr;
  std::shared_ptr<SharedObject> library;  // holds fn's code loaded
};

// Rows per call of a row loop (a fixed chunk: ColSum's partial rows).
inline int64_t chunk_rows(int64_t cols) { return std::max<int64_t>(1, 32768 / cols); }


}  // namespace kiln::compiler::detail
