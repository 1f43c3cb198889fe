// The schema parser (kiln/schema.h): a small recursive descent over
//   name(arg, arg, *, arg=default, ...) -> ret | (ret name, ret)
// where a type is a word, an optional alias `(a)` / `(a!)`, an optional
// list `[]` / `[N]` and an optional `?`.
#include "kiln/schema.h"

#include <cctype>

#include "kiln/error.h"

namespace kiln {

const char* arg_type_name(ArgType t) {
  switch (t) {
    case ArgType::Tensor: return "Tensor";
    case ArgType::TensorList: return "Tensor[]";
    case ArgType::Int: return "int";
    case ArgType::IntList: return "int[]";
    case ArgType::Float: return "float";
    case ArgType::Bool: return "bool";
    case ArgType::Scalar: return "Scalar";
    case ArgType::ScalarType: return "ScalarType";
    case ArgType::String: return "str";
    case ArgType::Device: return "Device";
    case ArgType::Opaque: return "Any";
  }
  return "?";
}

const SchemaArg* Schema::find(std::string_view arg_name) const {
  for (const SchemaArg& a : arguments)
    if (a.name == arg_name) return &a;
  return nullptr;
}

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Schema parse() {
    Schema out;
    out.name = word("the op's name");
    while (s_.substr(pos_).starts_with("::")) {  // an extension's namespace: myext::rope
      pos_ += 2;
      out.name += "::" + word("a name after '::'");
    }
    if (accept('.')) out.name += "." + word("an overload name");  // pow.Tensor_Scalar
    expect('(');
    bool kwarg_only = false;
    if (!accept(')')) {
      do {
        skip_space();
        if (accept('*')) {
          kwarg_only = true;
          continue;
        }
        if (s_.substr(pos_).starts_with("...")) {
          pos_ += 3;
          out.varargs = true;
          continue;
        }
        SchemaArg a = type();
        a.name = word("an argument name");
        a.kwarg_only = kwarg_only;
        if (accept('=')) a.default_value = default_value();
        for (const SchemaArg& b : out.arguments)
          if (b.name == a.name) fail_at("argument '" + a.name + "' appears twice");
        out.arguments.push_back(std::move(a));
      } while (accept(','));
      expect(')');
    }
    expect('-');
    expect('>');
    if (accept('(')) {
      if (accept(')')) return finish(out);  // "-> ()": no results (send, barrier)
      do {
        SchemaArg r = type();
        skip_space();
        if (pos_ < s_.size() && is_word_char(s_[pos_])) r.name = word("a return name");
        out.returns.push_back(std::move(r));
      } while (accept(','));
      expect(')');
    } else {
      out.returns.push_back(type());
    }
    return finish(out);
  }

 private:
  Schema& finish(Schema& out) {
    skip_space();
    if (pos_ != s_.size()) fail_at("unexpected text after the returns");
    return out;
  }
  static bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
  void skip_space() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) fail_at(std::string("expected '") + c + "'");
  }
  std::string word(const char* what) {
    skip_space();
    const size_t start = pos_;
    while (pos_ < s_.size() && is_word_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail_at(std::string("expected ") + what);
    return std::string(s_.substr(start, pos_ - start));
  }
  std::string default_value() {
    skip_space();
    const size_t start = pos_;
    int depth = 0;  // a list default ("[1, 1]") holds commas
    for (; pos_ < s_.size() && (depth > 0 || (s_[pos_] != ',' && s_[pos_] != ')')); ++pos_)
      depth += s_[pos_] == '[' ? 1 : s_[pos_] == ']' ? -1 : 0;
    if (pos_ == start) fail_at("expected a default value");
    std::string v(s_.substr(start, pos_ - start));
    while (!v.empty() && v.back() == ' ') v.pop_back();
    return v;
  }
  SchemaArg type() {
    SchemaArg a;
    const std::string base = word("a type");
    if (accept('(')) {  // alias annotation
      a.alias = word("an alias name");
      if (accept('!')) a.alias += '!';
      expect(')');
    }
    bool list = false;
    if (accept('[')) {
      list = true;
      skip_space();
      const size_t start = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      if (pos_ > start) a.fixed_size = std::stoll(std::string(s_.substr(start, pos_ - start)));
      expect(']');
    }
    a.optional = accept('?');
    if (base == "Tensor") a.type = list ? ArgType::TensorList : ArgType::Tensor;
    else if (base == "int") a.type = list ? ArgType::IntList : ArgType::Int;
    else if (list) fail_at("a list of " + base + " is not supported");
    else if (base == "float") a.type = ArgType::Float;
    else if (base == "bool") a.type = ArgType::Bool;
    else if (base == "Scalar") a.type = ArgType::Scalar;
    else if (base == "ScalarType") a.type = ArgType::ScalarType;
    else if (base == "str") a.type = ArgType::String;
    else if (base == "Device") a.type = ArgType::Device;
    else if (base == "Any") a.type = ArgType::Opaque;
    else fail_at("unknown type '" + base + "'");
    return a;
  }
  [[noreturn]] void fail_at(const std::string& what) const {
    fail("schema", "in '", s_, "' at ", pos_, ": ", what);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Schema parse_schema(std::string_view text) { return Parser(text).parse(); }

namespace {

std::string type_text(const SchemaArg& a) {
  const bool list = a.type == ArgType::TensorList || a.type == ArgType::IntList;
  std::string t = a.type == ArgType::TensorList ? "Tensor" : a.type == ArgType::IntList ? "int" : arg_type_name(a.type);
  if (!a.alias.empty()) t += "(" + a.alias + ")";
  if (list) t += a.fixed_size >= 0 ? "[" + std::to_string(a.fixed_size) + "]" : "[]";
  if (a.optional) t += "?";
  return t;
}

}  // namespace

std::string schema_text(const Schema& schema) {
  std::string out = schema.name + "(";
  const char* sep = "";
  bool keywords = false;
  for (const SchemaArg& a : schema.arguments) {
    out += sep, sep = ", ";
    if (a.kwarg_only && !keywords) out += "*, ", keywords = true;
    out += type_text(a) + " " + a.name;
    if (a.default_value) out += "=" + *a.default_value;
  }
  if (schema.varargs) out += std::string(sep) + "...";
  out += ") -> ";
  if (schema.returns.size() == 1 && schema.returns[0].name.empty()) return out + type_text(schema.returns[0]);
  out += "(";
  sep = "";
  for (const SchemaArg& r : schema.returns) {
    out += sep + type_text(r), sep = ", ";
    if (!r.name.empty()) out += " " + r.name;
  }
  return out + ")";
}

}  // namespace kiln
