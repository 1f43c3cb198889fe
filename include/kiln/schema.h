// An op's schema, PyTorch's notation parsed once at registration:
//   add(Tensor self, Tensor other, *, float alpha=1) -> Tensor
//   view(Tensor(a) self, int[] size) -> Tensor(a)
// Tensor arguments are the op's inputs, in order; the others travel as its
// attributes, by name. A boxed call by name (and the stable ABI) reads it.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Opaque ("Any" in a schema): an object only C++ front ends pass (OpaqueAttr).
enum class ArgType : uint8_t { Tensor, TensorList, Int, IntList, Float, Bool, Scalar, ScalarType, String, Device, Opaque };
const char* arg_type_name(ArgType t);

struct SchemaArg {
  std::string name;  // empty for an unnamed return
  ArgType type = ArgType::Tensor;
  bool optional = false;      // `T?`: may be absent
  int64_t fixed_size = -1;    // `Tensor[9]`: exactly that many
  std::string alias;          // `Tensor(a)` aliases input a; `Tensor(a!)` also writes it
  bool kwarg_only = false;    // after `*`
  std::optional<std::string> default_value;
  bool is_tensor() const { return type == ArgType::Tensor || type == ArgType::TensorList; }
};

struct Schema {
  std::string name;
  std::vector<SchemaArg> arguments;
  bool varargs = false;  // `...`: further attributes, described by the op's own comment
  std::vector<SchemaArg> returns;
  const SchemaArg* find(std::string_view arg_name) const;
};

// Parses `text`; a malformed schema is a kiln::Error naming it and the
// position ("[schema] in 'add(Tensor self,' at 16: expected a type").
Schema parse_schema(std::string_view text);
// The schema in the same notation, arguments in order, `*` before the first
// keyword-only one, `...` last: parse_schema(schema_text(s)) gives s back.
std::string schema_text(const Schema& schema);

}  // namespace kiln

KILN_API_END
