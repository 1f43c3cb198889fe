// The exported functions of the stable C ABI (kiln/stable/c/shim.h), each
// forwarding to its implementation (shim_impl.h). Compiled with debug
// information in every build type, for the ABI check.
#include "kiln/stable/c/shim.h"
#include "stable/shim_impl.h"

extern "C" {

KilnError kiln_abi_version(uint32_t* out) { return kiln::stable_abi::impl::kiln_abi_version(out); }
const char* kiln_last_error(void) { return kiln::stable_abi::impl::kiln_last_error(); }
int32_t kiln_dtype_bool(void) { return kiln::stable_abi::impl::kiln_dtype_bool(); }
int32_t kiln_dtype_uint8(void) { return kiln::stable_abi::impl::kiln_dtype_uint8(); }
int32_t kiln_dtype_int8(void) { return kiln::stable_abi::impl::kiln_dtype_int8(); }
int32_t kiln_dtype_int16(void) { return kiln::stable_abi::impl::kiln_dtype_int16(); }
int32_t kiln_dtype_int32(void) { return kiln::stable_abi::impl::kiln_dtype_int32(); }
int32_t kiln_dtype_int64(void) { return kiln::stable_abi::impl::kiln_dtype_int64(); }
int32_t kiln_dtype_float16(void) { return kiln::stable_abi::impl::kiln_dtype_float16(); }
int32_t kiln_dtype_bfloat16(void) { return kiln::stable_abi::impl::kiln_dtype_bfloat16(); }
int32_t kiln_dtype_float32(void) { return kiln::stable_abi::impl::kiln_dtype_float32(); }
int32_t kiln_dtype_float64(void) { return kiln::stable_abi::impl::kiln_dtype_float64(); }
int32_t kiln_device_type_cpu(void) { return kiln::stable_abi::impl::kiln_device_type_cpu(); }
int32_t kiln_device_type_meta(void) { return kiln::stable_abi::impl::kiln_device_type_meta(); }
KilnError kiln_tensor_empty(const int64_t* sizes, int64_t ndim, int32_t dtype, int32_t device_type, int32_t device_index, KilnTensorHandle* out) { return kiln::stable_abi::impl::kiln_tensor_empty(sizes, ndim, dtype, device_type, device_index, out); }
KilnError kiln_tensor_empty_strided(const int64_t* sizes, const int64_t* strides, int64_t ndim, int32_t dtype, int32_t device_type, int32_t device_index, KilnTensorHandle* out) { return kiln::stable_abi::impl::kiln_tensor_empty_strided(sizes, strides, ndim, dtype, device_type, device_index, out); }
KilnError kiln_tensor_from_blob(void* data, const int64_t* sizes, const int64_t* strides, int64_t ndim, int32_t dtype, void (*deleter)(void* data, void* context), void* context, KilnTensorHandle* out) { return kiln::stable_abi::impl::kiln_tensor_from_blob(data, sizes, strides, ndim, dtype, deleter, context, out); }
KilnError kiln_tensor_new_handle(KilnTensorHandle t, KilnTensorHandle* out) { return kiln::stable_abi::impl::kiln_tensor_new_handle(t, out); }
KilnError kiln_tensor_delete(KilnTensorHandle t) { return kiln::stable_abi::impl::kiln_tensor_delete(t); }
KilnError kiln_tensor_undefined(KilnTensorHandle* out) { return kiln::stable_abi::impl::kiln_tensor_undefined(out); }
KilnError kiln_tensor_defined(KilnTensorHandle t, int32_t* out) { return kiln::stable_abi::impl::kiln_tensor_defined(t, out); }
KilnError kiln_tensor_dim(KilnTensorHandle t, int64_t* out) { return kiln::stable_abi::impl::kiln_tensor_dim(t, out); }
KilnError kiln_tensor_numel(KilnTensorHandle t, int64_t* out) { return kiln::stable_abi::impl::kiln_tensor_numel(t, out); }
KilnError kiln_tensor_size(KilnTensorHandle t, int64_t dim, int64_t* out) { return kiln::stable_abi::impl::kiln_tensor_size(t, dim, out); }
KilnError kiln_tensor_stride(KilnTensorHandle t, int64_t dim, int64_t* out) { return kiln::stable_abi::impl::kiln_tensor_stride(t, dim, out); }
KilnError kiln_tensor_storage_offset(KilnTensorHandle t, int64_t* out) { return kiln::stable_abi::impl::kiln_tensor_storage_offset(t, out); }
KilnError kiln_tensor_dtype(KilnTensorHandle t, int32_t* out) { return kiln::stable_abi::impl::kiln_tensor_dtype(t, out); }
KilnError kiln_tensor_element_size(KilnTensorHandle t, int64_t* out) { return kiln::stable_abi::impl::kiln_tensor_element_size(t, out); }
KilnError kiln_tensor_device(KilnTensorHandle t, int32_t* device_type, int32_t* device_index) { return kiln::stable_abi::impl::kiln_tensor_device(t, device_type, device_index); }
KilnError kiln_tensor_is_contiguous(KilnTensorHandle t, int32_t* out) { return kiln::stable_abi::impl::kiln_tensor_is_contiguous(t, out); }
KilnError kiln_tensor_data_ptr(KilnTensorHandle t, void** out) { return kiln::stable_abi::impl::kiln_tensor_data_ptr(t, out); }
KilnError kiln_tensor_clone(KilnTensorHandle t, KilnTensorHandle* out) { return kiln::stable_abi::impl::kiln_tensor_clone(t, out); }
KilnError kiln_tensor_copy_(KilnTensorHandle dst, KilnTensorHandle src) { return kiln::stable_abi::impl::kiln_tensor_copy_(dst, src); }
KilnError kiln_call_op(const char* name, KilnValue* stack, uint64_t num_args, uint64_t num_outputs) { return kiln::stable_abi::impl::kiln_call_op(name, stack, num_args, num_outputs); }
KilnError kiln_call_op_kw(const char* name, KilnValue* stack, uint64_t num_args, const char* const* kw_names, const KilnValue* kw_values, uint64_t num_kwargs, uint64_t num_outputs) { return kiln::stable_abi::impl::kiln_call_op_kw(name, stack, num_args, kw_names, kw_values, num_kwargs, num_outputs); }
KilnError kiln_device_guard_enter(int32_t device_type, int32_t device_index, KilnDeviceGuardHandle* out) { return kiln::stable_abi::impl::kiln_device_guard_enter(device_type, device_index, out); }
KilnError kiln_device_guard_exit(KilnDeviceGuardHandle guard) { return kiln::stable_abi::impl::kiln_device_guard_exit(guard); }
KilnError kiln_stream_current(int32_t device_type, int32_t device_index, int64_t* stream_id) { return kiln::stable_abi::impl::kiln_stream_current(device_type, device_index, stream_id); }
KilnError kiln_parallel_for(int64_t begin, int64_t end, int64_t grain, KilnError (*fn)(int64_t lo, int64_t hi, void* context), void* context) { return kiln::stable_abi::impl::kiln_parallel_for(begin, end, grain, fn, context); }
KilnError kiln_num_threads(int32_t* out) { return kiln::stable_abi::impl::kiln_num_threads(out); }
void kiln_set_error(const char* message) { kiln::stable_abi::impl::kiln_set_error(message); }
KilnError kiln_library_define(const char* ns, const char* schema) { return kiln::stable_abi::impl::kiln_library_define(ns, schema); }
KilnError kiln_library_shape(const char* ns, const char* name, KilnShapeFunction shape) { return kiln::stable_abi::impl::kiln_library_shape(ns, name, shape); }
KilnError kiln_library_backward(const char* ns, const char* name, const char* backward_name) { return kiln::stable_abi::impl::kiln_library_backward(ns, name, backward_name); }
KilnError kiln_library_impl(const char* ns, const char* name, int32_t device_type, KilnBoxedKernel kernel) { return kiln::stable_abi::impl::kiln_library_impl(ns, name, device_type, kernel); }

}  // extern "C"
