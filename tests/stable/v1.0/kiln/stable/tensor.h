// Header-only C++ over the stable C ABI (kiln/stable/c/shim.h), for
// extensions: it includes nothing else from kiln, so an extension built
// against it depends on the C functions only. Failures come back as
// kiln::stable::Error (the shim's code and message).
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kiln/stable/c/shim.h"

namespace kiln::stable {

class Error : public std::runtime_error {
 public:
  Error(KilnError code, const std::string& message) : std::runtime_error(message), code_(code) {}
  KilnError code() const { return code_; }

 private:
  KilnError code_;
};

inline void check(KilnError e) {
  if (e != KILN_OK) throw Error(e, kiln_last_error());
}

// dtype codes, as the runtime numbers them.
template <class T>
int32_t dtype_code();
template <> inline int32_t dtype_code<bool>() { return kiln_dtype_bool(); }
template <> inline int32_t dtype_code<uint8_t>() { return kiln_dtype_uint8(); }
template <> inline int32_t dtype_code<int8_t>() { return kiln_dtype_int8(); }
template <> inline int32_t dtype_code<int16_t>() { return kiln_dtype_int16(); }
template <> inline int32_t dtype_code<int32_t>() { return kiln_dtype_int32(); }
template <> inline int32_t dtype_code<int64_t>() { return kiln_dtype_int64(); }
template <> inline int32_t dtype_code<float>() { return kiln_dtype_float32(); }
template <> inline int32_t dtype_code<double>() { return kiln_dtype_float64(); }

// A dtype argument of an op (kiln_call_op's KILN_VALUE_DTYPE).
struct ScalarType {
  int32_t code;
};
template <class T>
ScalarType scalar_type() {
  return {dtype_code<T>()};
}

// Strided element access, as torch's TensorAccessor: a[i][j] reads the
// element at (i, j) through the tensor's strides. It borrows the tensor's
// memory: keep the tensor alive while using it.
template <class T, size_t N>
class Accessor {
 public:
  Accessor(T* data, const int64_t* sizes, const int64_t* strides) : data_(data), sizes_(sizes), strides_(strides) {}
  decltype(auto) operator[](int64_t i) const {
    if constexpr (N == 1) return data_[i * strides_[0]];
    else return Accessor<T, N - 1>(data_ + i * strides_[0], sizes_ + 1, strides_ + 1);
  }
  int64_t size(size_t d) const { return sizes_[d]; }

 private:
  T* data_;
  const int64_t* sizes_;
  const int64_t* strides_;
};

// A tensor reference through the C ABI. Default-constructed: undefined, as
// torch::stable::Tensor. Copies are new references to the same tensor.
class Tensor {
 public:
  Tensor() { check(kiln_tensor_undefined(&h_)); }
  // Takes ownership of a handle the shim returned.
  explicit Tensor(KilnTensorHandle h) : h_(h) {}
  Tensor(const Tensor& o) { check(kiln_tensor_new_handle(o.h_, &h_)); }
  Tensor(Tensor&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Tensor& operator=(Tensor o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~Tensor() {
    if (h_) kiln_tensor_delete(h_);
  }
  KilnTensorHandle get() const { return h_; }

  bool defined() const { return get32(kiln_tensor_defined) != 0; }
  int64_t dim() const { return get64(kiln_tensor_dim); }
  int64_t numel() const { return get64(kiln_tensor_numel); }
  int64_t size(int64_t d) const {
    int64_t v = 0;
    check(kiln_tensor_size(h_, d, &v));
    return v;
  }
  int64_t stride(int64_t d) const {
    int64_t v = 0;
    check(kiln_tensor_stride(h_, d, &v));
    return v;
  }
  std::vector<int64_t> sizes() const {
    std::vector<int64_t> s(static_cast<size_t>(dim()));
    for (size_t d = 0; d < s.size(); ++d) s[d] = size(static_cast<int64_t>(d));
    return s;
  }
  std::vector<int64_t> strides() const {
    std::vector<int64_t> s(static_cast<size_t>(dim()));
    for (size_t d = 0; d < s.size(); ++d) s[d] = stride(static_cast<int64_t>(d));
    return s;
  }
  int64_t storage_offset() const { return get64(kiln_tensor_storage_offset); }
  int64_t element_size() const { return get64(kiln_tensor_element_size); }
  int32_t scalar_type() const { return get32(kiln_tensor_dtype); }
  bool is_contiguous() const { return get32(kiln_tensor_is_contiguous) != 0; }
  int32_t device_type() const { return device().first; }
  int32_t get_device_index() const { return device().second; }
  bool is_cpu() const { return device_type() == kiln_device_type_cpu(); }

  void* data_ptr() const {
    void* p = nullptr;
    check(kiln_tensor_data_ptr(h_, &p));
    return p;
  }
  // Typed: the tensor's dtype must be T's.
  template <class T>
  T* data_ptr() const {
    if (scalar_type() != dtype_code<T>())
      throw Error(KILN_ERROR_INVALID_ARGUMENT, "[data_ptr] the tensor's dtype code is " +
                                                   std::to_string(scalar_type()) + ", not that of the type asked for (" +
                                                   std::to_string(dtype_code<T>()) + ")");
    return static_cast<T*>(data_ptr());
  }
  // The value of a one-element tensor, converted to T.
  template <class T>
  T item() const;
  // An N-dim strided view of the data as T (dtype and dim checked). The
  // accessor points into `layout`, which must outlive it:
  //   Tensor::Layout layout; auto a = t.accessor<float, 2>(layout); a[i][j]
  struct Layout {
    std::vector<int64_t> sizes, strides;
  };
  template <class T, size_t N>
  Accessor<T, N> accessor(Layout& layout) const {
    if (dim() != static_cast<int64_t>(N))
      throw Error(KILN_ERROR_INVALID_ARGUMENT, "[accessor] the tensor has " + std::to_string(dim()) + " dims, not " +
                                                   std::to_string(N));
    layout.sizes = sizes();
    layout.strides = strides();
    return Accessor<T, N>(data_ptr<T>(), layout.sizes.data(), layout.strides.data());
  }

 private:
  std::pair<int32_t, int32_t> device() const {
    int32_t type = 0, index = 0;
    check(kiln_tensor_device(h_, &type, &index));
    return {type, index};
  }
  int64_t get64(KilnError (*fn)(KilnTensorHandle, int64_t*)) const {
    int64_t v = 0;
    check(fn(h_, &v));
    return v;
  }
  int32_t get32(KilnError (*fn)(KilnTensorHandle, int32_t*)) const {
    int32_t v = 0;
    check(fn(h_, &v));
    return v;
  }
  KilnTensorHandle h_ = nullptr;
};

// ---- any public op by name, with typed arguments: call<Tensor>("add", a, b)

namespace detail {

inline KilnValue box(const Tensor& t) {
  KilnValue v{};
  v.kind = KILN_VALUE_TENSOR;
  v.tensor = t.get();
  return v;
}
inline KilnValue box(int64_t i) {
  KilnValue v{};
  v.kind = KILN_VALUE_INT;
  v.i = i;
  return v;
}
inline KilnValue box(int i) { return box(static_cast<int64_t>(i)); }
inline KilnValue box(double f) {
  KilnValue v{};
  v.kind = KILN_VALUE_FLOAT;
  v.f = f;
  return v;
}
inline KilnValue box(bool b) {
  KilnValue v{};
  v.kind = KILN_VALUE_BOOL;
  v.i = b;
  return v;
}
inline KilnValue box(const std::vector<int64_t>& list) {  // borrowed for the call
  KilnValue v{};
  v.kind = KILN_VALUE_INT_LIST;
  v.ints = list.data();
  v.count = static_cast<int64_t>(list.size());
  return v;
}
inline KilnValue box(const char* s) {
  KilnValue v{};
  v.kind = KILN_VALUE_STRING;
  v.str = s;
  return v;
}
inline KilnValue box(const std::string& s) { return box(s.c_str()); }
inline KilnValue box(ScalarType t) {
  KilnValue v{};
  v.kind = KILN_VALUE_DTYPE;
  v.dtype = t.code;
  return v;
}

template <class R>
R unbox(std::vector<KilnValue>& out, uint64_t n);
template <>
inline Tensor unbox<Tensor>(std::vector<KilnValue>& out, uint64_t n) {
  for (uint64_t i = 1; i < n; ++i)  // (more results than asked for: released)
    if (out[i].kind == KILN_VALUE_TENSOR) kiln_tensor_delete(out[i].tensor);
  if (out[0].kind != KILN_VALUE_TENSOR) throw Error(KILN_ERROR_INVALID_ARGUMENT, "[call] the op gave no tensor");
  return Tensor(out[0].tensor);
}
template <>
inline std::vector<Tensor> unbox<std::vector<Tensor>>(std::vector<KilnValue>& out, uint64_t n) {
  std::vector<Tensor> r;
  for (uint64_t i = 0; i < n; ++i)
    if (out[i].kind == KILN_VALUE_TENSOR) r.emplace_back(out[i].tensor);
  return r;
}

}  // namespace detail

// A keyword argument of call(): kw("dtype", scalar_type<float>()).
struct Kw {
  const char* name;
  KilnValue value;
};
template <class T>
Kw kw(const char* name, const T& value) {
  return {name, detail::box(value)};
}

namespace detail {
struct Args {
  std::vector<KilnValue> positional, keyword_values;
  std::vector<const char*> keyword_names;
  void add(const Kw& k) {
    keyword_names.push_back(k.name);
    keyword_values.push_back(k.value);
  }
  template <class T>
  void add(const T& v) {
    positional.push_back(box(v));
  }
};
}  // namespace detail

// Calls public op `name` with positional arguments and kw(...) keywords; R
// is Tensor (the first result) or std::vector<Tensor> (every tensor result).
template <class R = Tensor, class... A>
R call(const char* name, const A&... args) {
  constexpr uint64_t kMaxResults = 64;
  detail::Args a;
  (a.add(args), ...);
  const uint64_t num_args = a.positional.size();
  a.positional.resize(std::max<size_t>(num_args, kMaxResults));
  check(kiln_call_op_kw(name, a.positional.data(), num_args, a.keyword_names.data(), a.keyword_values.data(),
                        a.keyword_names.size(), kMaxResults));
  return detail::unbox<R>(a.positional, kMaxResults);
}

template <class T>
T Tensor::item() const {
  if (numel() != 1)
    throw Error(KILN_ERROR_INVALID_ARGUMENT, "[item] a tensor with " + std::to_string(numel()) +
                                                 " elements cannot be converted to a scalar");
  const Tensor one = call("to.dtype", call("reshape", *this, std::vector<int64_t>{1}), ScalarType{dtype_code<T>()});
  return *one.data_ptr<T>();
}

// ---- devices and streams (PyTorch 2.9's accelerator.h)

// A device as the runtime numbers it: kiln_device_type_cpu() etc.
struct Device {
  int32_t type;
  int32_t index = -1;
};
inline Device cpu_device() { return {kiln_device_type_cpu(), -1}; }
inline Device meta_device() { return {kiln_device_type_meta(), -1}; }

// Factories without a device use `device` while it lives (this thread).
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device) { check(kiln_device_guard_enter(device.type, device.index, &h_)); }
  ~DeviceGuard() { kiln_device_guard_exit(h_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  KilnDeviceGuardHandle h_ = nullptr;
};

// A stream, typed: its id goes with its device (no casting an id to a
// stream of another library, the Flash-Attention 3 crash of PyTorch 2.9).
class Stream {
 public:
  Stream(Device device, int64_t id) : device_(device), id_(id) {}
  Device device() const { return device_; }
  int64_t id() const { return id_; }

 private:
  Device device_;
  int64_t id_;
};
inline Stream current_stream(Device device) {
  int64_t id = 0;
  check(kiln_stream_current(device.type, device.index, &id));
  return Stream(device, id);
}

// ---- kiln's thread pool

// f(lo, hi) over chunks of [begin, end) of at least `grain` indices, on
// kiln's threads; an exception in a chunk is rethrown here (as Error).
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  auto chunk = [](int64_t lo, int64_t hi, void* ctx) -> KilnError {
    try {
      (*static_cast<const F*>(ctx))(lo, hi);
      return KILN_OK;
    } catch (const std::exception& e) {
      kiln_set_error(e.what());
      return KILN_ERROR_RUNTIME;
    }
  };
  check(kiln_parallel_for(begin, end, grain, chunk, const_cast<F*>(&f)));
}
inline int num_threads() {
  int32_t n = 1;
  check(kiln_num_threads(&n));
  return n;
}

// ---- the stable ops of PyTorch 2.9's list, and a few more

inline Tensor empty_like(const Tensor& t) { return call("empty_like", t); }
inline Tensor new_empty(const Tensor& t, const std::vector<int64_t>& sizes) {
  return call("empty", sizes, kw("dtype", ScalarType{t.scalar_type()}));
}
inline Tensor new_zeros(const Tensor& t, const std::vector<int64_t>& sizes) {
  return call("zeros", sizes, kw("dtype", ScalarType{t.scalar_type()}));
}
inline Tensor fill_(const Tensor& t, double value) { return call("fill_", t, value); }
inline Tensor zero_(const Tensor& t) { return call("zero_", t); }
inline Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  return call("narrow", t, dim, start, length);
}
inline Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) { return call("transpose", t, dim0, dim1); }
inline Tensor amax(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false) {
  return call("amax", t, dims, keepdim);
}
inline Tensor pad(const Tensor& t, const std::vector<int64_t>& sizes, const char* mode = "constant", double value = 0.0) {
  if (std::string(mode) == "constant") return call("pad", t, sizes, mode, value);
  return call("pad", t, sizes, mode);
}
inline Tensor copy_(const Tensor& dst, const Tensor& src) {
  check(kiln_tensor_copy_(dst.get(), src.get()));
  return dst;
}
inline Tensor clone(const Tensor& t) {
  KilnTensorHandle h = nullptr;
  check(kiln_tensor_clone(t.get(), &h));
  return Tensor(h);
}
inline Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1) {
  return call("flatten", t, start_dim, end_dim);
}
inline Tensor zeros(const std::vector<int64_t>& sizes, ScalarType dtype) {
  return call("zeros", sizes, kw("dtype", dtype));
}
inline Tensor full(const std::vector<int64_t>& sizes, double value, ScalarType dtype) {
  return call("full", sizes, value, kw("dtype", dtype));
}
inline Tensor arange(int64_t end) { return call("arange", end); }
inline Tensor matmul(const Tensor& a, const Tensor& b) { return call("matmul", a, b); }

}  // namespace kiln::stable
