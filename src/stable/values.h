// The stable C ABI's values on the runtime's side, shared by the shim and
// the extension registry: what a handle is, the per-thread message of the
// last failure (kiln_last_error), and the conversions between C values
// (KilnValue, codes, arrays) and kiln's (IValue, DType, Device, Shape).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/call_op.h"
#include "kiln/stable/c/shim.h"
#include "kiln/tensor.h"

struct KilnTensorOpaque {
  kiln::Tensor t;
};

namespace kiln::stable_abi {

std::string& last_error();

// A value that does not fit the ABI (null, out of range, unknown kind), with
// the code the shim returns for it. A kiln::Error, so it also reads as one
// where an extension's results are converted.
class AbiError : public Error {
 public:
  AbiError(KilnError code, const std::string& message) : Error(message), code_(code) {}
  KilnError code() const { return code_; }

 private:
  KilnError code_;
};

template <class P>
P* not_null(P* p, const char* what) {
  if (!p) throw AbiError(KILN_ERROR_NULL_HANDLE, std::string(what) + " is null");
  return p;
}
const Tensor& tensor_of(KilnTensorHandle h);
DType dtype_from(int32_t code);
Device device_from(int32_t type, int32_t index);
Shape shape_from(const int64_t* values, int64_t n, const char* what);
KilnTensorHandle new_handle(Tensor t);

// A C value as an IValue (copied: it does not point into `v` afterwards).
IValue from_c(const KilnValue& v, const char* where);

// IValues as C values: the handles, lists and strings they point to live in
// this object until it goes; with hand_over_handles the handles are the
// caller's from the start (results returned through the C ABI; those hold
// no lists or strings, whose memory goes with this object).
class CValues {
 public:
  explicit CValues(bool hand_over_handles = false) : hand_over_(hand_over_handles) {}
  CValues(const CValues&) = delete;
  CValues& operator=(const CValues&) = delete;
  ~CValues();
  KilnValue to_c(const IValue& v);
  bool owns(KilnTensorHandle h) const;
  std::vector<KilnValue> stack;

 private:
  KilnTensorHandle handle(const Tensor& t);
  bool hand_over_;
  std::vector<KilnTensorHandle> owned_;
  std::vector<std::unique_ptr<Shape>> lists_;
  std::vector<std::unique_ptr<std::vector<KilnTensorHandle>>> tensor_lists_;
  std::vector<std::unique_ptr<std::string>> strings_;
};

}  // namespace kiln::stable_abi
