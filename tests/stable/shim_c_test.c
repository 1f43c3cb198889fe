/* The stable C ABI used from C11 (the header must compile as C): tensors
 * made and read through handles, an op called by name, and each kind of
 * failure returned as a code with a message, never a crash. Exit status 0
 * when every check holds; each failure prints its line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/stable/c/shim.h"

static int failures = 0;
#define EXPECT(cond)                                           \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                              \
    }                                                          \
  } while (0)

static int deleted = 0;
static void count_delete(void* data, void* context) {
  (void)data;
  *(int*)context += 1;
}

int main(void) {
  uint32_t version = 0;
  EXPECT(kiln_abi_version(&version) == KILN_OK);
  EXPECT(version >> 16 == KILN_STABLE_ABI_VERSION_MAJOR);

  /* A (2, 3) float32 tensor over C memory, and its metadata. */
  float data[6] = {1, 2, 3, 4, 5, 6};
  const int64_t sizes[2] = {2, 3};
  KilnTensorHandle a = NULL;
  EXPECT(kiln_tensor_from_blob(data, sizes, NULL, 2, kiln_dtype_float32(), count_delete, &deleted, &a) == KILN_OK);
  int64_t v = 0;
  int32_t d32 = 0, index = 0;
  EXPECT(kiln_tensor_dim(a, &v) == KILN_OK && v == 2);
  EXPECT(kiln_tensor_numel(a, &v) == KILN_OK && v == 6);
  EXPECT(kiln_tensor_size(a, -1, &v) == KILN_OK && v == 3);
  EXPECT(kiln_tensor_stride(a, 0, &v) == KILN_OK && v == 3);
  EXPECT(kiln_tensor_dtype(a, &d32) == KILN_OK && d32 == kiln_dtype_float32());
  EXPECT(kiln_tensor_device(a, &d32, &index) == KILN_OK && d32 == kiln_device_type_cpu());
  EXPECT(kiln_tensor_is_contiguous(a, &d32) == KILN_OK && d32 == 1);
  void* p = NULL;
  EXPECT(kiln_tensor_data_ptr(a, &p) == KILN_OK && p == data);

  /* add(a, a, alpha=2) by name: 3 a. */
  KilnValue stack[2];
  memset(stack, 0, sizeof stack);
  stack[0].kind = KILN_VALUE_TENSOR, stack[0].tensor = a;
  stack[1].kind = KILN_VALUE_TENSOR, stack[1].tensor = a;
  const char* names[1] = {"alpha"};
  KilnValue alpha;
  memset(&alpha, 0, sizeof alpha);
  alpha.kind = KILN_VALUE_INT, alpha.i = 2;
  EXPECT(kiln_call_op_kw("add", stack, 2, names, &alpha, 1, 1) == KILN_OK);
  EXPECT(stack[0].kind == KILN_VALUE_TENSOR);
  KilnTensorHandle sum = stack[0].tensor;
  EXPECT(kiln_tensor_data_ptr(sum, &p) == KILN_OK && ((float*)p)[5] == 18.0f);

  /* sum over dim 1 with an int list argument. */
  const int64_t dims[1] = {1};
  memset(stack, 0, sizeof stack);
  stack[0].kind = KILN_VALUE_TENSOR, stack[0].tensor = sum;
  stack[1].kind = KILN_VALUE_INT_LIST, stack[1].ints = dims, stack[1].count = 1;
  EXPECT(kiln_call_op("sum", stack, 2, 1) == KILN_OK);
  EXPECT(kiln_tensor_data_ptr(stack[0].tensor, &p) == KILN_OK && ((float*)p)[0] == 18.0f && ((float*)p)[1] == 45.0f);
  EXPECT(kiln_tensor_delete(stack[0].tensor) == KILN_OK);

  /* An extension's op, its library named by KILN_EXTENSIONS (ctest sets both). */
  if (getenv("KILN_TEST_EXPECT_EXTENSION")) {
    memset(stack, 0, sizeof stack);
    stack[0].kind = KILN_VALUE_TENSOR, stack[0].tensor = a;
    const KilnError e = kiln_call_op("testext::stats", stack, 1, 2);
    EXPECT(e == KILN_OK);
    if (e == KILN_OK) {
      EXPECT(stack[1].kind == KILN_VALUE_INT && stack[1].i == 6);
      EXPECT(stack[0].kind == KILN_VALUE_TENSOR);
      EXPECT(kiln_tensor_data_ptr(stack[0].tensor, &p) == KILN_OK && ((float*)p)[0] == 21.0f);
      EXPECT(kiln_tensor_delete(stack[0].tensor) == KILN_OK);
    } else {
      fprintf(stderr, "%s\n", kiln_last_error());
    }
  }

  /* Failures: codes and messages. */
  EXPECT(kiln_tensor_dim(NULL, &v) == KILN_ERROR_NULL_HANDLE);
  EXPECT(strstr(kiln_last_error(), "null") != NULL);
  EXPECT(kiln_tensor_dim(a, NULL) == KILN_ERROR_NULL_HANDLE);
  EXPECT(kiln_call_op("no_such_op", stack, 0, 0) == KILN_ERROR_UNKNOWN_OP);
  EXPECT(strstr(kiln_last_error(), "no_such_op") != NULL);
  memset(stack, 0, sizeof stack);
  stack[0].kind = KILN_VALUE_TENSOR, stack[0].tensor = a;
  stack[1].kind = KILN_VALUE_TENSOR, stack[1].tensor = a;
  EXPECT(kiln_call_op("mm", stack, 2, 1) == KILN_ERROR_RUNTIME); /* (2, 3) @ (2, 3) */
  EXPECT(strstr(kiln_last_error(), "[mm]") != NULL);
  EXPECT(kiln_tensor_empty(sizes, 2, 99, kiln_device_type_cpu(), 0, &sum) == KILN_ERROR_INVALID_ARGUMENT);
  EXPECT(kiln_tensor_empty(sizes, 2, kiln_dtype_float32(), kiln_device_type_cpu(), 5, &sum) ==
         KILN_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(kiln_last_error(), "CPU device index must be -1 or 0, got 5") != NULL);
  stack[1].kind = 42;
  EXPECT(kiln_call_op("add", stack, 2, 1) == KILN_ERROR_INVALID_ARGUMENT);
  KilnTensorHandle undefined = NULL;
  EXPECT(kiln_tensor_undefined(&undefined) == KILN_OK);
  EXPECT(kiln_tensor_defined(undefined, &d32) == KILN_OK && d32 == 0);
  EXPECT(kiln_tensor_numel(undefined, &v) == KILN_ERROR_INVALID_ARGUMENT);
  EXPECT(kiln_tensor_delete(undefined) == KILN_OK);

  /* The blob's deleter runs when the last reference goes. */
  EXPECT(kiln_tensor_delete(sum) == KILN_OK);
  EXPECT(deleted == 0);
  EXPECT(kiln_tensor_delete(a) == KILN_OK);
  EXPECT(deleted == 1);
  if (failures == 0) printf("stable C ABI: all checks hold\n");
  return failures == 0 ? 0 : 1;
}
