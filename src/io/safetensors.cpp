// safetensors: 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {..}}),
// then the data. Offsets are relative to the end of the header and must tile
// the data exactly (no overlap, no holes), as the format requires.
#include <cstdlib>

#include <algorithm>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "io/files.h"
#include "io/safetensors_header.h"

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

// A file's bytes, read whole (Note [Files that change while read]); the
// loaded tensors keep them alive and may be modified without touching the file.
struct FileBytes {
  void* data = nullptr;
  ~FileBytes() { std::free(data); }
};

// BOOL data must be bytes 0 and 1: any other byte is not a bool, and
// reading it as one is undefined behaviour.
void check_bools(const std::string& name, const char* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    check(static_cast<unsigned char>(p[i]) <= 1, kOp, "BOOL tensor '", name, "' has byte ",
          static_cast<int>(static_cast<unsigned char>(p[i])), " at element ", i, " (expected 0 or 1)");
}

// Parses the header and builds tensors over `data` (which `keep` keeps alive).
SafetensorsFile parse(const char* bytes, size_t size, std::shared_ptr<void> keep) {
  check(size >= 8, kOp, "file of ", size, " bytes is too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  check(n <= detail::kMaxHeaderBytes, kOp, "header length ", n, " exceeds the limit of ", detail::kMaxHeaderBytes, " bytes");
  check(n <= size - 8, kOp, "header length ", n, " exceeds the file size ", size);
  detail::Header header = detail::read_header(bytes + 8, n, kOp);
  const char* data = bytes + 8 + n;
  const size_t data_size = size - 8 - n;
  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (detail::HeaderEntry& entry : header.entries) {
    const std::string& name = entry.name;
    const DType dt = st_dtype(entry.dtype);
    const uint64_t b = entry.begin, e = entry.end;
    check(b <= e && e <= data_size, kOp, "data_offsets [", b, ", ", e, "] of '", name, "' are outside the ",
          data_size, " data bytes");
    const uint64_t need = detail::checked_shape_nbytes(entry.shape, dt, kOp, "'" + name + "'");
    check(e - b == need, kOp, "'", name, "' has ", e - b, " bytes but dtype ", st_name(dt), " and its shape ",
          shape_text(entry.shape), " need ", need);
    ranges.emplace_back(b, e);
    const char* p = data + b;
    if (dt == kBool) check_bools(name, p, need);
    Tensor t;
    if (reinterpret_cast<uintptr_t>(p) % element_size(dt) == 0 && keep) {
      t = from_blob(const_cast<char*>(p), std::move(entry.shape), dt, [keep](void*) {});  // a view of the mapping
    } else {
      t = empty(std::move(entry.shape), dt);
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

  detail::write_atomically(path, kOp, [&](int fd) {
    detail::write_all(fd, len, 8, path, kOp);
    detail::write_all(fd, h.data(), h.size(), path, kOp);
    for (const Tensor& t : order) detail::write_all(fd, t.raw_data(), static_cast<size_t>(t.numel()) * t.element_size(), path, kOp);
  });
}

SafetensorsFile load_safetensors(const std::string& path) {
  const detail::RegularFile file(path, kOp);
  auto bytes = std::make_shared<FileBytes>();
  const size_t size = file.size();
  if (size > 0) {
    // 64-byte aligned, as the allocator's tensors are (the data starts at an
    // 8-byte multiple of the file).
    bytes->data = std::aligned_alloc(64, (size + 63) / 64 * 64);
    check(bytes->data != nullptr, kOp, "cannot allocate ", size, " bytes to read '", path, "'");
    file.read_all(bytes->data, path, kOp);
  }
  return parse(static_cast<const char*>(bytes->data), size, bytes);
}

SafetensorsFile parse_safetensors(const std::string& bytes) { return parse(bytes.data(), bytes.size(), nullptr); }

}  // namespace kiln::io
