// Every function of the stable C ABI (kiln/stable/c/shim.h, the documented
// contract) once: its return type, name, parameters and the arguments that
// forward them. shim_impl.h declares the runtime's implementations from
// this list and shim_c.cpp defines the exported C functions, each a
// one-line forward; a function added to the header and missing here (or
// the reverse, or with other types) fails to compile or to pass the ABI
// check (tests/stable/abi_check.sh).
#pragma once

// clang-format off
#define KILN_SHIM_FUNCTIONS(X) \
  X(KilnError, kiln_abi_version, (uint32_t* out), (out)) \
  X(const char*, kiln_last_error, (void), ()) \
  X(int32_t, kiln_dtype_bool, (void), ()) \
  X(int32_t, kiln_dtype_uint8, (void), ()) \
  X(int32_t, kiln_dtype_int8, (void), ()) \
  X(int32_t, kiln_dtype_int16, (void), ()) \
  X(int32_t, kiln_dtype_int32, (void), ()) \
  X(int32_t, kiln_dtype_int64, (void), ()) \
  X(int32_t, kiln_dtype_float16, (void), ()) \
  X(int32_t, kiln_dtype_bfloat16, (void), ()) \
  X(int32_t, kiln_dtype_float32, (void), ()) \
  X(int32_t, kiln_dtype_float64, (void), ()) \
  X(int32_t, kiln_device_type_cpu, (void), ()) \
  X(int32_t, kiln_device_type_meta, (void), ()) \
  X(KilnError, kiln_tensor_empty, (const int64_t* sizes, int64_t ndim, int32_t dtype, int32_t device_type, int32_t device_index, KilnTensorHandle* out), (sizes, ndim, dtype, device_type, device_index, out)) \
  X(KilnError, kiln_tensor_empty_strided, (const int64_t* sizes, const int64_t* strides, int64_t ndim, int32_t dtype, int32_t device_type, int32_t device_index, KilnTensorHandle* out), (sizes, strides, ndim, dtype, device_type, device_index, out)) \
  X(KilnError, kiln_tensor_from_blob, (void* data, const int64_t* sizes, const int64_t* strides, int64_t ndim, int32_t dtype, void (*deleter)(void* data, void* context), void* context, KilnTensorHandle* out), (data, sizes, strides, ndim, dtype, deleter, context, out)) \
  X(KilnError, kiln_tensor_new_handle, (KilnTensorHandle t, KilnTensorHandle* out), (t, out)) \
  X(KilnError, kiln_tensor_delete, (KilnTensorHandle t), (t)) \
  X(KilnError, kiln_tensor_undefined, (KilnTensorHandle* out), (out)) \
  X(KilnError, kiln_tensor_defined, (KilnTensorHandle t, int32_t* out), (t, out)) \
  X(KilnError, kiln_tensor_dim, (KilnTensorHandle t, int64_t* out), (t, out)) \
  X(KilnError, kiln_tensor_numel, (KilnTensorHandle t, int64_t* out), (t, out)) \
  X(KilnError, kiln_tensor_size, (KilnTensorHandle t, int64_t dim, int64_t* out), (t, dim, out)) \
  X(KilnError, kiln_tensor_stride, (KilnTensorHandle t, int64_t dim, int64_t* out), (t, dim, out)) \
  X(KilnError, kiln_tensor_storage_offset, (KilnTensorHandle t, int64_t* out), (t, out)) \
  X(KilnError, kiln_tensor_dtype, (KilnTensorHandle t, int32_t* out), (t, out)) \
  X(KilnError, kiln_tensor_element_size, (KilnTensorHandle t, int64_t* out), (t, out)) \
  X(KilnError, kiln_tensor_device, (KilnTensorHandle t, int32_t* device_type, int32_t* device_index), (t, device_type, device_index)) \
  X(KilnError, kiln_tensor_is_contiguous, (KilnTensorHandle t, int32_t* out), (t, out)) \
  X(KilnError, kiln_tensor_data_ptr, (KilnTensorHandle t, void** out), (t, out)) \
  X(KilnError, kiln_tensor_clone, (KilnTensorHandle t, KilnTensorHandle* out), (t, out)) \
  X(KilnError, kiln_tensor_copy_, (KilnTensorHandle dst, KilnTensorHandle src), (dst, src)) \
  X(KilnError, kiln_call_op, (const char* name, KilnValue* stack, uint64_t num_args, uint64_t num_outputs), (name, stack, num_args, num_outputs)) \
  X(KilnError, kiln_call_op_kw, (const char* name, KilnValue* stack, uint64_t num_args, const char* const* kw_names, const KilnValue* kw_values, uint64_t num_kwargs, uint64_t num_outputs), (name, stack, num_args, kw_names, kw_values, num_kwargs, num_outputs)) \
  X(KilnError, kiln_device_guard_enter, (int32_t device_type, int32_t device_index, KilnDeviceGuardHandle* out), (device_type, device_index, out)) \
  X(KilnError, kiln_device_guard_exit, (KilnDeviceGuardHandle guard), (guard)) \
  X(KilnError, kiln_stream_current, (int32_t device_type, int32_t device_index, int64_t* stream_id), (device_type, device_index, stream_id)) \
  X(KilnError, kiln_parallel_for, (int64_t begin, int64_t end, int64_t grain, KilnError (*fn)(int64_t lo, int64_t hi, void* context), void* context), (begin, end, grain, fn, context)) \
  X(KilnError, kiln_num_threads, (int32_t* out), (out)) \
  X(void, kiln_set_error, (const char* message), (message)) \
  X(KilnError, kiln_library_define, (const char* ns, const char* schema), (ns, schema)) \
  X(KilnError, kiln_library_impl, (const char* ns, const char* name, int32_t device_type, KilnBoxedKernel kernel), (ns, name, device_type, kernel)) \
  X(KilnError, kiln_library_shape, (const char* ns, const char* name, KilnShapeFunction shape), (ns, name, shape)) \
  X(KilnError, kiln_library_backward, (const char* ns, const char* name, const char* backward_name), (ns, name, backward_name))
// clang-format on
