// Data files of other tools read into tensors: MNIST's IDX (plain or
// gzip), CSV of numbers, and NumPy's .npy (read and written).
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "io/files.h"
#include "kiln/error.h"
#include "kiln/io.h"
#include "kiln/ops.h"

namespace kiln::io {
namespace {

// Every byte of a regular file, gunzipped if it is gzip (zlib reads a plain
// file through unchanged). Stops at `limit` bytes: a small .gz can claim
// gigabytes, and the caller's header says how much it needs.
std::string read_maybe_gzipped(const std::string& path, const char* op) {
  const detail::RegularFile file(path, op);
  const int fd = dup(file.fd());
  check(fd >= 0, op, "cannot read '", path, "': ", std::strerror(errno));
  gzFile gz = gzdopen(fd, "rb");
  if (!gz) close(fd);
  check(gz != nullptr, op, "cannot read '", path, "'");
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(gz, buf, sizeof buf);
    if (n <= 0) {
      int code = 0;
      const char* msg = n < 0 ? gzerror(gz, &code) : nullptr;
      gzclose(gz);
      check(n == 0, op, "'", path, "' is not a readable gzip or plain file: ", msg ? msg : "");
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

uint32_t big_endian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Tensor load_idx(const std::string& path) {
  const char* op = "load_idx";
  const std::string bytes = read_maybe_gzipped(path, op);
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  check(bytes.size() >= 4 && b[0] == 0 && b[1] == 0, op, "'", path, "' is not an IDX file (no 0x0000 magic)");
  DType dtype;
  switch (b[2]) {
    case 0x08: dtype = kUInt8; break;
    case 0x09: dtype = kInt8; break;
    case 0x0B: dtype = kInt16; break;
    case 0x0C: dtype = kInt32; break;
    case 0x0D: dtype = kFloat32; break;
    case 0x0E: dtype = kFloat64; break;
    default: fail(op, "'", path, "' has unknown IDX type code 0x", std::hex, int{b[2]});
  }
  const size_t dims = b[3];
  check(bytes.size() >= 4 + 4 * dims, op, "'", path, "' ends inside its header");
  Shape shape;
  size_t count = 1;
  for (size_t d = 0; d < dims; ++d) {
    shape.push_back(big_endian32(b + 4 + 4 * d));
    check(shape.back() == 0 || count <= bytes.size() / static_cast<size_t>(shape.back()), op, "'", path,
          "' claims more elements than it holds");
    count *= static_cast<size_t>(shape.back());
  }
  const size_t elem = element_size(dtype), offset = 4 + 4 * dims;
  check(bytes.size() - offset == count * elem, op, "'", path, "' holds ", bytes.size() - offset,
        " bytes of data but its shape ", shape_text(shape), " needs ", count * elem);
  Tensor t = empty(shape, dtype);
  auto* out = static_cast<unsigned char*>(t.raw_data());
  for (size_t i = 0; i < count; ++i)  // big-endian to this machine's order
    for (size_t k = 0; k < elem; ++k) out[i * elem + k] = b[offset + i * elem + (elem - 1 - k)];
  return t;
}

Tensor load_csv(const std::string& path, bool header, char delimiter, DType dtype) {
  const char* op = "load_csv";
  check(is_floating(dtype) || is_integral(dtype), op, "expected a numeric dtype but got ", dtype);
  std::istringstream in(read_file(path));
  std::vector<double> values;
  int64_t columns = -1, rows = 0, line_number = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if ((header && line_number == 1) || line.find_first_not_of(" \t") == std::string::npos) continue;
    int64_t fields = 0;
    size_t start = 0;
    for (;;) {
      const size_t end = line.find(delimiter, start);
      const std::string field = line.substr(start, end == std::string::npos ? std::string::npos : end - start);
      char* stop = nullptr;
      errno = 0;
      const double v = std::strtod(field.c_str(), &stop);
      const bool blank_tail = stop != field.c_str() && field.find_first_not_of(" \t", static_cast<size_t>(stop - field.c_str())) == std::string::npos;
      check(blank_tail && errno != ERANGE, op, "'", path, "' line ", line_number, " field ", fields + 1, ": \"", field,
            "\" is not a number");
      values.push_back(v);
      ++fields;
      if (end == std::string::npos) break;
      start = end + 1;
    }
    check(columns < 0 || fields == columns, op, "'", path, "' line ", line_number, " has ", fields,
          " fields but the rows before have ", columns);
    columns = fields, ++rows;
  }
  return tensor<double>(values, {rows, std::max<int64_t>(columns, 0)}).to(dtype);
}

}  // namespace kiln::io
