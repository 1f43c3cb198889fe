// Tensor metadata accessors and typed element access. The methods that
// forward to ops live with the ops (src/ops/tensor_methods.cpp and the op
// families' files): core includes nothing above it.
#include "kiln/tensor.h"

#include "core/convert.h"

namespace kiln {

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  check(d >= -n && d < n, "size", "dimension out of range (expected to be in range of [", -n, ", ", n - 1,
        "], but got ", d, ")");
  return sizes()[d < 0 ? d + n : d];
}

int64_t Tensor::stride(int64_t d) const {
  const int64_t n = dim();
  check(d >= -n && d < n, "stride", "dimension out of range (expected to be in range of [", -n, ", ", n - 1,
        "], but got ", d, ")");
  return strides()[d < 0 ? d + n : d];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (size(d) == 1) continue;
    if (size(d) == 0) return true;
    if (stride(d) != expected) return false;
    expected *= size(d);
  }
  return true;
}

// The uninitialised factories are no ops (nothing to compute, nothing a
// mode needs to see): storage from the device's allocator, in core, so
// kernels allocate without calling up into src/ops.
namespace {

Tensor new_tensor(Shape sizes, Shape strides, size_t nbytes, DType dtype, Device device,
                  Allocator* allocator = nullptr) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<StorageImpl>(nbytes, device, allocator);
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

}  // namespace

Tensor empty_strided(Shape sizes, Shape strides, TensorOptions options) {
  const DType dtype = options.dtype_or(kFloat32);
  const size_t nbytes = layout_extent_nbytes(sizes, strides, 0, dtype, "empty_strided");
  return new_tensor(std::move(sizes), std::move(strides), nbytes, dtype, options.device_or_default());
}

namespace {

// Every op's output comes from here: contiguous, so its extent is its byte
// size (Note [Checked sizes]), without empty_strided's general walk.
Tensor contiguous_empty(Shape sizes, TensorOptions options, Allocator* allocator) {
  const DType dtype = options.dtype_or(kFloat32);
  const size_t nbytes = shape_nbytes(sizes, dtype, "empty");
  Shape strides = contiguous_strides(sizes);
  return new_tensor(std::move(sizes), std::move(strides), nbytes, dtype, options.device_or_default(), allocator);
}

}  // namespace

Tensor empty(Shape sizes, TensorOptions options) { return contiguous_empty(std::move(sizes), options, nullptr); }

Tensor empty(Shape sizes, TensorOptions options, Allocator& allocator) {
  return contiguous_empty(std::move(sizes), options, &allocator);
}

Tensor empty(Shape sizes, TensorOptions options, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous) return empty(std::move(sizes), options);
  Shape strides = memory_format_strides(sizes, format, "empty");
  return empty_strided(std::move(sizes), std::move(strides), options);
}

// In t's memory format (PyTorch's preserve_format for a dense tensor).
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), t.options(), t.suggest_memory_format()); }

thread_local detail::ConcreteValueHook detail::concrete_value_hook = nullptr;
thread_local detail::TracedBackwardHook detail::traced_backward_hook = nullptr;
thread_local const SourceLocation* detail::api_location = nullptr;

template <typename T>
T* Tensor::data_ptr(SourceLocation where) const {
  check(dtype() == dtype_of<T>::value, "data_ptr", "expected a tensor of dtype ", dtype_of<T>::value,
        " but this tensor has dtype ", dtype());
  check_has_data("data_ptr");
  detail::on_concrete_value(checked(), "data_ptr()", where);
  return reinterpret_cast<T*>(checked()->data());
}

template <typename T>
T Tensor::item(SourceLocation where) const {
  check(numel() == 1, "item", "a tensor with ", numel(), " elements cannot be converted to a scalar");
  check_has_data("item");
  detail::on_concrete_value(checked(), std::is_same_v<T, bool> ? "converting a tensor to bool" : "item()", where);
  return visit_dtype(dtype(), [&](auto tag) {
    using S = decltype(tag);
    return convert<T>(*reinterpret_cast<const S*>(checked()->data()));
  });
}

Scalar Tensor::item(SourceLocation where) const {
  if (dtype() == kBool) return Scalar(item<bool>(where));
  if (is_floating(dtype())) return Scalar(item<double>(where));
  return Scalar(item<int64_t>(where));
}

#define KILN_INSTANTIATE(T)                                      \
  template T* Tensor::data_ptr<T>(SourceLocation) const; \
  template T Tensor::item<T>(SourceLocation) const;
KILN_INSTANTIATE(bool)
KILN_INSTANTIATE(uint8_t)
KILN_INSTANTIATE(int8_t)
KILN_INSTANTIATE(int16_t)
KILN_INSTANTIATE(int32_t)
KILN_INSTANTIATE(int64_t)
KILN_INSTANTIATE(Half)
KILN_INSTANTIATE(BFloat16)
KILN_INSTANTIATE(float)
KILN_INSTANTIATE(double)
#undef KILN_INSTANTIATE

}  // namespace kiln
