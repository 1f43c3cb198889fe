// all_to_all_vdev and all_to_all_vdev_2d on symmetric buffers: after a
// barrier every rank reads its peers' splits and copies its rows straight
// out of their input buffers; a second barrier keeps the inputs untouched
// until every peer has read them.
#include <algorithm>
#include <cstring>
#include <string>

#include "distributed/symmetric_memory.h"

namespace kiln::distributed::symm_mem {

using detail::World;

namespace {

// The same tensor's data in rank r's heap (t from symm_mem::empty here).
const uint8_t* on_rank(World& w, const Tensor& t, int r) {
  return w.heap(r) + (static_cast<const uint8_t*>(t.raw_data()) - w.heap(w.rank()));
}

void check_symmetric(const Tensor& t, const char* name, const char* what) {
  check(t.is_contiguous(), name, what, " must be contiguous (got sizes ", shape_str(t.sizes()), ")");
  detail::rendezvous(t, name);  // in the heap, and every rank offers the same buffer
}

struct Exchange {
  World& w;
  const char* name;
  int64_t row_bytes = 0, out_rows = 0;
};

Exchange start(const Tensor& input, Tensor& out, const Tensor& input_splits, Tensor& out_splits_offsets,
               int64_t splits_per_rank, const char* name) {
  World& w = World::get();
  const int64_t W = w.world_size();
  const Shape row(input.dim() >= 1 ? input.sizes().begin() + 1 : input.sizes().end(), input.sizes().end());
  check(input.dim() >= 1 && out.dim() >= 1 && input.dtype() == out.dtype() &&
            row == Shape(out.sizes().begin() + 1, out.sizes().end()),
        name, "input ", shape_str(input.sizes()), " ", dtype_name(input.dtype()), " and out ", shape_str(out.sizes()),
        " ", dtype_name(out.dtype()), " must have the same dtype and rows of one shape");
  check(input_splits.dtype() == kInt64 && input_splits.dim() == 1 && input_splits.size(0) == W * splits_per_rank,
        name, "input_splits must be int64 of ", W * splits_per_rank, " elements, got ", dtype_name(input_splits.dtype()),
        " ", shape_str(input_splits.sizes()));
  check(out_splits_offsets.dtype() == kInt64 && out_splits_offsets.sizes() == Shape{2, W * splits_per_rank}, name,
        "out_splits_offsets must be int64 of shape ", shape_str({2, W * splits_per_rank}), ", got ",
        dtype_name(out_splits_offsets.dtype()), " ", shape_str(out_splits_offsets.sizes()));
  for (auto [t, what] : {std::pair<const Tensor*, const char*>{&input, "input"}, {&out, "out"},
                         {&input_splits, "input_splits"}, {&out_splits_offsets, "out_splits_offsets"}})
    check_symmetric(*t, name, what);
  int64_t sent = 0;
  const int64_t* mine = input_splits.data_ptr<int64_t>();
  for (int64_t i = 0; i < input_splits.numel(); ++i) {
    check(mine[i] >= 0, name, "input_splits[", i, "] is ", mine[i], ": splits must not be negative");
    sent += mine[i];
  }
  check(sent <= input.size(0), name, "input_splits send ", sent, " rows but input has ", input.size(0));
  Exchange x{w, name};
  x.row_bytes = static_cast<int64_t>(element_size(input.dtype())) * shape_numel(row);
  x.out_rows = out.size(0);
  w.barrier(0, 0, name);  // every rank's splits and rows are written
  return x;
}

// Copies `rows` rows of peer p's input from row `from` to out's row `to`;
// rows that would land past out are not copied but noted, and raised after
// the closing barrier (so no peer is left waiting).
void copy_rows(Exchange& x, const Tensor& input, Tensor& out, int p, int64_t from, int64_t to, int64_t rows,
               int64_t& needed) {
  needed = std::max(needed, to + rows);
  if (to + rows > x.out_rows || rows == 0) return;
  std::memcpy(static_cast<uint8_t*>(out.raw_data()) + to * x.row_bytes, on_rank(x.w, input, p) + from * x.row_bytes,
              static_cast<size_t>(rows * x.row_bytes));
}

void finish(Exchange& x, int64_t needed) {
  x.w.barrier(1, 0, x.name);  // every rank has read every input
  check(needed <= x.out_rows, x.name, "the rows sent here need ", needed, " rows of out, which has ", x.out_rows);
}

}  // namespace

void all_to_all_vdev(const Tensor& input, Tensor& out, const Tensor& input_splits, Tensor& out_splits_offsets) {
  const char* name = "symm_mem.all_to_all_vdev";
  Exchange x = start(input, out, input_splits, out_splits_offsets, 1, name);
  const int W = x.w.world_size(), me = x.w.rank();
  int64_t* splits = out_splits_offsets.data_ptr<int64_t>();
  int64_t* offsets = splits + W;
  int64_t at = 0, needed = 0;
  for (int p = 0; p < W; ++p) {
    const auto* theirs = reinterpret_cast<const int64_t*>(on_rank(x.w, input_splits, p));
    int64_t from = 0;
    for (int r = 0; r < me; ++r) from += theirs[r];
    splits[p] = theirs[me];
    offsets[p] = at;
    copy_rows(x, input, out, p, from, at, theirs[me], needed);
    at += theirs[me];
  }
  finish(x, needed);
}

void all_to_all_vdev_2d(const Tensor& input, Tensor& out, const Tensor& input_splits, Tensor& out_splits_offsets,
                        int64_t major_align) {
  const char* name = "symm_mem.all_to_all_vdev_2d";
  check(major_align >= 1, name, "major_align must be >= 1, got ", major_align);
  World& w = World::get();
  const int64_t W = w.world_size();
  check(input_splits.dim() == 1 && input_splits.numel() % W == 0, name, "input_splits must hold W * E counts (W = ",
        W, "), got ", shape_str(input_splits.sizes()));
  const int64_t E = input_splits.numel() / W;
  Exchange x = start(input, out, input_splits, out_splits_offsets, E, name);
  const int me = w.rank();
  int64_t* splits = out_splits_offsets.data_ptr<int64_t>();
  int64_t* offsets = splits + E * W;
  int64_t at = 0, needed = 0;
  for (int64_t e = 0; e < E; ++e) {
    at = (at + major_align - 1) / major_align * major_align;  // each expert's block starts aligned
    for (int p = 0; p < W; ++p) {
      const auto* theirs = reinterpret_cast<const int64_t*>(on_rank(w, input_splits, p));
      const int64_t index = me * E + e;  // rank-major on the sender
      int64_t from = 0;
      for (int64_t i = 0; i < index; ++i) from += theirs[i];
      splits[e * W + p] = theirs[index];
      offsets[e * W + p] = at;
      copy_rows(x, input, out, p, from, at, theirs[index], needed);
      at += theirs[index];
    }
  }
  finish(x, needed);
}

}  // namespace kiln::distributed::symm_mem
