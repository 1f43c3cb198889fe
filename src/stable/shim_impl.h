// The C shim's functions as the runtime implements them (shim.cpp,
// extensions.cpp): the same signatures in a C++ namespace. shim_c.cpp
// defines the exported C functions as one-line forwards to these, so the
// debug information of the ABI (what tests/stable/abi_check.sh compares)
// holds the C types alone, not the implementation's C++ ones.
#pragma once
#include "kiln/stable/c/shim.h"

namespace kiln::stable_abi::impl {

KilnError kiln_abi_version(uint32_t* out);
const char* kiln_last_error(void);
int32_t kiln_dtype_bool(void);
int32_t kiln_dtype_uint8(void);
int32_t kiln_dtype_int8(void);
int32_t kiln_dtype_int16(void);
int32_t kiln_dtype_int32(void);
int32_t kiln_dtype_int64(void);
int32_t kiln_dtype_float16(void);
int32_t kiln_dtype_bfloat16(void);
int32_t kiln_dtype_float32(void);
int32_t kiln_dtype_float64(void);
int32_t kiln_device_type_cpu(void);
int32_t kiln_device_type_meta(void);
KilnError kiln_tensor_empty(const int64_t* sizes, int64_t ndim, int32_t dtype, int32_t device_type, int32_t device_index, KilnTensorHandle* out);
KilnError kiln_tensor_empty_strided(const int64_t* sizes, const int64_t* strides, int64_t ndim, int32_t dtype, int32_t device_type, int32_t device_index, KilnTensorHandle* out);
KilnError kiln_tensor_from_blob(void* data, const int64_t* sizes, const int64_t* strides, int64_t ndim, int32_t dtype, void (*deleter)(void* data, void* context), void* context, KilnTensorHandle* out);
KilnError kiln_tensor_new_handle(KilnTensorHandle t, KilnTensorHandle* out);
KilnError kiln_tensor_delete(KilnTensorHandle t);
KilnError kiln_tensor_undefined(KilnTensorHandle* out);
KilnError kiln_tensor_defined(KilnTensorHandle t, int32_t* out);
KilnError kiln_tensor_dim(KilnTensorHandle t, int64_t* out);
KilnError kiln_tensor_numel(KilnTensorHandle t, int64_t* out);
KilnError kiln_tensor_size(KilnTensorHandle t, int64_t dim, int64_t* out);
KilnError kiln_tensor_stride(KilnTensorHandle t, int64_t dim, int64_t* out);
KilnError kiln_tensor_storage_offset(KilnTensorHandle t, int64_t* out);
KilnError kiln_tensor_dtype(KilnTensorHandle t, int32_t* out);
KilnError kiln_tensor_element_size(KilnTensorHandle t, int64_t* out);
KilnError kiln_tensor_device(KilnTensorHandle t, int32_t* device_type, int32_t* device_index);
KilnError kiln_tensor_is_contiguous(KilnTensorHandle t, int32_t* out);
KilnError kiln_tensor_data_ptr(KilnTensorHandle t, void** out);
KilnError kiln_tensor_clone(KilnTensorHandle t, KilnTensorHandle* out);
KilnError kiln_tensor_copy_(KilnTensorHandle dst, KilnTensorHandle src);
KilnError kiln_call_op(const char* name, KilnValue* stack, uint64_t num_args, uint64_t num_outputs);
KilnError kiln_call_op_kw(const char* name, KilnValue* stack, uint64_t num_args, const char* const* kw_names, const KilnValue* kw_values, uint64_t num_kwargs, uint64_t num_outputs);
KilnError kiln_device_guard_enter(int32_t device_type, int32_t device_index, KilnDeviceGuardHandle* out);
KilnError kiln_device_guard_exit(KilnDeviceGuardHandle guard);
KilnError kiln_stream_current(int32_t device_type, int32_t device_index, int64_t* stream_id);
KilnError kiln_parallel_for(int64_t begin, int64_t end, int64_t grain, KilnError (*fn)(int64_t lo, int64_t hi, void* context), void* context);
KilnError kiln_num_threads(int32_t* out);
void kiln_set_error(const char* message);
KilnError kiln_library_define(const char* ns, const char* schema);
KilnError kiln_library_impl(const char* ns, const char* name, int32_t device_type, KilnBoxedKernel kernel);
KilnError kiln_library_shape(const char* ns, const char* name, KilnShapeFunction shape);
KilnError kiln_library_backward(const char* ns, const char* name, const char* backward_name);

}  // namespace kiln::stable_abi::impl
