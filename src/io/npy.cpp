// NumPy's .npy format (version 1.0 written; 1.0, 2.0 and 3.0 read):
// "\x93NUMPY", the version, the header's length, a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
// spaces to a multiple of 64 bytes, then the elements.
#include <cstring>

#include "io/files.h"
#include "io/npy_format.h"
#include "kiln/error.h"
#include "kiln/io.h"
#include "kiln/ops.h"

namespace kiln::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

const char* descr_of(DType t) {
  switch (t) {
    case DType::Bool: return "|b1";
    case DType::UInt8: return "|u1";
    case DType::Int8: return "|i1";
    case DType::Int16: return "<i2";
    case DType::Int32: return "<i4";
    case DType::Int64: return "<i8";
    case DType::Float16: return "<f2";
    case DType::Float32: return "<f4";
    case DType::Float64: return "<f8";
    default: return nullptr;  // bfloat16: NumPy has none
  }
}

// The text after `key': ` in the header, up to the value's end: a quoted
// string, a parenthesised tuple, or a bare word ending at ',' or '}'.
std::string field(const std::string& header, const std::string& key, const std::string& path, const char* op) {
  const size_t k = header.find("'" + key + "'");
  check(k != std::string::npos, op, "'", path, "' has no '", key, "' in its header");
  size_t v = header.find(':', k);
  if (v != std::string::npos) v = header.find_first_not_of(' ', v + 1);
  size_t end = std::string::npos;
  if (v != std::string::npos) {
    if (header[v] == '(' || header[v] == '\'') {
      end = header.find(header[v] == '(' ? ')' : '\'', v + 1);
      if (end != std::string::npos) ++end;
    } else {
      end = header.find_first_of(",}", v);
    }
  }
  check(end != std::string::npos && end > v, op, "'", path, "' has a malformed '", key, "' in its header");
  return header.substr(v, end - v);
}

}  // namespace

Tensor npy_from_bytes(const std::string& bytes, const std::string& path, const char* op) {
  check(bytes.size() >= 10 && bytes.compare(0, 6, kMagic, 6) == 0, op, "'", path, "' is not a .npy file");
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const int major = b[6];
  check(major >= 1 && major <= 3, op, "'", path, "' has .npy version ", major, ".", int{b[7]}, ", not 1, 2 or 3");
  const size_t len_bytes = major == 1 ? 2 : 4;
  check(bytes.size() >= 8 + len_bytes, op, "'", path, "' ends inside its header");
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) header_len |= static_cast<size_t>(b[8 + i]) << (8 * i);
  const size_t offset = 8 + len_bytes + header_len;
  check(offset <= bytes.size(), op, "'", path, "' ends inside its header");
  const std::string header = bytes.substr(8 + len_bytes, header_len);

  const std::string descr = field(header, "descr", path, op);
  DType dtype = kFloat32;
  bool known = false;
  for (DType t : {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kFloat32, kFloat64})
    if (descr == std::string("'") + descr_of(t) + "'" ||
        (element_size(t) == 1 && descr == std::string("'<") + (descr_of(t) + 1) + "'")) {
      dtype = t, known = true;
    }
  check(known, op, "'", path, "' holds dtype ", descr, ", which kiln does not read (little-endian bool, integers "
        "and floats only)");
  const std::string order = field(header, "fortran_order", path, op);
  check(order == "False" || order == "True", op, "'", path, "' has fortran_order ", order);
  const std::string shape_text_field = field(header, "shape", path, op);
  check(shape_text_field.front() == '(' && shape_text_field.back() == ')', op, "'", path, "' has shape ",
        shape_text_field, ", not a tuple");
  Shape shape;
  size_t count = 1;
  for (size_t i = 1; i < shape_text_field.size();) {
    const size_t j = shape_text_field.find_first_of(",)", i);
    const std::string n = shape_text_field.substr(i, j - i);
    if (n.find_first_not_of(' ') != std::string::npos) {
      char* end = nullptr;
      const long long v = std::strtoll(n.c_str(), &end, 10);
      check(v >= 0 && *end == '\0', op, "'", path, "' has a malformed shape ", shape_text_field);
      shape.push_back(v);
      check(v == 0 || count <= bytes.size() / static_cast<size_t>(v), op, "'", path, "' claims more elements than it holds");
      count *= static_cast<size_t>(v);
    }
    i = j + 1;
  }
  detail::checked_shape_nbytes(shape, dtype, op, "'" + path + "'");
  check(bytes.size() - offset == count * element_size(dtype), op, "'", path, "' holds ", bytes.size() - offset,
        " bytes of data but its shape ", shape_text(shape), " needs ", count * element_size(dtype));
  if (dtype == kBool) {  // any other byte is not a bool (reading it as one is undefined)
    for (size_t i = offset; i < bytes.size(); ++i)
      check(b[i] <= 1, op, "'", path, "' holds bool byte ", int{b[i]}, " at element ", i - offset, ", not 0 or 1");
  }
  if (order == "True") {  // column-major: read as the reversed shape, then reverse the dims
    Shape reversed(shape.rbegin(), shape.rend());
    Tensor t = empty(reversed, dtype);
    std::memcpy(t.raw_data(), bytes.data() + offset, count * element_size(dtype));
    Shape dims;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) dims.push_back(d);
    return t.permute(dims).contiguous();
  }
  Tensor t = empty(shape, dtype);
  std::memcpy(t.raw_data(), bytes.data() + offset, count * element_size(dtype));
  return t;
}

std::string npy_bytes(const Tensor& t, const char* op) {
  const char* descr = descr_of(t.dtype());
  check(descr != nullptr, op, "NumPy has no ", t.dtype(), ": convert the tensor first");
  const Tensor c = t.contiguous();
  std::string shape = "(";
  for (int64_t d = 0; d < c.dim(); ++d) shape += std::to_string(c.size(d)) + (c.dim() == 1 ? ",)" : d + 1 < c.dim() ? ", " : ")");
  if (c.dim() == 0) shape += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  header += std::string(64 - (10 + header.size() + 1) % 64, ' ') + "\n";  // the data starts 64-byte aligned
  std::string out(kMagic, 6);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(c.raw_data()), static_cast<size_t>(c.numel()) * element_size(c.dtype()));
  return out;
}

Tensor load_npy(const std::string& path) { return npy_from_bytes(read_file(path), path, "load_npy"); }

void save_npy(const std::string& path, const Tensor& t) {
  const char* op = "save_npy";
  const std::string bytes = npy_bytes(t, op);
  detail::write_atomically(path, op, [&](int fd) { detail::write_all(fd, bytes.data(), bytes.size(), path, op); });
}

}  // namespace kiln::io
