// Storage (memory from core/allocator.h: 64-byte aligned, so SIMD loads never
// split a cache line at the start of a tensor) and TensorImpl helpers.
#include <algorithm>
#include <ostream>

#include "core/allocator.h"

#include "kiln/error.h"
#include "kiln/tensor_impl.h"

namespace kiln {

const char* device_name(Device) { return "cpu"; }

StorageImpl::StorageImpl(size_t nbytes) : data_(core::allocate(nbytes)), nbytes_(nbytes) {
  deleter_ = [nbytes](void* p) { core::deallocate(p, nbytes); };
}

StorageImpl::StorageImpl(void* data, size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
  if (deleter_) deleter_(data_);
}

int64_t shape_numel(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

int64_t TensorImpl::numel() const { return shape_numel(sizes); }

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::ostream& operator<<(std::ostream& os, ShapeText t) { return os << shape_str(t.sizes); }

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

}  // namespace kiln
