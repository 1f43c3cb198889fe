// Memory formats (torch.memory_format): the channels-last orders of 4- and
// 5-dim tensors, and how a tensor's strides are classified.
#include "kiln/tensor.h"


namespace kiln {
namespace {

// The dims of a rank-`n` tensor in `f`'s order, outermost first.
std::vector<int64_t> dim_order(MemoryFormat f, int64_t n) {
  if (f == MemoryFormat::ChannelsLast && n == 4) return {0, 2, 3, 1};
  if (f == MemoryFormat::ChannelsLast3d && n == 5) return {0, 2, 3, 4, 1};
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t d = 0; d < n; ++d) order[static_cast<size_t>(d)] = d;
  return order;
}

int64_t rank_of(MemoryFormat f) { return f == MemoryFormat::ChannelsLast ? 4 : 5; }

}  // namespace

const char* memory_format_name(MemoryFormat f) {
  switch (f) {
    case MemoryFormat::Contiguous: return "contiguous_format";
    case MemoryFormat::ChannelsLast: return "channels_last";
    case MemoryFormat::ChannelsLast3d: return "channels_last_3d";
    case MemoryFormat::Preserve: return "preserve_format";
  }
  return "?";
}

Shape memory_format_strides(const Shape& sizes, MemoryFormat f, const char* op) {
  const int64_t n = static_cast<int64_t>(sizes.size());
  check(f != MemoryFormat::Preserve, op, "preserve_format names no strides of its own");
  check(f == MemoryFormat::Contiguous || n == rank_of(f), op, "required rank ", rank_of(f), " tensor to use ",
        memory_format_name(f), " format but got a tensor of rank ", n);
  // The permuted sizes' row-major strides (checked against overflow there), put back in place.
  const std::vector<int64_t> order = dim_order(f, n);
  Shape permuted;
  for (int64_t d : order) permuted.push_back(sizes[static_cast<size_t>(d)]);
  const Shape permuted_strides = contiguous_strides(permuted);
  Shape strides(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) strides[static_cast<size_t>(order[i])] = permuted_strides[i];
  return strides;
}

bool Tensor::is_contiguous(MemoryFormat f) const {
  if (f == MemoryFormat::Contiguous) return is_contiguous();
  check(f != MemoryFormat::Preserve, "is_contiguous", "preserve_format is not a format a tensor can be in");
  if (dim() != rank_of(f)) return false;
  const std::vector<int64_t> order = dim_order(f, dim());
  int64_t expected = 1;
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    if (size(*d) == 1) continue;
    if (size(*d) == 0) return true;
    if (stride(*d) != expected) return false;
    expected *= size(*d);
  }
  return true;
}

MemoryFormat Tensor::suggest_memory_format() const {
  for (MemoryFormat f : {MemoryFormat::ChannelsLast, MemoryFormat::ChannelsLast3d}) {
    if (dim() != rank_of(f) || !is_contiguous(f)) continue;
    if (!is_contiguous()) return f;
    // Dense in both (one channel, or one pixel): the strides tell which
    // format made it, as PyTorch's stride-based test does, so a
    // one-channel weight moved to channels_last stays so. (Only here: a
    // row-major tensor of every pointwise op leaves at the first test.)
    if (strides() == memory_format_strides(sizes(), f) && strides() != contiguous_strides(sizes())) return f;
  }
  return MemoryFormat::Contiguous;
}

}  // namespace kiln
