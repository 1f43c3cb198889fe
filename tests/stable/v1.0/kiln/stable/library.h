// Writing an extension against the stable ABI: typed C++ kernels, boxed for
// the C shim, registered under a namespace.
//
//   Tensor scale_add(Tensor x, Tensor y, double alpha) { ... }
//   KILN_STABLE_LIBRARY(myext, m) { m.def("scale_add(Tensor x, Tensor y, float alpha) -> Tensor"); }
//   KILN_STABLE_LIBRARY_IMPL(myext, CPU, m) { m.impl<&scale_add>("scale_add"); }
//
// Built as a shared object and loaded with kiln::load_extension(path) (or
// KILN_EXTENSIONS), the op is "myext::scale_add" for call_op. This header
// defines the two functions the loader looks for (the ABI version the
// extension was built against, and its registrations); an exception thrown
// by a kernel reaches the caller as a kiln::Error naming the op.
#pragma once
#include <exception>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kiln/stable/tensor.h"

namespace kiln::stable {
namespace detail {

template <class T>
T unbox_arg(const KilnValue& v);
template <>
inline Tensor unbox_arg<Tensor>(const KilnValue& v) {
  if (v.kind != KILN_VALUE_TENSOR) throw Error(KILN_ERROR_INVALID_ARGUMENT, "expected a tensor argument");
  KilnTensorHandle h = nullptr;
  check(kiln_tensor_new_handle(v.tensor, &h));  // the caller keeps its own reference
  return Tensor(h);
}
template <>
inline int64_t unbox_arg<int64_t>(const KilnValue& v) {
  if (v.kind != KILN_VALUE_INT) throw Error(KILN_ERROR_INVALID_ARGUMENT, "expected an int argument");
  return v.i;
}
template <>
inline double unbox_arg<double>(const KilnValue& v) {
  if (v.kind == KILN_VALUE_INT) return static_cast<double>(v.i);
  if (v.kind != KILN_VALUE_FLOAT) throw Error(KILN_ERROR_INVALID_ARGUMENT, "expected a float argument");
  return v.f;
}
template <>
inline bool unbox_arg<bool>(const KilnValue& v) {
  if (v.kind != KILN_VALUE_BOOL) throw Error(KILN_ERROR_INVALID_ARGUMENT, "expected a bool argument");
  return v.i != 0;
}
template <>
inline std::vector<int64_t> unbox_arg<std::vector<int64_t>>(const KilnValue& v) {
  if (v.kind != KILN_VALUE_INT_LIST) throw Error(KILN_ERROR_INVALID_ARGUMENT, "expected an int[] argument");
  return std::vector<int64_t>(v.ints, v.ints + v.count);
}

inline void box_result(KilnValue& slot, const Tensor& t) {
  KilnTensorHandle h = nullptr;
  check(kiln_tensor_new_handle(t.get(), &h));  // handed to the runtime
  slot = KilnValue{};
  slot.kind = KILN_VALUE_TENSOR;
  slot.tensor = h;
}
inline void box_result(KilnValue& slot, double f) {
  slot = KilnValue{};
  slot.kind = KILN_VALUE_FLOAT;
  slot.f = f;
}
inline void box_result(KilnValue& slot, int64_t i) {
  slot = KilnValue{};
  slot.kind = KILN_VALUE_INT;
  slot.i = i;
}

template <class F>
struct KernelSignature;
template <class R, class... A>
struct KernelSignature<R (*)(A...)> {
  using Result = R;
  using Args = std::tuple<std::remove_cvref_t<A>...>;
};

}  // namespace detail

// F, a function with tensor/int/float/bool/int[] parameters returning a
// Tensor, int64_t or double (or a std::tuple of them), as a boxed kernel:
// every exception becomes an error code with its message.
template <auto F>
KilnError boxed_kernel(KilnValue* stack, uint64_t num_args, uint64_t num_outputs) {
  using Sig = detail::KernelSignature<decltype(F)>;
  constexpr size_t n = std::tuple_size_v<typename Sig::Args>;
  try {
    if (num_args != n)
      throw Error(KILN_ERROR_INVALID_ARGUMENT,
                  "the kernel takes " + std::to_string(n) + " arguments but got " + std::to_string(num_args));
    auto result = [&]<size_t... I>(std::index_sequence<I...>) {
      return F(detail::unbox_arg<std::tuple_element_t<I, typename Sig::Args>>(stack[I])...);
    }(std::make_index_sequence<n>{});
    if constexpr (requires { std::tuple_size<decltype(result)>::value; }) {
      if (num_outputs != std::tuple_size_v<decltype(result)>)
        throw Error(KILN_ERROR_INVALID_ARGUMENT, "the schema's results do not match the kernel's");
      [&]<size_t... I>(std::index_sequence<I...>) {
        (detail::box_result(stack[I], std::get<I>(result)), ...);
      }(std::make_index_sequence<std::tuple_size_v<decltype(result)>>{});
    } else {
      if (num_outputs != 1) throw Error(KILN_ERROR_INVALID_ARGUMENT, "the schema's results do not match the kernel's");
      detail::box_result(stack[0], result);
    }
    return KILN_OK;
  } catch (const Error& e) {
    kiln_set_error(e.what());
    return e.code();
  } catch (const std::exception& e) {
    kiln_set_error(e.what());
    return KILN_ERROR_RUNTIME;
  } catch (...) {
    kiln_set_error("unknown exception");
    return KILN_ERROR_RUNTIME;
  }
}

// A shape function for the common case: one result with the metadata of
// the first tensor argument.
inline KilnError same_as_first_tensor(const KilnValue* args, uint64_t num_args, KilnTensorMeta* out,
                                      uint64_t num_outputs) {
  for (uint64_t i = 0; i < num_args; ++i) {
    if (args[i].kind != KILN_VALUE_TENSOR) continue;
    if (num_outputs != 1) break;
    const KilnTensorHandle t = args[i].tensor;
    KilnTensorMeta m{};
    KilnError e = kiln_tensor_dim(t, &m.ndim);
    if (e == KILN_OK && m.ndim > KILN_MAX_DIMS) e = KILN_ERROR_INVALID_ARGUMENT;
    for (int64_t d = 0; e == KILN_OK && d < m.ndim; ++d) e = kiln_tensor_size(t, d, &m.sizes[d]);
    if (e == KILN_OK) e = kiln_tensor_dtype(t, &m.dtype);
    if (e != KILN_OK) return e;
    out[0] = m;
    return KILN_OK;
  }
  kiln_set_error("same_as_first_tensor: expected one result and a tensor argument");
  return KILN_ERROR_INVALID_ARGUMENT;
}

// The handle KILN_STABLE_LIBRARY and _IMPL blocks register through.
class Library {
 public:
  explicit Library(const char* ns) : ns_(ns) {}
  void def(const char* schema) { check(kiln_library_define(ns_, schema)); }
  // Op `name`'s shape function (see kiln_library_shape): the op then goes
  // through kiln's dispatcher, traced by kiln::compile.
  void def_shape(const char* name, KilnShapeFunction shape) { check(kiln_library_shape(ns_, name, shape)); }
  // Op `name`'s gradients come from op `backward_name` (see kiln_library_backward).
  void def_backward(const char* name, const char* backward_name) {
    check(kiln_library_backward(ns_, name, backward_name));
  }
  template <auto F>
  void impl(const char* name) {
    check(kiln_library_impl(ns_, name, kiln_device_type_cpu(), &boxed_kernel<F>));
  }

 private:
  const char* ns_;
};

namespace detail {
// The extension's registrations, run by kiln_extension_init: every
// definition first, then the kernels.
struct Registrations {
  std::vector<void (*)()> defs, impls;
};
// Hidden: GCC makes the static of an inline function a process-wide
// (STB_GNU_UNIQUE) symbol when exported, which would give every extension
// loaded in a process one shared list, each registering the others' ops.
__attribute__((visibility("hidden"))) inline Registrations& registrations() {
  static Registrations r;
  return r;
}
}  // namespace detail
}  // namespace kiln::stable

// The two functions the loader looks up (exported even under
// -fvisibility=hidden; inline, so any number of the extension's files may
// include this header).
extern "C" __attribute__((visibility("default"))) inline uint32_t kiln_extension_abi_version() {
  return (KILN_STABLE_ABI_VERSION_MAJOR << 16) | KILN_STABLE_ABI_VERSION_MINOR;
}
extern "C" __attribute__((visibility("default"))) inline KilnError kiln_extension_init() {
  try {
    for (auto f : kiln::stable::detail::registrations().defs) f();
    for (auto f : kiln::stable::detail::registrations().impls) f();
    return KILN_OK;
  } catch (const kiln::stable::Error& e) {
    kiln_set_error(e.what());
    return e.code();
  }
}
namespace kiln::stable::detail {
struct __attribute__((visibility("hidden"))) Registrar {
  Registrar(void (*f)(), bool is_def) {
    (is_def ? registrations().defs : registrations().impls).push_back(f);
    // Their addresses taken where a registration runs, so the extension
    // emits and exports them (an inline function nobody uses is not emitted).
    [[maybe_unused]] static void* volatile exported[2];
    exported[0] = reinterpret_cast<void*>(&kiln_extension_abi_version);
    exported[1] = reinterpret_cast<void*>(&kiln_extension_init);
  }
};
}  // namespace kiln::stable::detail

#define KILN_STABLE_LIBRARY(ns, m)                                                                           \
  static void kiln_stable_library_def_##ns(::kiln::stable::Library& m);                                       \
  static const ::kiln::stable::detail::Registrar kiln_stable_registrar_def_##ns(                             \
      [] {                                                                                                    \
        ::kiln::stable::Library lib(#ns);                                                                     \
        kiln_stable_library_def_##ns(lib);                                                                   \
      },                                                                                                      \
      true);                                                                                                  \
  static void kiln_stable_library_def_##ns(::kiln::stable::Library& m)

// device: CPU (the device types with kernels from extensions).
#define KILN_STABLE_LIBRARY_IMPL(ns, device, m)                                                              \
  static void kiln_stable_library_impl_##ns##_##device(::kiln::stable::Library& m);                           \
  static const ::kiln::stable::detail::Registrar kiln_stable_registrar_impl_##ns##_##device(                 \
      [] {                                                                                                    \
        ::kiln::stable::Library lib(#ns);                                                                     \
        kiln_stable_library_impl_##ns##_##device(lib);                                                        \
      },                                                                                                      \
      false);                                                                                                 \
  static void kiln_stable_library_impl_##ns##_##device(::kiln::stable::Library& m)
