// call_op: public functions by name. Binding follows Python's rules for a
// PyTorch schema: positional arguments fill the arguments before `*` in
// order, keywords fill any by name, the rest take their defaults.
#include "kiln/call_op.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "kiln/error.h"

namespace kiln {
namespace {

struct PublicRegistry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<PublicOp>, std::less<>> ops;
  // By name without the overload: the overloads in name order.
  std::map<std::string, std::vector<const PublicOp*>, std::less<>> by_base;
};

PublicRegistry& public_registry() {
  static PublicRegistry r;
  return r;
}

std::string_view base_name(std::string_view name) { return name.substr(0, name.find('.')); }

// A default as the schema writes it ("None", "True", "-1", "1e-05", "[]",
// "[0, 1]", "'none'"), as the value of an argument of type t.
IValue parse_default(const SchemaArg& a, const std::string& op) {
  const std::string& text = *a.default_value;
  if (text == "None") return std::monostate{};
  if (text == "True" || text == "False") return text == "True";
  if (text.size() >= 2 && (text.front() == '\'' || text.front() == '"')) return text.substr(1, text.size() - 2);
  auto integer = [&](std::string_view s) -> std::optional<int64_t> {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
  };
  if (text.front() == '[') {
    Shape list;
    std::string_view rest = std::string_view(text).substr(1, text.size() - 2);
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      const auto v = integer(item);
      check(v.has_value(), "call_op", "op '", op, "': cannot read the default '", text, "' of argument '", a.name, "'");
      list.push_back(*v);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    return list;
  }
  if (a.type != ArgType::Float)
    if (const auto v = integer(text)) return *v;
  return std::stod(text);
}

// Whether v fits argument a, converted in place where Python would (an int
// for a float, an int for every element of an int list).
bool fit(const SchemaArg& a, IValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return a.optional;
  const auto* i = std::get_if<int64_t>(&v);
  switch (a.type) {
    case ArgType::Tensor: return std::holds_alternative<Tensor>(v);
    case ArgType::TensorList:
      if (const auto* l = std::get_if<std::vector<Tensor>>(&v))
        return a.fixed_size < 0 || static_cast<int64_t>(l->size()) == a.fixed_size;
      return false;
    case ArgType::Int: return i != nullptr;
    case ArgType::IntList:  // one int stands for every element of an int[n] (PyTorch's rule)
      if (i) v = Shape(static_cast<size_t>(std::max<int64_t>(a.fixed_size, 1)), *i);
      return std::holds_alternative<Shape>(v);
    case ArgType::Float:
      if (i) v = static_cast<double>(*i);
      return std::holds_alternative<double>(v);
    case ArgType::Bool: return std::holds_alternative<bool>(v);
    case ArgType::Scalar: return i || std::holds_alternative<double>(v) || std::holds_alternative<bool>(v);
    case ArgType::ScalarType: return std::holds_alternative<DType>(v);
    case ArgType::String: return std::holds_alternative<std::string>(v);
    case ArgType::Device: return std::holds_alternative<Device>(v);
    case ArgType::Opaque: return false;  // built by C++ front ends only
  }
  return false;
}

std::string type_text(const SchemaArg& a) {
  std::string t = arg_type_name(a.type);
  return a.optional ? t + "?" : t;
}

// The arguments in schema order, or the reason they do not bind. `consume`:
// args are moved from (the last candidate), else copied.
std::optional<std::vector<IValue>> bind(const PublicOp& op, std::vector<IValue>& args, const KwArgs& kwargs,
                                        bool consume, std::string& why) {
  const std::vector<SchemaArg>& params = op.schema.arguments;
  std::vector<std::optional<IValue>> bound(params.size());
  size_t next = 0;
  for (IValue& v : args) {
    while (next < params.size() && params[next].kwarg_only) ++next;
    if (next == params.size()) {
      why = "takes at most " + std::to_string(next) + " positional arguments but " + std::to_string(args.size()) +
            " were given";
      return std::nullopt;
    }
    if (consume) bound[next++] = std::move(v);
    else bound[next++] = v;
  }
  for (const auto& [name, v] : kwargs) {
    size_t k = 0;
    while (k < params.size() && params[k].name != name) ++k;
    if (k == params.size()) {
      why = "got an unexpected keyword argument '" + name + "'";
      return std::nullopt;
    }
    if (bound[k]) {
      why = "got multiple values for argument '" + name + "'";
      return std::nullopt;
    }
    bound[k] = v;
  }
  std::vector<IValue> out;
  out.reserve(params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    const SchemaArg& a = params[k];
    if (!bound[k]) {
      if (op.defaults[k]) bound[k] = *op.defaults[k];
      else if (a.optional) bound[k] = std::monostate{};
      else {
        why = "missing the argument '" + a.name + "' (" + type_text(a) + ")";
        return std::nullopt;
      }
    }
    if (!fit(a, *bound[k])) {
      why = "argument '" + a.name + "' must be " + type_text(a) + ", not " + ivalue_type_name(*bound[k]);
      return std::nullopt;
    }
    out.push_back(std::move(*bound[k]));
  }
  return out;
}

}  // namespace

const char* ivalue_type_name(const IValue& v) {
  static constexpr const char* kNames[] = {"None", "Tensor", "Tensor[]", "int",   "float",
                                           "bool", "int[]",  "str",      "ScalarType", "Device"};
  return kNames[v.index()];
}

void register_public_op(std::string_view schema, BoxedFunction fn) {
  auto op = std::make_unique<PublicOp>();
  op->schema = parse_schema(schema);
  op->name = op->schema.name;
  op->fn = std::move(fn);
  check(static_cast<bool>(op->fn), "register_public_op", "null function for '", op->name, "'");
  for (const SchemaArg& a : op->schema.arguments)
    op->defaults.push_back(a.default_value ? std::optional<IValue>(parse_default(a, op->name)) : std::nullopt);
  PublicRegistry& r = public_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::string name = op->name;
  const PublicOp* raw = op.get();
  check(r.ops.emplace(name, std::move(op)).second, "register_public_op", "'", name, "' is registered twice");
  std::vector<const PublicOp*>& overloads = r.by_base[std::string(base_name(name))];
  overloads.insert(std::upper_bound(overloads.begin(), overloads.end(), raw,
                                    [](const PublicOp* a, const PublicOp* b) { return a->name < b->name; }),
                   raw);
}

std::vector<const PublicOp*> public_ops() {
  PublicRegistry& r = public_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const PublicOp*> out;
  for (const auto& [name, op] : r.ops) out.push_back(op.get());
  return out;
}

const PublicOp* find_public_op(std::string_view name) {
  PublicRegistry& r = public_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(name);
  return it == r.ops.end() ? nullptr : it->second.get();
}

namespace {

std::atomic<void (*)()> missing_op_handler{nullptr};
std::once_flag missing_op_handled;

// The op itself when the overload is named, else each overload in turn
// (the one without an overload name first: "max" before "max.dim").
std::vector<const PublicOp*> candidates_for(std::string_view name) {
  if (name.find('.') != std::string_view::npos) {
    if (const PublicOp* exact = find_public_op(name)) return {exact};
    return {};
  }
  PublicRegistry& r = public_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.by_base.find(name);
  return it == r.by_base.end() ? std::vector<const PublicOp*>() : it->second;
}

// candidates_for, after the missing-op handler ran if none was found.
std::vector<const PublicOp*> resolve(std::string_view name) {
  std::vector<const PublicOp*> candidates = candidates_for(name);
  if (candidates.empty())
    if (void (*handler)() = missing_op_handler.load()) {
      std::call_once(missing_op_handled, handler);
      candidates = candidates_for(name);
    }
  return candidates;
}

}  // namespace

void set_missing_op_handler(void (*handler)()) { missing_op_handler.store(handler); }

bool has_public_op(std::string_view name) { return !resolve(name).empty(); }

std::vector<IValue> call_op(std::string_view name, std::vector<IValue> args, const KwArgs& kwargs) {
  const std::vector<const PublicOp*> candidates = resolve(name);
  if (candidates.empty()) throw UnknownOpError(detail::concat("[call_op] no public op is named '", name, "'"));
  std::string reasons;
  for (const PublicOp* op : candidates) {
    std::string why;
    const bool last = op == candidates.back();
    if (std::optional<std::vector<IValue>> bound = bind(*op, args, kwargs, last, why)) return op->fn(*bound);
    reasons += "\n  " + op->name + ": " + why;
  }
  fail("call_op", "the arguments fit no overload of '", name, "':", reasons);
}

}  // namespace kiln
