// The CPU device's kernels, bound to the ops they implement (declared in
// src/ops/): the one place where an op name meets a CPU kernel. A kernel for
// a new op, or a new device's kernel folder, adds its own table like this.
#include <utility>

#include "kernels/cpu/kernels.h"

namespace kiln::cpu {
namespace {

const bool registered = [] {
  const std::pair<const char*, KernelFn> table[] = {
    {"neg", unary_kernel<UnaryOp::Neg>},
    {"abs", unary_kernel<UnaryOp::Abs>},
    {"sign", unary_kernel<UnaryOp::Sign>},
    {"exp", unary_kernel<UnaryOp::Exp>},
    {"expm1", unary_kernel<UnaryOp::Expm1>},
    {"log", unary_kernel<UnaryOp::Log>},
    {"log1p", unary_kernel<UnaryOp::Log1p>},
    {"sqrt", unary_kernel<UnaryOp::Sqrt>},
    {"rsqrt", unary_kernel<UnaryOp::Rsqrt>},
    {"reciprocal", unary_kernel<UnaryOp::Reciprocal>},
    {"sin", unary_kernel<UnaryOp::Sin>},
    {"cos", unary_kernel<UnaryOp::Cos>},
    {"tanh", unary_kernel<UnaryOp::Tanh>},
    {"sigmoid", unary_kernel<UnaryOp::Sigmoid>},
    {"relu", unary_kernel<UnaryOp::Relu>},
    {"gelu", unary_kernel<UnaryOp::GeluErf>},
    {"gelu_tanh", unary_kernel<UnaryOp::GeluTanh>},
    {"silu", unary_kernel<UnaryOp::Silu>},
    {"erf", unary_kernel<UnaryOp::Erf>},
    {"floor", unary_kernel<UnaryOp::Floor>},
    {"ceil", unary_kernel<UnaryOp::Ceil>},
    {"round", unary_kernel<UnaryOp::Round>},
    {"square", unary_kernel<UnaryOp::Square>},
    {"clamp", unary_kernel<UnaryOp::Clamp>},
    {"logical_not", logical_not_kernel},
    {"add", binary_kernel<BinaryOp::Add>},
    {"sub", binary_kernel<BinaryOp::Sub>},
    {"mul", binary_kernel<BinaryOp::Mul>},
    {"div", binary_kernel<BinaryOp::Div>},
    {"pow", binary_kernel<BinaryOp::Pow>},
    {"maximum", binary_kernel<BinaryOp::Maximum>},
    {"minimum", binary_kernel<BinaryOp::Minimum>},
    {"fmod", binary_kernel<BinaryOp::Fmod>},
    {"gelu_backward", binary_kernel<BinaryOp::GeluBackward>},
    {"gelu_tanh_backward", binary_kernel<BinaryOp::GeluTanhBackward>},
    {"eq", compare_kernel<CompareOp::Eq>},
    {"ne", compare_kernel<CompareOp::Ne>},
    {"lt", compare_kernel<CompareOp::Lt>},
    {"le", compare_kernel<CompareOp::Le>},
    {"gt", compare_kernel<CompareOp::Gt>},
    {"ge", compare_kernel<CompareOp::Ge>},
    {"logical_and", compare_kernel<CompareOp::And>},
    {"logical_or", compare_kernel<CompareOp::Or>},
    {"logical_xor", compare_kernel<CompareOp::Xor>},
    {"where", where_kernel},
    {"_to_copy", copy_kernel},
    {"full", fill_kernel},
    {"arange", arange_kernel},
    {"linspace", linspace_kernel},
    {"eye", eye_kernel},
    {"cat", cat_kernel},
    {"gather", gather_kernel},
    {"scatter", scatter_kernel},
    {"index_select", index_select_kernel},
    {"triangle", triangle_kernel},
    {"sort", sort_kernel},
    {"bmm_broadcast", matmul_kernel},
    {"bmm_bias", matmul_bias_kernel},
    {"softmax", softmax_kernel},
    {"layer_norm", layer_norm_kernel},
    {"embedding", embedding_kernel},
    {"one_hot", one_hot_kernel},
    {"rand", rand_kernel},
    {"randint", randint_kernel},
    {"multinomial", multinomial_kernel},
    {"sum", reduce_kernel<ReduceOp::Sum>},
    {"prod", reduce_kernel<ReduceOp::Prod>},
    {"amax", reduce_kernel<ReduceOp::Max>},
    {"amin", reduce_kernel<ReduceOp::Min>},
    {"all", reduce_kernel<ReduceOp::All>},
    {"any", reduce_kernel<ReduceOp::Any>},
    {"max_min_dim", arg_reduce_kernel},
    {"cumsum", cumsum_kernel},
  };
  for (const auto& [op, kernel] : table) register_kernel(op, kCPU, kernel);
  return true;
}();

}  // namespace
}  // namespace kiln::cpu
