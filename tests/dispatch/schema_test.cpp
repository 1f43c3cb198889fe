// Schemas: the parser, and every op's schema against the calls the op
// really receives (tensor inputs in order, the other arguments by name).
#include <map>
#include <set>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Schema, ParsesPyTorchNotation) {
  const Schema a = parse_schema("add(Tensor self, Tensor other, *, float alpha=1) -> Tensor");
  EXPECT_EQ(a.name, "add");
  ASSERT_EQ(a.arguments.size(), 3u);
  EXPECT_EQ(a.arguments[1].name, "other");
  EXPECT_TRUE(a.arguments[1].is_tensor());
  EXPECT_FALSE(a.arguments[1].kwarg_only);
  EXPECT_EQ(a.arguments[2].type, ArgType::Float);
  EXPECT_TRUE(a.arguments[2].kwarg_only);
  EXPECT_EQ(a.arguments[2].default_value, "1");
  ASSERT_EQ(a.returns.size(), 1u);

  const Schema v = parse_schema("view(Tensor(a) self, int[] size) -> Tensor(a)");
  EXPECT_EQ(v.arguments[0].alias, "a");
  EXPECT_EQ(v.arguments[1].type, ArgType::IntList);
  EXPECT_EQ(v.returns[0].alias, "a");

  const Schema w = parse_schema("add_(Tensor(a!) self, Tensor other) -> Tensor(a!)");
  EXPECT_EQ(w.arguments[0].alias, "a!");

  const Schema f = parse_schema("f(Tensor[9] m, Tensor? w, int? dim, ...) -> (Tensor values, Tensor)");
  EXPECT_EQ(f.arguments[0].type, ArgType::TensorList);
  EXPECT_EQ(f.arguments[0].fixed_size, 9);
  EXPECT_TRUE(f.arguments[1].optional);
  EXPECT_TRUE(f.arguments[2].optional);
  EXPECT_TRUE(f.varargs);
  ASSERT_EQ(f.returns.size(), 2u);
  EXPECT_EQ(f.returns[0].name, "values");
  EXPECT_EQ(f.returns[1].name, "");
  EXPECT_EQ(f.find("dim"), &f.arguments[2]);
  EXPECT_EQ(f.find("nope"), nullptr);
}

bool same_arg(const SchemaArg& a, const SchemaArg& b) {
  return a.name == b.name && a.type == b.type && a.optional == b.optional && a.fixed_size == b.fixed_size &&
         a.alias == b.alias && a.kwarg_only == b.kwarg_only && a.default_value == b.default_value;
}

void expect_round_trip(const Schema& s) {
  const std::string text = schema_text(s);
  const Schema back = parse_schema(text);
  EXPECT_EQ(back.name, s.name) << text;
  EXPECT_EQ(back.varargs, s.varargs) << text;
  ASSERT_EQ(back.arguments.size(), s.arguments.size()) << text;
  ASSERT_EQ(back.returns.size(), s.returns.size()) << text;
  for (size_t i = 0; i < s.arguments.size(); ++i) EXPECT_TRUE(same_arg(back.arguments[i], s.arguments[i])) << text;
  for (size_t i = 0; i < s.returns.size(); ++i) EXPECT_TRUE(same_arg(back.returns[i], s.returns[i])) << text;
}

// schema_text is parse_schema's inverse, on every schema the registries hold
// and on forms they may lack.
TEST(Schema, TextParsesBackToTheSameSchema) {
  for (const PublicOp* op : public_ops()) expect_round_trip(op->schema);
  for (const OpDef* op : all_ops()) expect_round_trip(op->parsed);
  for (const char* text :
       {"f(Tensor(a!) self, *, Tensor[2]? out=None, int[] size=[1, 2], str s='x y') -> Tensor(a!)",
        "g(Tensor self, ...) -> ()", "h() -> (Tensor values, Tensor)", "m::op.overload(Scalar x) -> int"})
    expect_round_trip(parse_schema(text));
  EXPECT_EQ(schema_text(parse_schema("add(Tensor self,Tensor other , *,Scalar alpha=1)->Tensor")),
            "add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  EXPECT_EQ(schema_text(parse_schema("sort(Tensor self) -> (Tensor values, Tensor indices)")),
            "sort(Tensor self) -> (Tensor values, Tensor indices)");
}

TEST(Schema, MalformedSchemasNameThePlace) {
  expect_error([] { parse_schema("add(Tensor self, Tensor other"); }, {"[schema]", "add(Tensor self, Tensor other", "expected ')'"});
  expect_error([] { parse_schema("add(Tensr self) -> Tensor"); }, {"[schema]", "unknown type 'Tensr'"});
  expect_error([] { parse_schema("add(Tensor self, Tensor self) -> Tensor"); }, {"argument 'self' appears twice"});
  expect_error([] { parse_schema("add(Tensor self) Tensor"); }, {"expected '-'"});
  expect_error([] { parse_schema("add(Tensor self) -> Tensor junk"); }, {"unexpected text after the returns"});
  expect_error([] { parse_schema("(Tensor self) -> Tensor"); }, {"expected the op's name"});
  expect_error([] { register_op(OpDef{"schema_test_op", "other_op(Tensor self) -> Tensor", OpKind::Compute,
                                      [](std::span<const Tensor> in, const Attrs&) {
                                        return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype()}};
                                      }}); },
               {"[register_op]", "schema_test_op", "has the schema of 'other_op'"});
}

// Records what each op receives: tensor inputs and attribute names.
class CallRecorder : public DispatchMode {
 public:
  std::vector<Tensor> on_op(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs,
                            std::span<const Tensor> out) override {
    std::set<std::string> names;
    for (const auto& [name, value] : attrs.items()) {
      names.insert(name);
      const SchemaArg* a = op.parsed.find(name);
      if (a && !a->is_tensor() && !fits(a->type, value))
        mistyped.insert(op.name + ": attribute '" + name + "' does not hold a " + arg_type_name(a->type));
    }
    calls[&op].insert({in.size(), names});
    return dispatch(op, in, attrs, out);
  }
  std::map<const OpDef*, std::set<std::pair<size_t, std::set<std::string>>>> calls;
  std::set<std::string> mistyped;

 private:
  static bool fits(ArgType t, const AttrValue& v) {
    switch (t) {
      case ArgType::Int: return std::holds_alternative<int64_t>(v);
      case ArgType::IntList: return std::holds_alternative<Shape>(v);
      case ArgType::Float: return std::holds_alternative<double>(v);
      case ArgType::Bool: return std::holds_alternative<bool>(v);
      case ArgType::Scalar: return std::holds_alternative<int64_t>(v) || std::holds_alternative<double>(v);
      case ArgType::ScalarType: return std::holds_alternative<DType>(v);
      case ArgType::String: return std::holds_alternative<std::string>(v);
      case ArgType::Device: return std::holds_alternative<Device>(v);
      case ArgType::Opaque: return std::holds_alternative<OpaqueAttr>(v);
      default: return false;
    }
  }
};

// A workload that reaches most ops: a GPT training step and the rest of the
// op set called directly.
void run_workload() {
  manual_seed(7);
  nn::GPTConfig cfg;
  cfg.vocab_size = 16, cfg.block_size = 8, cfg.n_layer = 1, cfg.n_head = 2, cfg.n_embd = 8;
  nn::GPT model(cfg);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions{});
  const Tensor idx = randint(0, cfg.vocab_size, {2, cfg.block_size});
  Tensor loss = nn::cross_entropy(model.forward(idx).view({-1, cfg.vocab_size}), idx.view({-1}));
  loss.backward();
  optim::clip_grad_norm_(model.parameters(), 1.0);
  opt.step();

  const Tensor x = randn({3, 4}).requires_grad_(), y = randn({3, 4});
  std::vector<Tensor> r = {abs(x),  sign(x),  exp(x),  expm1(x), log1p(x.abs()), sqrt(x.abs()), rsqrt(x.abs() + 1),
                           reciprocal(x + 5), sin(x), cos(x), tanh(x), sigmoid(x), relu(x), gelu(x), gelu(x, "tanh"),
                           silu(x), erf(x), floor(x), ceil(x), round(x), square(x), clamp(x, -0.5, 0.5), neg(x),
                           x - y, x / (y.abs() + 1), pow(x.abs(), y), maximum(x, y), minimum(x, y), fmod(x, y + 3),
                           where(x > y, x, y), prod(x, {1}), amin(x, {0}), log_softmax(x, 1),
                           rms_norm(x, {4}), cumsum(x, 1), x.transpose(0, 1).contiguous(), x.unsqueeze(0).squeeze(0),
                           x.unfold(1, 2, 1).sum(), y.as_strided({2}, {1}) * 1, triu(x), tril(x), x.select(0, 1) * 2};
  for (Tensor& t : r)
    if (t.requires_grad()) t.sum().backward();
  (void)all(x > 0), (void)any(x > 0), (void)logical_not(x > 0), (void)logical_and(x > 0, y > 0);
  (void)logical_or(x > 0, y > 0), (void)logical_xor(x > 0, y > 0), (void)(x == y), (void)(x != y), (void)(x <= y);
  (void)(x >= y), (void)(x < y), (void)argmax(x, 1), (void)max(x, 1), (void)sort(y, 1), (void)topk(y, 2);
  const Tensor i = tensor(std::vector<int64_t>{0, 2, 1});
  (void)gather(y, 1, i.view({3, 1})), (void)scatter_add(y, 1, i.view({3, 1}), y.narrow(1, 0, 1));
  (void)scatter(y, 1, i.view({3, 1}), y.narrow(1, 0, 1)), (void)index_select(y, 0, i), (void)one_hot(i, 3);
  (void)embedding(y, i), (void)cat({x, y}, 0), (void)multinomial(softmax(y, 1), 2), (void)eye(3);
  (void)linspace(0, 1, 5), (void)arange(0, 5, 2), (void)full({2}, 3.0), (void)y.to(kFloat64);
}

TEST(Schema, EveryCallMatchesItsOpsSchema) {
  CallRecorder rec;
  {
    ModeGuard guard(&rec);
    run_workload();
  }
  for (const auto& [op, shapes] : rec.calls) {
    const Schema& s = op->parsed;
    // Tensor inputs: one per Tensor (optional ones may be absent), N per Tensor[N];
    // a Tensor[] of any length leaves the count open.
    size_t fixed = 0, optional = 0;
    bool open_list = false;
    for (const SchemaArg& a : s.arguments) {
      if (a.type == ArgType::TensorList && a.fixed_size >= 0) fixed += static_cast<size_t>(a.fixed_size);
      if (a.type == ArgType::TensorList && a.fixed_size < 0) open_list = true;
      if (a.type == ArgType::Tensor) (a.optional ? optional : fixed) += 1;
    }
    for (const auto& [inputs, attrs] : shapes) {
      if (!open_list) {
        EXPECT_GE(inputs, fixed) << s.name << ": " << inputs << " tensor inputs for " << op->schema;
        EXPECT_LE(inputs, fixed + optional) << s.name << ": " << inputs << " tensor inputs for " << op->schema;
      }
      for (const std::string& name : attrs) {
        const SchemaArg* a = s.find(name);
        EXPECT_TRUE(s.varargs || (a && !a->is_tensor()))
            << s.name << ": attribute '" << name << "' is not an argument of " << op->schema;
      }
      if (s.varargs) continue;
      for (const SchemaArg& a : s.arguments) {
        if (a.is_tensor() || a.default_value || a.optional) continue;
        EXPECT_TRUE(attrs.count(a.name)) << s.name << ": argument '" << a.name << "' did not arrive: " << op->schema;
      }
    }
  }
  EXPECT_EQ(rec.mistyped, std::set<std::string>{});
  EXPECT_GE(rec.calls.size(), 75u) << "the workload reaches most ops";
}

}  // namespace
}  // namespace kiln::test
