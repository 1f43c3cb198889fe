// The safetensors header, read as a stream of JSON events into the entries
// it describes, without building a JSON document (see Note [Streaming the
// header] in safetensors_header.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/detail/tensor_impl.h"

namespace kiln::io::detail {

// The reference implementation's cap on the header's size.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct HeaderEntry {
  std::string name;
  std::string dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // data_offsets
};

struct Header {
  std::vector<HeaderEntry> entries;  // in file order, names unique
  std::map<std::string, std::string> metadata;
};

// Parses `n` bytes of header JSON. Refuses (kiln::Error under `op`) anything
// but an object whose members are `__metadata__` (an object of strings, at
// most once) and tensor entries {dtype: string, shape: [uint...],
// data_offsets: [uint, uint]}; duplicate names or fields, unknown fields, a
// shape entry >= 2^63 and a header not starting with '{' (a byte-order mark,
// say) included.
Header read_header(const char* json, size_t n, const char* op);

}  // namespace kiln::io::detail
