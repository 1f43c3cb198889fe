// Storage (memory from its device's allocator, src/core/device.cpp) and
// TensorImpl helpers.
#include <algorithm>
#include <limits>
#include <ostream>

#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/detail/tensor_impl.h"

namespace kiln {

StorageImpl::StorageImpl(size_t nbytes, Device device, Allocator* allocator)
    : nbytes_(nbytes), device_(device), allocator_(allocator ? allocator : allocator_for(device.type())) {
  data_ = allocator_->allocate(nbytes);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(kCPU), deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
  if (allocator_) allocator_->deallocate(data_, nbytes_);
  else if (deleter_) deleter_(data_);
}

int64_t shape_numel(const Shape& sizes, const char* op) {
  check(sizes.size() <= kMaxDims, op, "a shape of ", sizes.size(), " dims; a tensor has at most ", kMaxDims);
  int64_t n = 1;
  bool overflow = false, any_zero = false;
  for (int64_t s : sizes) {
    check(s >= 0, op, "negative dimension ", s, " in size ", shape_text(sizes));
    overflow |= __builtin_mul_overflow(n, s, &n);
    any_zero |= s == 0;
  }
  // A zero anywhere makes the product 0 whatever overflowed before it.
  if (any_zero) return 0;
  check(!overflow, op, "shape ", shape_text(sizes), " has more elements than fit in int64");
  return n;
}

size_t shape_nbytes(const Shape& sizes, DType dtype, const char* op) {
  int64_t bytes = 0;
  check(!__builtin_mul_overflow(shape_numel(sizes, op), static_cast<int64_t>(element_size(dtype)), &bytes), op,
        "shape ", shape_text(sizes), " of dtype ", dtype, " needs more bytes than fit in int64");
  return static_cast<size_t>(bytes);
}

size_t layout_extent_nbytes(const Shape& sizes, const Shape& strides, int64_t offset, DType dtype, const char* op) {
  check(sizes.size() == strides.size(), op, "got ", sizes.size(), " sizes but ", strides.size(), " strides");
  check(offset >= 0, op, "negative storage offset ", offset);
  if (shape_numel(sizes, op) == 0) {
    // No bytes to bound them, but kernels still turn strides into byte strides.
    for (int64_t st : strides)
      check(st >= 0 && st <= std::numeric_limits<int64_t>::max() / 8, op, "stride ", st, " in strides ",
            shape_text(strides), " is negative or beyond int64 in bytes");
    return 0;
  }
  int64_t last = offset;  // index of the element farthest from the start
  bool overflow = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    check(strides[i] >= 0, op, "negative stride ", strides[i], " in strides ", shape_text(strides));
    int64_t step = 0;
    overflow |= __builtin_mul_overflow(sizes[i] - 1, strides[i], &step);
    overflow |= __builtin_add_overflow(last, step, &last);
  }
  int64_t bytes = 0;
  overflow |= __builtin_add_overflow(last, 1, &last);
  overflow |= __builtin_mul_overflow(last, static_cast<int64_t>(element_size(dtype)), &bytes);
  check(!overflow, op, "sizes ", shape_text(sizes), " with strides ", shape_text(strides), " and offset ", offset,
        " reach past int64 bytes");
  return static_cast<size_t>(bytes);
}

int64_t TensorImpl::numel() const { return shape_numel(sizes); }

std::shared_ptr<TensorImpl> restrided(const TensorImpl& base, Shape sizes, Shape strides, int64_t storage_offset,
                                      const char* op) {
  const size_t reach = layout_extent_nbytes(sizes, strides, storage_offset, base.dtype, op);
  check(reach <= base.storage->nbytes(), op, "a view of size ", shape_text(sizes), ", stride ", shape_text(strides),
        " and offset ", storage_offset, " needs ", reach, " bytes but the storage holds ", base.storage->nbytes());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage;
  impl->version = base.version;
  impl->dtype = base.dtype;
  impl->device = base.device;
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->storage_offset = storage_offset;
  return impl;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::ostream& operator<<(std::ostream& os, ShapeText t) { return os << shape_str(t.sizes); }

// A zero-size tensor has no bytes to bound its shape, so its other dims can
// multiply past int64 ([0, 2^40, 2^40]), or past it once a kernel turns
// them into byte strides: refused here, where the strides are made, rather
// than wrapping. (A tensor with elements is bounded by its byte size.)
Shape contiguous_strides(const Shape& sizes) {
  const bool no_elements = std::find(sizes.begin(), sizes.end(), 0) != sizes.end();
  const int64_t limit = no_elements ? std::numeric_limits<int64_t>::max() / 8 : std::numeric_limits<int64_t>::max();
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    if (i > 0)
      check(!__builtin_mul_overflow(s, std::max<int64_t>(sizes[i], 1), &s) && s <= limit, "empty", "shape ",
            shape_text(sizes), " has strides beyond int64");
  }
  return strides;
}

}  // namespace kiln
