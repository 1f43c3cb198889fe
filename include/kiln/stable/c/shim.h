/* kiln's stable C ABI: what an extension compiled against one kiln version
 * calls in later ones. C only (a test compiles it as C11): opaque handles,
 * an error code from every function (the message of the last failure on
 * this thread from kiln_last_error), no C++ type and no exception across.
 * dtype and device numbers come from getter functions, so their values are
 * not part of the ABI.
 *
 * The promise within a major version: functions are only added; a function
 * whose signature must change gets a new name (`_v2`) beside the old one;
 * KilnValue and the error codes keep their layout and values.
 */
#ifndef KILN_STABLE_C_SHIM_H
#define KILN_STABLE_C_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes: an extension records it at build
 * time; a runtime with the same major and a minor at least as new runs it. */
#define KILN_STABLE_ABI_VERSION_MAJOR 1
#define KILN_STABLE_ABI_VERSION_MINOR 0

typedef int32_t KilnError;
#define KILN_OK 0
#define KILN_ERROR_NULL_HANDLE 1      /* a handle argument (or output pointer) was null */
#define KILN_ERROR_INVALID_ARGUMENT 2 /* a value out of range, a wrong kind or dtype */
#define KILN_ERROR_RUNTIME 3          /* kiln raised an error (its message: kiln_last_error) */
#define KILN_ERROR_UNKNOWN_OP 4       /* kiln_call_op: no public op of that name */

/* A tensor: one reference to a kiln tensor, released by kiln_tensor_delete. */
typedef struct KilnTensorOpaque* KilnTensorHandle;

/* The runtime's ABI version (major << 16 | minor). */
KILN_API KilnError kiln_abi_version(uint32_t* out);
/* The message of the last failed call on this thread ("" when none). */
KILN_API const char* kiln_last_error(void);

/* dtype codes (int32), fetched at run time. */
KILN_API int32_t kiln_dtype_bool(void);
KILN_API int32_t kiln_dtype_uint8(void);
KILN_API int32_t kiln_dtype_int8(void);
KILN_API int32_t kiln_dtype_int16(void);
KILN_API int32_t kiln_dtype_int32(void);
KILN_API int32_t kiln_dtype_int64(void);
KILN_API int32_t kiln_dtype_float16(void);
KILN_API int32_t kiln_dtype_bfloat16(void);
KILN_API int32_t kiln_dtype_float32(void);
KILN_API int32_t kiln_dtype_float64(void);
/* device type codes (int32). */
KILN_API int32_t kiln_device_type_cpu(void);
KILN_API int32_t kiln_device_type_meta(void);

/* Tensors. Sizes and strides are in elements; `sizes` arrays hold `ndim`
 * entries. New handles are owned by the caller. */
KILN_API KilnError kiln_tensor_empty(const int64_t* sizes, int64_t ndim, int32_t dtype, int32_t device_type,
                            int32_t device_index, KilnTensorHandle* out);
KILN_API KilnError kiln_tensor_empty_strided(const int64_t* sizes, const int64_t* strides, int64_t ndim, int32_t dtype,
                                    int32_t device_type, int32_t device_index, KilnTensorHandle* out);
/* CPU memory the tensor does not own; deleter(data, context) runs when the
 * last reference goes (null: nothing runs). */
KILN_API KilnError kiln_tensor_from_blob(void* data, const int64_t* sizes, const int64_t* strides, int64_t ndim, int32_t dtype,
                                void (*deleter)(void* data, void* context), void* context, KilnTensorHandle* out);
/* Another reference to the same tensor. */
KILN_API KilnError kiln_tensor_new_handle(KilnTensorHandle t, KilnTensorHandle* out);
KILN_API KilnError kiln_tensor_delete(KilnTensorHandle t);
/* An undefined tensor (PyTorch's default-constructed one) and the test for it. */
KILN_API KilnError kiln_tensor_undefined(KilnTensorHandle* out);
KILN_API KilnError kiln_tensor_defined(KilnTensorHandle t, int32_t* out);

KILN_API KilnError kiln_tensor_dim(KilnTensorHandle t, int64_t* out);
KILN_API KilnError kiln_tensor_numel(KilnTensorHandle t, int64_t* out);
KILN_API KilnError kiln_tensor_size(KilnTensorHandle t, int64_t dim, int64_t* out);   /* dim may be negative */
KILN_API KilnError kiln_tensor_stride(KilnTensorHandle t, int64_t dim, int64_t* out); /* dim may be negative */
KILN_API KilnError kiln_tensor_storage_offset(KilnTensorHandle t, int64_t* out);
KILN_API KilnError kiln_tensor_dtype(KilnTensorHandle t, int32_t* out);
KILN_API KilnError kiln_tensor_element_size(KilnTensorHandle t, int64_t* out);
KILN_API KilnError kiln_tensor_device(KilnTensorHandle t, int32_t* device_type, int32_t* device_index);
KILN_API KilnError kiln_tensor_is_contiguous(KilnTensorHandle t, int32_t* out);
/* The first element's address (null for a tensor without data: meta). */
KILN_API KilnError kiln_tensor_data_ptr(KilnTensorHandle t, void** out);
KILN_API KilnError kiln_tensor_clone(KilnTensorHandle t, KilnTensorHandle* out);
/* dst = src (broadcast to dst's shape, converted to its dtype). */
KILN_API KilnError kiln_tensor_copy_(KilnTensorHandle dst, KilnTensorHandle src);

/* A boxed argument or result of kiln_call_op. `kind` says which field holds
 * it; the others are ignored. Lists and strings are borrowed: they must
 * live until the call returns. */
#define KILN_VALUE_NONE 0
#define KILN_VALUE_TENSOR 1
#define KILN_VALUE_INT 2
#define KILN_VALUE_FLOAT 3
#define KILN_VALUE_BOOL 4
#define KILN_VALUE_INT_LIST 5
#define KILN_VALUE_STRING 6
#define KILN_VALUE_DTYPE 7
#define KILN_VALUE_DEVICE 8
#define KILN_VALUE_TENSOR_LIST 9
typedef struct KilnValue {
  int32_t kind;
  int32_t dtype;                     /* KILN_VALUE_DTYPE; device type for KILN_VALUE_DEVICE */
  int64_t i;                         /* INT, BOOL (0 or 1), device index for DEVICE */
  double f;                          /* FLOAT */
  KilnTensorHandle tensor;           /* TENSOR */
  const int64_t* ints;               /* INT_LIST: count entries */
  const KilnTensorHandle* tensors;   /* TENSOR_LIST: count entries */
  int64_t count;
  const char* str;                   /* STRING, NUL-terminated */
} KilnValue;

/* Calls public op `name` ("add", or with its overload "add.Tensor") on the
 * num_args positional arguments in stack[0..num_args); on success its
 * results are written to stack[0..num_outputs) (a Tensor[] result as one
 * tensor per entry), tensors as new handles the caller owns. Keyword
 * arguments: kiln_call_op_kw. */
KILN_API KilnError kiln_call_op(const char* name, KilnValue* stack, uint64_t num_args, uint64_t num_outputs);
/* The same, with num_kwargs keyword arguments named kw_names[i] with values
 * kw_values[i]. */
KILN_API KilnError kiln_call_op_kw(const char* name, KilnValue* stack, uint64_t num_args, const char* const* kw_names,
                          const KilnValue* kw_values, uint64_t num_kwargs, uint64_t num_outputs);

/* The device factories use on this thread when not given one (kiln's
 * DefaultDeviceGuard): enter returns a guard that exit restores; guards
 * must exit in the reverse order of entering, on the thread that entered. */
typedef struct KilnDeviceGuardOpaque* KilnDeviceGuardHandle;
KILN_API KilnError kiln_device_guard_enter(int32_t device_type, int32_t device_index, KilnDeviceGuardHandle* out);
KILN_API KilnError kiln_device_guard_exit(KilnDeviceGuardHandle guard);
/* The current stream of a device: an id meaningful with that device only
 * (the CPU has one stream, id 0). */
KILN_API KilnError kiln_stream_current(int32_t device_type, int32_t device_index, int64_t* stream_id);

/* Runs fn(lo, hi, context) over chunks of [begin, end) of at least `grain`
 * indices on kiln's thread pool (serially inside another parallel_for).
 * A chunk's failure: fn returns non-zero after kiln_set_error; the first
 * failure is returned once every chunk has finished. */
KILN_API KilnError kiln_parallel_for(int64_t begin, int64_t end, int64_t grain,
                            KilnError (*fn)(int64_t lo, int64_t hi, void* context), void* context);
/* The number of threads kiln's pool runs. */
KILN_API KilnError kiln_num_threads(int32_t* out);

/* ---- extension ops
 * An extension is a shared object exporting
 *   uint32_t kiln_extension_abi_version(void);  the KILN_STABLE_ABI_VERSION it was built against
 *   KilnError kiln_extension_init(void);         its registrations (kiln_library_*)
 * (the C++ macros of kiln/stable/library.h define both). The runtime loads
 * it when the majors match and its minor is at most the runtime's. */

/* A boxed kernel: reads its num_args arguments from stack[0..num_args) and
 * writes num_outputs results to stack[0..num_outputs) (tensors as new
 * handles, which the runtime takes over). On failure it calls
 * kiln_set_error with the message and returns a non-zero code. */
typedef KilnError (*KilnBoxedKernel)(KilnValue* stack, uint64_t num_args, uint64_t num_outputs);

/* Records `message` as this thread's last error (for a kernel's failure). */
KILN_API void kiln_set_error(const char* message);
/* Declares op `ns::name` from its schema "name(Tensor x, float alpha) ->
 * Tensor" (the schema's name without the namespace). */
KILN_API KilnError kiln_library_define(const char* ns, const char* schema);
/* Gives op ns::name its kernel for a device type (kiln_device_type_cpu()). */
KILN_API KilnError kiln_library_impl(const char* ns, const char* name, int32_t device_type, KilnBoxedKernel kernel);
/* A result's metadata as a shape function gives it. */
#define KILN_MAX_DIMS 16
typedef struct KilnTensorMeta {
  int64_t ndim;
  int64_t sizes[KILN_MAX_DIMS];
  int32_t dtype;
  int32_t reserved; /* 0 */
} KilnTensorMeta;
/* A shape function: from the arguments (tensors: read their sizes and
 * dtypes, never their data, which may not exist yet), fills the metadata of
 * the num_outputs results; on failure kiln_set_error and a non-zero code. */
typedef KilnError (*KilnShapeFunction)(const KilnValue* args, uint64_t num_args, KilnTensorMeta* outputs,
                                       uint64_t num_outputs);
/* Gives op ns::name a shape function: the op then goes through kiln's
 * dispatcher like a built-in one, so kiln::compile traces it into its graphs
 * (no graph break) and autograd records it with its backward op. Its tensor
 * arguments must be plain `Tensor`s (not optional, not lists). */
KILN_API KilnError kiln_library_shape(const char* ns, const char* name, KilnShapeFunction shape);
/* Makes op ns::name differentiable: its gradients come from op
 * ns::backward_name, called with the gradient of each tensor result, then
 * every argument of the forward call, and returning one gradient per tensor
 * argument. Without one, calling ns::name on tensors that require grad
 * (with grad mode on) is an error rather than a gradient silently lost. */
KILN_API KilnError kiln_library_backward(const char* ns, const char* name, const char* backward_name);

#ifdef __cplusplus
}
#endif

#endif /* KILN_STABLE_C_SHIM_H */
