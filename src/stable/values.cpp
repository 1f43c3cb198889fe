// Conversions between the stable C ABI's values and kiln's (values.h).
#include "stable/values.h"

#include <algorithm>

namespace kiln::stable_abi {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

const Tensor& tensor_of(KilnTensorHandle h) { return not_null(h, "the tensor handle")->t; }

DType dtype_from(int32_t code) {
  if (code < 0 || code >= kNumDTypes)
    throw AbiError(KILN_ERROR_INVALID_ARGUMENT, "dtype code " + std::to_string(code) + " names no dtype");
  return static_cast<DType>(code);
}

Device device_from(int32_t type, int32_t index) {
  if (type < 0 || type >= kNumDeviceTypes)
    throw AbiError(KILN_ERROR_INVALID_ARGUMENT, "device type code " + std::to_string(type) + " names no device type");
  const Device device(static_cast<DeviceType>(type), index);
  // The CPU and meta are one device each (PyTorch refuses cpu:5 the same way).
  if (index != -1 && index != 0 && (device.is_cpu() || device.is_meta()))
    throw AbiError(KILN_ERROR_INVALID_ARGUMENT, std::string(device.is_cpu() ? "CPU" : "meta") +
                                                    " device index must be -1 or 0, got " + std::to_string(index));
  return device;
}

Shape shape_from(const int64_t* values, int64_t n, const char* what) {
  if (n < 0) throw AbiError(KILN_ERROR_INVALID_ARGUMENT, std::string("negative length of ") + what);
  if (n > 0) not_null(values, what);
  return Shape(values, values + n);
}

KilnTensorHandle new_handle(Tensor t) { return new KilnTensorOpaque{std::move(t)}; }

IValue from_c(const KilnValue& v, const char* where) {
  switch (v.kind) {
    case KILN_VALUE_NONE: return std::monostate{};
    case KILN_VALUE_TENSOR: return tensor_of(v.tensor);
    case KILN_VALUE_INT: return v.i;
    case KILN_VALUE_FLOAT: return v.f;
    case KILN_VALUE_BOOL: return v.i != 0;
    case KILN_VALUE_INT_LIST: return shape_from(v.ints, v.count, "an int list");
    case KILN_VALUE_STRING: return std::string(not_null(v.str, "a string value"));
    case KILN_VALUE_DTYPE: return dtype_from(v.dtype);
    case KILN_VALUE_DEVICE: return device_from(v.dtype, static_cast<int32_t>(v.i));
    case KILN_VALUE_TENSOR_LIST: {
      if (v.count < 0) throw AbiError(KILN_ERROR_INVALID_ARGUMENT, "negative length of a tensor list");
      std::vector<Tensor> list;
      for (int64_t i = 0; i < v.count; ++i) list.push_back(tensor_of(not_null(v.tensors, "a tensor list")[i]));
      return list;
    }
  }
  throw AbiError(KILN_ERROR_INVALID_ARGUMENT, std::string(where) + " has unknown kind " + std::to_string(v.kind));
}

CValues::~CValues() {
  for (KilnTensorHandle h : owned_) delete h;
}

KilnTensorHandle CValues::handle(const Tensor& t) {
  KilnTensorHandle h = new_handle(t);
  if (!hand_over_) owned_.push_back(h);
  return h;
}

bool CValues::owns(KilnTensorHandle h) const { return std::find(owned_.begin(), owned_.end(), h) != owned_.end(); }

KilnValue CValues::to_c(const IValue& v) {
  KilnValue out{};
  if (const auto* t = std::get_if<Tensor>(&v)) {
    out.kind = KILN_VALUE_TENSOR;
    out.tensor = handle(*t);
  } else if (const auto* l = std::get_if<std::vector<Tensor>>(&v)) {
    auto hs = std::make_unique<std::vector<KilnTensorHandle>>();
    for (const Tensor& t : *l) hs->push_back(handle(t));
    out.kind = KILN_VALUE_TENSOR_LIST;
    out.tensors = hs->data();
    out.count = static_cast<int64_t>(hs->size());
    tensor_lists_.push_back(std::move(hs));
  } else if (const auto* i = std::get_if<int64_t>(&v)) {
    out.kind = KILN_VALUE_INT, out.i = *i;
  } else if (const auto* f = std::get_if<double>(&v)) {
    out.kind = KILN_VALUE_FLOAT, out.f = *f;
  } else if (const auto* b = std::get_if<bool>(&v)) {
    out.kind = KILN_VALUE_BOOL, out.i = *b;
  } else if (const auto* s = std::get_if<Shape>(&v)) {
    lists_.push_back(std::make_unique<Shape>(*s));
    out.kind = KILN_VALUE_INT_LIST;
    out.ints = lists_.back()->data();
    out.count = static_cast<int64_t>(lists_.back()->size());
  } else if (const auto* str = std::get_if<std::string>(&v)) {
    strings_.push_back(std::make_unique<std::string>(*str));
    out.kind = KILN_VALUE_STRING, out.str = strings_.back()->c_str();
  } else if (const auto* d = std::get_if<DType>(&v)) {
    out.kind = KILN_VALUE_DTYPE, out.dtype = static_cast<int32_t>(*d);
  } else if (const auto* dev = std::get_if<Device>(&v)) {
    out.kind = KILN_VALUE_DEVICE, out.dtype = static_cast<int32_t>(dev->type()), out.i = dev->index();
  }
  return out;
}

}  // namespace kiln::stable_abi
