// Calling any public op by name with boxed arguments, as PyTorch's
// dispatcher does for TorchScript and its stable C ABI:
//
//   std::vector<IValue> r = call_op("add", {a, b}, {{"alpha", 2}});
//
// runs kiln::add(a, b, 2): the same front end (promotion, broadcasting,
// checks, autograd, tracing) as the C++ call. Each public function is
// registered once with its PyTorch-style schema under its public name
// ("matmul", not the kernel-level op it dispatches to); overloads are named
// as in PyTorch ("pow.Tensor_Scalar"), and a name without its overload picks
// the first overload whose schema accepts the arguments.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/error.h"
#include "kiln/schema.h"
#include "kiln/tensor.h"

namespace kiln {

// A boxed argument or result, as PyTorch's IValue: None (monostate), a
// tensor, a list of tensors, an int, a float, a bool, an int list, a string,
// a dtype or a device. A `Scalar` argument takes an int, a float or a bool.
using IValue = std::variant<std::monostate, Tensor, std::vector<Tensor>, int64_t, double, bool, Shape, std::string,
                            DType, Device>;
// "Tensor", "int", ...: for error messages.
const char* ivalue_type_name(const IValue& v);

using KwArgs = std::vector<std::pair<std::string, IValue>>;

// call_op's error for a name no public op has (the C ABI returns its own
// code for it).
class UnknownOpError : public Error {
 public:
  using Error::Error;
};

// Binds `args` (positional) and `kwargs` to the schema of op `name` (a
// missing argument takes its default), calls the function and returns its
// results in order. A kiln::Error names the op and what did not fit: an
// unknown op or keyword, a missing argument, a value of the wrong type.
std::vector<IValue> call_op(std::string_view name, std::vector<IValue> args, const KwArgs& kwargs = {});

// A public function as call_op sees it: its schema, and the boxed form of
// the C++ function, which receives every argument in schema order.
using BoxedFunction = std::function<std::vector<IValue>(std::vector<IValue>& args)>;
struct PublicOp {
  std::string name;  // with the overload: "pow.Tensor_Scalar"
  Schema schema;
  BoxedFunction fn = nullptr;
  // Per argument, its default parsed once at registration (unset: none).
  std::vector<std::optional<IValue>> defaults;
};

// Registers a public function at static initialisation; `schema`'s name
// (with its overload) must be new.
void register_public_op(std::string_view schema, BoxedFunction fn);
std::vector<const PublicOp*> public_ops();
// Whether `name` (with or without its overload) names a public op.
bool has_public_op(std::string_view name);
// Called once, the first time call_op meets a name no op has, before it
// fails: a layer above (extensions) loads what may define it.
void set_missing_op_handler(void (*handler)());
const PublicOp* find_public_op(std::string_view name_with_overload);

}  // namespace kiln

KILN_API_END
