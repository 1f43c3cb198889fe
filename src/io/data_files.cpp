// Data files of other tools read into tensors: MNIST's IDX (plain or
// gzip), CSV of numbers, and NumPy's .npy (read and written).
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "io/files.h"
#include "kiln/error.h"
#include "kiln/io.h"
#include "kiln/ops.h"

namespace kiln::io {
namespace {

// A regular file read through zlib: gunzipped if it is gzip, as it is
// otherwise. read() appends what arrives, chunk by chunk, so a header that
// claims more than the file holds costs only what the file holds (a small
// .gz can expand enormously; the caller asks for what its header says).
class MaybeGzipped {
 public:
  MaybeGzipped(const std::string& path, const char* op) : file_(path, op), path_(path), op_(op) {
    const int fd = dup(file_.fd());
    check(fd >= 0, op, "cannot read '", path, "': ", std::strerror(errno));
    gz_ = gzdopen(fd, "rb");
    if (!gz_) close(fd);
    check(gz_ != nullptr, op, "cannot read '", path, "'");
  }
  ~MaybeGzipped() { gzclose(gz_); }
  MaybeGzipped(const MaybeGzipped&) = delete;
  MaybeGzipped& operator=(const MaybeGzipped&) = delete;

  // Appends up to n more bytes to `out` (fewer at the end of the data).
  void read(std::string& out, size_t n) {
    char buf[1 << 16];
    while (n > 0) {
      const int got = gzread(gz_, buf, static_cast<unsigned>(std::min(n, sizeof buf)));
      int code = 0;
      check(got >= 0, op_, "'", path_, "' is not a readable gzip or plain file: ", gzerror(gz_, &code));
      if (got == 0) return;
      out.append(buf, static_cast<size_t>(got));
      n -= static_cast<size_t>(got);
    }
  }

 private:
  detail::RegularFile file_;
  std::string path_;
  const char* op_;
  gzFile gz_ = nullptr;
};

uint32_t big_endian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Tensor load_idx(const std::string& path) {
  const char* op = "load_idx";
  MaybeGzipped in(path, op);
  std::string header;
  in.read(header, 4);
  const auto* b = reinterpret_cast<const unsigned char*>(header.data());
  check(header.size() == 4 && b[0] == 0 && b[1] == 0, op, "'", path, "' is not an IDX file (no 0x0000 magic)");
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
  const size_t dims = b[3], elem = element_size(dtype);
  in.read(header, 4 * dims);
  b = reinterpret_cast<const unsigned char*>(header.data());
  check(header.size() == 4 + 4 * dims, op, "'", path, "' ends inside its header");
  Shape shape;
  size_t bytes = elem;  // what the shape needs, kept below 2^62 so it cannot wrap
  for (size_t d = 0; d < dims; ++d) {
    shape.push_back(big_endian32(b + 4 + 4 * d));
    const size_t n = static_cast<size_t>(shape.back());
    check(n == 0 || bytes <= (size_t{1} << 62) / n, op, "'", path, "' claims more elements than it holds");
    bytes *= n;
  }
  detail::checked_shape_nbytes(shape, dtype, op, "'" + path + "'");
  std::string data;
  in.read(data, bytes + 1);  // one more: trailing bytes are an error too
  check(data.size() == bytes, op, "'", path, "' holds ", data.size() > bytes ? "more than " : "",
        data.size() > bytes ? bytes : data.size(), " bytes of data but its shape ", shape_text(shape), " needs ", bytes);
  Tensor t = empty(shape, dtype);
  auto* out = static_cast<unsigned char*>(t.raw_data());
  const auto* src = reinterpret_cast<const unsigned char*>(data.data());
  for (size_t i = 0; i < bytes; i += elem)  // big-endian to this machine's order
    for (size_t k = 0; k < elem; ++k) out[i + k] = src[i + (elem - 1 - k)];
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
