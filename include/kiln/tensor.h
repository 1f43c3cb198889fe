// Tensor: a shared handle to a TensorImpl. Copying a Tensor copies the handle,
// never the data (as torch::Tensor). Methods here are thin calls into ops.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include "kiln/source_location.h"
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/detail/tensor_impl.h"

namespace kiln {

class Tensor;
class Generator;  // kiln/runtime.h

// How a dense tensor's elements are ordered in memory, as torch.memory_format.
// ChannelsLast keeps an (N, C, H, W) tensor's sizes and stores it as
// (N, H, W, C) (strides H*W*C, 1, W*C, C); ChannelsLast3d likewise for
// (N, C, D, H, W). Preserve: the input's format (for ops that take one).
enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast, ChannelsLast3d, Preserve };
const char* memory_format_name(MemoryFormat f);
// The strides of a dense tensor of `sizes` in format `f` (Contiguous,
// ChannelsLast for 4 dims, ChannelsLast3d for 5; an error naming `op` otherwise).
Shape memory_format_strides(const Shape& sizes, MemoryFormat f, const char* op = "memory_format");

// What a factory makes, as torch::TensorOptions: a dtype (unset: the
// factory's default, float32 or the value's) and a device (unset: the
// default device). Implicit from either, so `zeros({2, 3}, kInt64)` and
// `zeros({2, 3}, kMeta)` read as in PyTorch; combine them with
// `TensorOptions().dtype(kFloat64).device(kMeta)`.
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType dtype) : dtype_(dtype) {}
  TensorOptions(std::optional<DType> dtype) : dtype_(dtype) {}
  TensorOptions(Device device) : device_(device) {}
  TensorOptions(DeviceType type) : device_(Device(type)) {}
  TensorOptions dtype(std::optional<DType> d) const {
    TensorOptions o = *this;
    o.dtype_ = d;
    return o;
  }
  TensorOptions device(std::optional<Device> d) const {
    TensorOptions o = *this;
    o.device_ = d;
    return o;
  }
  std::optional<DType> dtype_opt() const { return dtype_; }
  std::optional<Device> device_opt() const { return device_; }
  DType dtype_or(DType fallback) const { return dtype_.value_or(fallback); }
  Device device_or_default() const { return device_ ? *device_ : default_device(); }

 private:
  std::optional<DType> dtype_;
  std::optional<Device> device_;
};
inline TensorOptions dtype(DType d) { return TensorOptions(d); }
inline TensorOptions device(Device d) { return TensorOptions(d); }

namespace detail {
// Set by kiln::compile's tracer on its thread (null otherwise): takes
// Tensor::backward of a traced tensor into the graph being traced (Note
// [Backward inside a trace]); false leaves it to the autograd engine.
using TracedBackwardHook = bool (*)(const Tensor& root, const Tensor& gradient);
extern thread_local TracedBackwardHook traced_backward_hook;

// Set by kiln::compile's tracer on its thread (null otherwise): called before
// a tensor's memory is read or handed out, so a traced tensor whose value is
// not computed yet gets computed first (a graph break). `where` is the
// caller's location, for the break's report.
using ConcreteValueHook = void (*)(const TensorImpl* t, const char* what, const SourceLocation& where);
extern thread_local ConcreteValueHook concrete_value_hook;
// The user's location of the public call in progress on this thread (the
// outermost one: library code calling in-place ops or item() inside it does
// not replace it), so a graph break deep inside names the user's line.
extern thread_local const SourceLocation* api_location;
class ApiCall {
 public:
  explicit ApiCall(const SourceLocation& where) : set_(api_location == nullptr) {
    if (set_) api_location = &where;
  }
  ~ApiCall() {
    if (set_) api_location = nullptr;
  }
  ApiCall(const ApiCall&) = delete;
  ApiCall& operator=(const ApiCall&) = delete;

 private:
  bool set_;
};

inline void on_concrete_value(const TensorImpl* t, const char* what, const SourceLocation& where) {
  if (concrete_value_hook) [[unlikely]]
    concrete_value_hook(t, what, where);
}
}  // namespace detail

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // Metadata
  const Shape& sizes() const { return checked()->sizes; }
  const Shape& strides() const { return checked()->strides; }
  Shape shape() const { return sizes(); }
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return checked()->numel(); }
  DType dtype() const { return checked()->dtype; }
  Device device() const { return checked()->device; }
  bool is_meta() const { return device().is_meta(); }
  // Its dtype and device, for factories making tensors like it.
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }
  int64_t storage_offset() const { return checked()->storage_offset; }
  size_t element_size() const { return kiln::element_size(dtype()); }
  bool is_contiguous() const;
  // Dense in format f (a tensor with at most one element in each of C and
  // H*W is contiguous in both, as in PyTorch).
  bool is_contiguous(MemoryFormat f) const;
  // ChannelsLast(3d) when its strides are those of that format and not also
  // row-major, else Contiguous: the format an op's output follows.
  MemoryFormat suggest_memory_format() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  uint64_t version() const { return checked()->version->load(); }
  void bump_version() const { checked()->version->fetch_add(1); }

  // Element access
  template <typename T> T* data_ptr(SourceLocation where = SourceLocation::current()) const;
  void* raw_data(SourceLocation where = SourceLocation::current()) const {
    check_has_data("raw_data");
    detail::on_concrete_value(checked(), "raw_data()", where);
    return checked()->data();
  }
  template <typename T> T item(SourceLocation where = SourceLocation::current()) const;
  Scalar item(SourceLocation where = SourceLocation::current()) const;

  // Views (never copy)
  Tensor view(Shape shape) const;
  Tensor reshape(Shape shape) const;  // a view when strides allow, else a copy
  Tensor permute(Shape dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor expand(Shape shape) const;
  Tensor expand_as(const Tensor& o) const { return expand(o.sizes()); }
  Tensor slice(int64_t dim, std::optional<int64_t> start = {}, std::optional<int64_t> end = {}, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unfold(int64_t dim, int64_t size, int64_t step) const;
  Tensor as_strided(Shape sizes, Shape strides, std::optional<int64_t> storage_offset = {}) const;

  // Copies and conversions
  Tensor contiguous() const;
  Tensor contiguous(MemoryFormat f) const;  // *this when already dense in f
  Tensor clone() const;
  Tensor to(DType dtype) const;  // returns *this when the dtype already matches
  // A copy on `device` (*this when already there). To meta: the metadata
  // alone; from meta to a device with memory: an error (no data to copy).
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  Tensor detach() const;         // shares storage, drops autograd history

  // In-place (each bumps the version counter)
  const Tensor& copy_(const Tensor& src, SourceLocation where = SourceLocation::current()) const;
  const Tensor& fill_(Scalar value, SourceLocation where = SourceLocation::current()) const;
  const Tensor& zero_(SourceLocation where = SourceLocation::current()) const;
  const Tensor& add_(const Tensor& other, Scalar alpha = 1, SourceLocation where = SourceLocation::current()) const;
  const Tensor& add_(Scalar other, SourceLocation where = SourceLocation::current()) const;
  const Tensor& sub_(const Tensor& other, Scalar alpha = 1, SourceLocation where = SourceLocation::current()) const;
  const Tensor& mul_(const Tensor& other, SourceLocation where = SourceLocation::current()) const;
  const Tensor& mul_(Scalar other, SourceLocation where = SourceLocation::current()) const;
  const Tensor& div_(const Tensor& other, SourceLocation where = SourceLocation::current()) const;
  const Tensor& div_(Scalar other, SourceLocation where = SourceLocation::current()) const;
  const Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max, SourceLocation where = SourceLocation::current()) const;
  const Tensor& masked_fill_(const Tensor& mask, Scalar value, SourceLocation where = SourceLocation::current()) const;
  const Tensor& neg_(SourceLocation where = SourceLocation::current()) const;
  const Tensor& exp_(SourceLocation where = SourceLocation::current()) const;
  const Tensor& relu_(SourceLocation where = SourceLocation::current()) const;
  // The functional ops' results written back (PyTorch's in-place forms).
  const Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha = 1,
                           SourceLocation where = SourceLocation::current()) const;
  const Tensor& index_copy_(int64_t dim, const Tensor& index, const Tensor& source,
                            SourceLocation where = SourceLocation::current()) const;
  const Tensor& index_fill_(int64_t dim, const Tensor& index, Scalar value,
                            SourceLocation where = SourceLocation::current()) const;
  const Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src,
                         SourceLocation where = SourceLocation::current()) const;
  const Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src,
                             SourceLocation where = SourceLocation::current()) const;
  // Fills with draws from the default generator, or `generator` when given
  // (floating dtypes; bernoulli_ any dtype: 1 with probability p, else 0).
  const Tensor& normal_(double mean = 0, double std = 1, Generator* generator = nullptr,
                        SourceLocation where = SourceLocation::current()) const;
  const Tensor& uniform_(double from = 0, double to = 1, Generator* generator = nullptr,
                         SourceLocation where = SourceLocation::current()) const;
  const Tensor& bernoulli_(double p = 0.5, Generator* generator = nullptr,
                           SourceLocation where = SourceLocation::current()) const;

  // Common ops as methods, as in PyTorch
  Tensor sum(Shape dims = {}, bool keepdim = false) const;
  Tensor mean(Shape dims = {}, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor neg() const;
  Tensor pow(Scalar exponent) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor argmax(std::optional<int64_t> dim = {}, bool keepdim = false) const;

  std::string to_string() const;

  // Autograd (src/autograd/). A tensor records history when it requires grad
  // and grad mode is on; backward() accumulates into the .grad of leaves.
  bool requires_grad() const;
  const Tensor& requires_grad_(bool enabled = true) const;
  Tensor grad() const;  // undefined until a backward pass reaches this leaf
  void set_grad(const Tensor& g) const;
  bool is_leaf() const;
  std::string grad_fn_name() const;  // "" for leaves
  // gradient may be omitted for a one-element tensor (it is 1 then).
  // create_graph: the gradients accumulated into .grad carry history (and
  // the graph is retained), for higher-order derivatives.
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;
  // hook(grad) runs when this tensor's gradient is computed and may return a
  // replacement (or an undefined tensor to keep it).
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // hook(tensor) runs after a leaf's gradient was accumulated into .grad
  // (PyTorch's register_post_accumulate_grad_hook).
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;

 private:
  // Meta tensors have no data to read or write: a kiln::Error naming `what`.
  void check_has_data(const char* what) const {
    check(!checked()->device.is_meta(), what, "a tensor on the meta device (of size ", shape_text(sizes()),
          ") has no data");
  }
  TensorImpl* checked() const {
    check(impl_ != nullptr, "Tensor", "used an undefined tensor");
    return impl_.get();
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Factories. The dtype defaults to float32 (full, arange and scalar_tensor:
// the value's), the device to default_device(); the *_like ones take the
// tensor's dtype and device.
Tensor empty(Shape sizes, TensorOptions options = {});
Tensor empty(Shape sizes, TensorOptions options, MemoryFormat format);
// A contiguous tensor whose memory comes from `allocator`, which must
// outlive it and serve memory the device's kernels can use (symm_mem::empty
// allocates from the symmetric heap so).
Tensor empty(Shape sizes, TensorOptions options, Allocator& allocator);
Tensor empty_strided(Shape sizes, Shape strides, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros(Shape sizes, TensorOptions options = {});
Tensor ones(Shape sizes, TensorOptions options = {});
Tensor full(Shape sizes, Scalar value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
Tensor arange(Scalar end, TensorOptions options = {});
Tensor arange(Scalar start, Scalar end, Scalar step = 1, TensorOptions options = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, std::optional<int64_t> m = {}, TensorOptions options = {});
Tensor scalar_tensor(Scalar value, TensorOptions options = {});
// A 0-dim CPU tensor marked as a wrapped C++ number, for type promotion.
Tensor wrapped_scalar(Scalar value);
// Foreign CPU memory, not copied.
Tensor from_blob(void* data, Shape sizes, DType dtype, std::function<void(void*)> deleter = {});
Tensor from_blob(void* data, Shape sizes, Shape strides, DType dtype, std::function<void(void*)> deleter = {});

template <typename T>
Tensor tensor(const std::vector<T>& values, Shape sizes = {}) {
  Shape s = sizes.empty() ? Shape{static_cast<int64_t>(values.size())} : sizes;
  check(shape_numel(s) == static_cast<int64_t>(values.size()), "tensor", "shape has ", shape_numel(s),
        " elements but ", values.size(), " values were given");
  Tensor t = empty(s, TensorOptions(dtype_of<T>::value).device(kCPU));
  T* p = t.data_ptr<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}
template <typename T>
Tensor tensor(std::initializer_list<T> values, Shape sizes = {}) {
  return tensor(std::vector<T>(values), std::move(sizes));
}

}  // namespace kiln

KILN_API_END
