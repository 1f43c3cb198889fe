// The stable C ABI (kiln/stable/c/shim.h) over the C++ library: every entry
// point catches everything, records the message per thread and returns a
// code; handles are heap-held Tensor references.
#include "kiln/stable/c/shim.h"
#include "stable/shim_impl.h"

#include <mutex>
#include <string>
#include <vector>

#include "kiln/call_op.h"
#include "kiln/error.h"
#include "kiln/runtime.h"
#include "kiln/tensor.h"
#include "stable/values.h"

namespace kiln::stable_abi {
namespace {

template <class F>
KilnError guarded(const char* fn, F&& f) {
  try {
    f();
    last_error().clear();
    return KILN_OK;
  } catch (const AbiError& e) {
    last_error() = std::string("[") + fn + "] " + e.what();
    return e.code();
  } catch (const std::exception& e) {
    last_error() = e.what();
    return KILN_ERROR_RUNTIME;
  } catch (...) {
    last_error() = std::string("[") + fn + "] unknown exception";
    return KILN_ERROR_RUNTIME;
  }
}

const Tensor& defined_tensor(KilnTensorHandle h) {
  const Tensor& t = tensor_of(h);
  if (!t.defined()) throw AbiError(KILN_ERROR_INVALID_ARGUMENT, "the tensor is undefined");
  return t;
}

// Results flattened (a Tensor[] as its tensors) into C values whose
// handles the caller owns.
std::vector<KilnValue> box_results(const std::vector<IValue>& results) {
  CValues c(/*hand_over_handles=*/true);
  c.stack.reserve(results.size());
  for (const IValue& r : results) {
    if (const auto* l = std::get_if<std::vector<Tensor>>(&r))
      for (const Tensor& x : *l) c.stack.push_back(c.to_c(x));
    else
      c.stack.push_back(c.to_c(r));
  }
  return std::move(c.stack);
}

KilnError call(const char* name, KilnValue* stack, uint64_t num_args, const char* const* kw_names,
               const KilnValue* kw_values, uint64_t num_kwargs, uint64_t num_outputs) {
  return guarded("kiln_call_op", [&] {
    not_null(name, "the op name");
    if (num_args + num_outputs > 0) not_null(stack, "the stack");
    std::vector<IValue> args;
    args.reserve(num_args);
    for (uint64_t i = 0; i < num_args; ++i) args.push_back(from_c(stack[i], "a positional argument"));
    KwArgs kwargs;
    for (uint64_t i = 0; i < num_kwargs; ++i)
      kwargs.emplace_back(not_null(not_null(kw_names, "the keyword names")[i], "a keyword name"),
                          from_c(not_null(kw_values, "the keyword values")[i], "a keyword argument"));
    std::vector<IValue> boxed;
    try {
      boxed = call_op(name, std::move(args), kwargs);
    } catch (const UnknownOpError& e) {
      throw AbiError(KILN_ERROR_UNKNOWN_OP, e.what());
    }
    const std::vector<KilnValue> results = box_results(boxed);
    if (results.size() > num_outputs) {
      for (const KilnValue& r : results)
        if (r.kind == KILN_VALUE_TENSOR) delete r.tensor;
      throw AbiError(KILN_ERROR_INVALID_ARGUMENT, std::string("'") + name + "' gave " + std::to_string(results.size()) +
                                                      " results but num_outputs is " + std::to_string(num_outputs));
    }
    for (uint64_t i = 0; i < num_outputs; ++i) stack[i] = i < results.size() ? results[i] : KilnValue{};
  });
}

}  // namespace
}  // namespace kiln::stable_abi

using namespace kiln;
using namespace kiln::stable_abi;

namespace kiln::stable_abi::impl {

KilnError kiln_abi_version(uint32_t* out) {
  return guarded("kiln_abi_version", [&] {
    *not_null(out, "the output pointer") = (KILN_STABLE_ABI_VERSION_MAJOR << 16) | KILN_STABLE_ABI_VERSION_MINOR;
  });
}

const char* kiln_last_error(void) { return last_error().c_str(); }
void kiln_set_error(const char* message) { last_error() = message ? message : ""; }

int32_t kiln_dtype_bool(void) { return static_cast<int32_t>(kBool); }
int32_t kiln_dtype_uint8(void) { return static_cast<int32_t>(kUInt8); }
int32_t kiln_dtype_int8(void) { return static_cast<int32_t>(kInt8); }
int32_t kiln_dtype_int16(void) { return static_cast<int32_t>(kInt16); }
int32_t kiln_dtype_int32(void) { return static_cast<int32_t>(kInt32); }
int32_t kiln_dtype_int64(void) { return static_cast<int32_t>(kInt64); }
int32_t kiln_dtype_float16(void) { return static_cast<int32_t>(kFloat16); }
int32_t kiln_dtype_bfloat16(void) { return static_cast<int32_t>(kBFloat16); }
int32_t kiln_dtype_float32(void) { return static_cast<int32_t>(kFloat32); }
int32_t kiln_dtype_float64(void) { return static_cast<int32_t>(kFloat64); }
int32_t kiln_device_type_cpu(void) { return static_cast<int32_t>(DeviceType::CPU); }
int32_t kiln_device_type_meta(void) { return static_cast<int32_t>(DeviceType::Meta); }

KilnError kiln_tensor_empty(const int64_t* sizes, int64_t ndim, int32_t dtype, int32_t device_type,
                            int32_t device_index, KilnTensorHandle* out) {
  return guarded("kiln_tensor_empty", [&] {
    not_null(out, "the output pointer");
    *out = new_handle(
        empty(shape_from(sizes, ndim, "sizes"), TensorOptions(dtype_from(dtype)).device(device_from(device_type, device_index))));
  });
}

KilnError kiln_tensor_empty_strided(const int64_t* sizes, const int64_t* strides, int64_t ndim, int32_t dtype,
                                    int32_t device_type, int32_t device_index, KilnTensorHandle* out) {
  return guarded("kiln_tensor_empty_strided", [&] {
    not_null(out, "the output pointer");
    *out = new_handle(empty_strided(shape_from(sizes, ndim, "sizes"), shape_from(strides, ndim, "strides"),
                                    TensorOptions(dtype_from(dtype)).device(device_from(device_type, device_index))));
  });
}

KilnError kiln_tensor_from_blob(void* data, const int64_t* sizes, const int64_t* strides, int64_t ndim, int32_t dtype,
                                void (*deleter)(void*, void*), void* context, KilnTensorHandle* out) {
  return guarded("kiln_tensor_from_blob", [&] {
    not_null(out, "the output pointer");
    not_null(data, "the data pointer");
    std::function<void(void*)> release;
    if (deleter) release = [deleter, context](void* p) { deleter(p, context); };
    Shape s = shape_from(sizes, ndim, "sizes");
    Shape st = strides ? shape_from(strides, ndim, "strides") : contiguous_strides(s);
    *out = new_handle(from_blob(data, std::move(s), std::move(st), dtype_from(dtype), std::move(release)));
  });
}

KilnError kiln_tensor_new_handle(KilnTensorHandle t, KilnTensorHandle* out) {
  return guarded("kiln_tensor_new_handle", [&] { *not_null(out, "the output pointer") = new_handle(tensor_of(t)); });
}

KilnError kiln_tensor_delete(KilnTensorHandle t) {
  return guarded("kiln_tensor_delete", [&] { delete not_null(t, "the tensor handle"); });
}

KilnError kiln_tensor_undefined(KilnTensorHandle* out) {
  return guarded("kiln_tensor_undefined", [&] { *not_null(out, "the output pointer") = new_handle(Tensor()); });
}

KilnError kiln_tensor_defined(KilnTensorHandle t, int32_t* out) {
  return guarded("kiln_tensor_defined", [&] { *not_null(out, "the output pointer") = tensor_of(t).defined(); });
}

#define KILN_TENSOR_GETTER(fn, type, expr)                                                 \
  KilnError fn(KilnTensorHandle h, type* out) {                                            \
    return guarded(#fn, [&] {                                                              \
      const Tensor& t = defined_tensor(h);                                                 \
      *not_null(out, "the output pointer") = (expr);                                       \
    });                                                                                    \
  }
KILN_TENSOR_GETTER(kiln_tensor_dim, int64_t, t.dim())
KILN_TENSOR_GETTER(kiln_tensor_numel, int64_t, t.numel())
KILN_TENSOR_GETTER(kiln_tensor_storage_offset, int64_t, t.storage_offset())
KILN_TENSOR_GETTER(kiln_tensor_dtype, int32_t, static_cast<int32_t>(t.dtype()))
KILN_TENSOR_GETTER(kiln_tensor_element_size, int64_t, static_cast<int64_t>(t.element_size()))
KILN_TENSOR_GETTER(kiln_tensor_is_contiguous, int32_t, t.is_contiguous())
KILN_TENSOR_GETTER(kiln_tensor_data_ptr, void*, t.is_meta() ? nullptr : t.raw_data())
#undef KILN_TENSOR_GETTER

KilnError kiln_tensor_size(KilnTensorHandle t, int64_t dim, int64_t* out) {
  return guarded("kiln_tensor_size", [&] { *not_null(out, "the output pointer") = defined_tensor(t).size(dim); });
}

KilnError kiln_tensor_stride(KilnTensorHandle t, int64_t dim, int64_t* out) {
  return guarded("kiln_tensor_stride", [&] { *not_null(out, "the output pointer") = defined_tensor(t).stride(dim); });
}

KilnError kiln_tensor_device(KilnTensorHandle t, int32_t* device_type, int32_t* device_index) {
  return guarded("kiln_tensor_device", [&] {
    const Device d = defined_tensor(t).device();
    *not_null(device_type, "the device type pointer") = static_cast<int32_t>(d.type());
    *not_null(device_index, "the device index pointer") = d.index();
  });
}

KilnError kiln_tensor_clone(KilnTensorHandle t, KilnTensorHandle* out) {
  return guarded("kiln_tensor_clone", [&] {
    not_null(out, "the output pointer");
    *out = new_handle(defined_tensor(t).clone());
  });
}

KilnError kiln_tensor_copy_(KilnTensorHandle dst, KilnTensorHandle src) {
  return guarded("kiln_tensor_copy_", [&] { defined_tensor(dst).copy_(defined_tensor(src)); });
}

KilnError kiln_device_guard_enter(int32_t device_type, int32_t device_index, KilnDeviceGuardHandle* out) {
  return guarded("kiln_device_guard_enter", [&] {
    not_null(out, "the output pointer");
    *out = reinterpret_cast<KilnDeviceGuardHandle>(new DefaultDeviceGuard(device_from(device_type, device_index)));
  });
}

KilnError kiln_device_guard_exit(KilnDeviceGuardHandle guard) {
  return guarded("kiln_device_guard_exit", [&] {
    delete reinterpret_cast<DefaultDeviceGuard*>(not_null(guard, "the guard handle"));
  });
}

KilnError kiln_stream_current(int32_t device_type, int32_t device_index, int64_t* stream_id) {
  return guarded("kiln_stream_current", [&] {
    device_from(device_type, device_index);  // checks the codes
    *not_null(stream_id, "the output pointer") = 0;  // CPU and meta: one stream each
  });
}

KilnError kiln_parallel_for(int64_t begin, int64_t end, int64_t grain, KilnError (*fn)(int64_t, int64_t, void*),
                            void* context) {
  return guarded("kiln_parallel_for", [&] {
    not_null(fn, "the function");
    if (grain < 1) throw AbiError(KILN_ERROR_INVALID_ARGUMENT, "grain must be at least 1");
    std::mutex mu;
    KilnError first = KILN_OK;
    std::string message;
    parallel_for(begin, end, grain, [&](int64_t lo, int64_t hi) {
      const KilnError e = fn(lo, hi, context);
      if (e == KILN_OK) return;
      std::lock_guard<std::mutex> lock(mu);
      if (first == KILN_OK) first = e, message = last_error();  // the chunk's thread set it
    });
    if (first != KILN_OK) throw AbiError(first, message);
  });
}

KilnError kiln_num_threads(int32_t* out) {
  return guarded("kiln_num_threads", [&] { *not_null(out, "the output pointer") = get_num_threads(); });
}

KilnError kiln_call_op(const char* name, KilnValue* stack, uint64_t num_args, uint64_t num_outputs) {
  return call(name, stack, num_args, nullptr, nullptr, 0, num_outputs);
}

KilnError kiln_call_op_kw(const char* name, KilnValue* stack, uint64_t num_args, const char* const* kw_names,
                          const KilnValue* kw_values, uint64_t num_kwargs, uint64_t num_outputs) {
  return call(name, stack, num_args, kw_names, kw_values, num_kwargs, num_outputs);
}

}  // namespace kiln::stable_abi::impl
