// safetensors: 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {..}}),
// then the data. Offsets are relative to the end of the header and must tile
// the data exactly (no overlap, no holes), as the format requires.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/io.h"

namespace kiln::io {
namespace {

const char* kOp = "safetensors";

const char* st_name(DType t) {
  switch (t) {
    case kFloat64: return "F64";
    case kFloat32: return "F32";
    case kFloat16: return "F16";
    case kBFloat16: return "BF16";
    case kInt64: return "I64";
    case kInt32: return "I32";
    case kInt16: return "I16";
    case kInt8: return "I8";
    case kUInt8: return "U8";
    case kBool: return "BOOL";
  }
  return "?";
}

DType st_dtype(const std::string& s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (s == st_name(DType(i))) return DType(i);
  fail(kOp, "unknown dtype '", s, "'");
}

// A read-only mapping shared by the tensors that view it.
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr && size) munmap(addr, size);
  }
};

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) fail(kOp, "writing '", path, "' failed: ", std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Parses the header and builds tensors over `data` (which `keep` keeps alive).
SafetensorsFile parse(const char* bytes, size_t size, std::shared_ptr<void> keep) {
  check(size >= 8, kOp, "file of ", size, " bytes is too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  check(n <= size - 8, kOp, "header length ", n, " exceeds the file size ", size);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    fail(kOp, "header is not valid JSON: ", e.what());
  }
  check(header.is_object(), kOp, "header must be a JSON object");
  const char* data = bytes + 8 + n;
  const size_t data_size = size - 8 - n;
  SafetensorsFile out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      check(v.is_object(), kOp, "__metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        check(m.value().is_string(), kOp, "__metadata__ value of '", m.key(), "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    check(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), kOp,
          "entry '", name, "' needs dtype, shape and data_offsets");
    check(v["dtype"].is_string(), kOp, "dtype of '", name, "' is not a string");
    const DType dt = st_dtype(v["dtype"].get<std::string>());
    check(v["shape"].is_array(), kOp, "shape of '", name, "' is not an array");
    Shape shape;
    for (const auto& d : v["shape"]) {
      check(d.is_number_unsigned(), kOp, "shape of '", name, "' has a non-integer or negative entry");
      shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    check(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), kOp,
          "data_offsets of '", name, "' must be two non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    check(b <= e && e <= data_size, kOp, "data_offsets [", b, ", ", e, "] of '", name, "' are outside the ",
          data_size, " data bytes");
    const uint64_t need = static_cast<uint64_t>(shape_numel(shape)) * element_size(dt);
    check(e - b == need, kOp, "'", name, "' has ", e - b, " bytes but dtype ", st_name(dt), " and its shape need ", need);
    ranges.emplace_back(b, e);
    const char* p = data + b;
    Tensor t;
    if (reinterpret_cast<uintptr_t>(p) % element_size(dt) == 0 && keep) {
      t = from_blob(const_cast<char*>(p), shape, dt, [keep](void*) {});  // a view of the mapping
    } else {
      t = empty(shape, dt);
      if (need) std::memcpy(t.raw_data(), p, need);
    }
    out.tensors.emplace(name, t);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (auto [b, e] : ranges) {
    check(b >= at, kOp, "data ranges overlap at byte ", b);
    check(b == at, kOp, "data has a hole between bytes ", at, " and ", b);
    at = e;
  }
  check(at == data_size, kOp, "data has ", data_size - at, " trailing bytes not covered by any tensor");
  return out;
}

}  // namespace

void save_safetensors(const std::string& path, const nn::StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  NoGradGuard no_grad;
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> order;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    check(t.defined(), kOp, "tensor '", name, "' is undefined");
    Tensor c = t.contiguous();
    const uint64_t n = static_cast<uint64_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", st_name(c.dtype())}, {"shape", c.sizes()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    order.push_back(c);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(h.size()) >> (8 * i));

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  check(fd >= 0, kOp, "cannot create '", tmp, "': ", std::strerror(errno));
  try {
    write_all(fd, len, 8, tmp);
    write_all(fd, h.data(), h.size(), tmp);
    for (const Tensor& t : order) write_all(fd, t.raw_data(), static_cast<size_t>(t.numel()) * t.element_size(), tmp);
    check(::fsync(fd) == 0, kOp, "fsync of '", tmp, "' failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail(kOp, "cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno));
  }
  // Make the rename itself durable.
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  const int dfd = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

SafetensorsFile load_safetensors(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  check(fd >= 0, kOp, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  auto map = std::make_shared<Mapping>();
  map->size = static_cast<size_t>(st.st_size);
  if (map->size > 0) {
    // Copy-on-write: a loaded tensor may be modified without touching the file.
    map->addr = ::mmap(nullptr, map->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (map->addr == MAP_FAILED) {
      map->addr = nullptr;
      ::close(fd);
      fail(kOp, "cannot map '", path, "': ", std::strerror(errno));
    }
  }
  ::close(fd);
  return parse(static_cast<const char*>(map->addr), map->size, map);
}

SafetensorsFile parse_safetensors(const std::string& bytes) { return parse(bytes.data(), bytes.size(), nullptr); }

}  // namespace kiln::io
