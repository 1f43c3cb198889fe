// torch.nn.init: in-place initialisers that record no history.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/nn.h"

namespace kiln::nn::init {
namespace {

std::pair<double, double> fans(const Tensor& t, const char* op) {
  check(t.dim() >= 2, op, "fan in and fan out need a tensor with at least 2 dims but got ", t.dim());
  double receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= static_cast<double>(t.size(d));
  return {static_cast<double>(t.size(1)) * receptive, static_cast<double>(t.size(0)) * receptive};
}

double fan(const Tensor& t, const std::string& mode, const char* op) {
  auto [in, out] = fans(t, op);
  check(mode == "fan_in" || mode == "fan_out", op, "mode must be 'fan_in' or 'fan_out' but got '", mode, "'");
  return mode == "fan_in" ? in : out;
}

}  // namespace

void normal_(const Tensor& t, double mean, double std) {
  NoGradGuard g;
  t.copy_(randn(t.sizes(), TensorOptions(kFloat64).device(t.device())) * std + mean);
}
void uniform_(const Tensor& t, double low, double high) {
  NoGradGuard g;
  t.copy_(rand(t.sizes(), TensorOptions(kFloat64).device(t.device())) * (high - low) + low);
}
void zeros_(const Tensor& t) {
  NoGradGuard g;
  t.zero_();
}
void ones_(const Tensor& t) {
  NoGradGuard g;
  t.fill_(1);
}
void xavier_uniform_(const Tensor& t, double gain) {
  auto [in, out] = fans(t, "xavier_uniform_");
  const double a = gain * std::sqrt(6.0 / (in + out));
  uniform_(t, -a, a);
}
void xavier_normal_(const Tensor& t, double gain) {
  auto [in, out] = fans(t, "xavier_normal_");
  normal_(t, 0, gain * std::sqrt(2.0 / (in + out)));
}
void kaiming_uniform_(const Tensor& t, double a, const std::string& mode) {
  const double gain = std::sqrt(2.0 / (1 + a * a));
  const double bound = gain * std::sqrt(3.0 / fan(t, mode, "kaiming_uniform_"));
  uniform_(t, -bound, bound);
}
void kaiming_normal_(const Tensor& t, double a, const std::string& mode) {
  const double gain = std::sqrt(2.0 / (1 + a * a));
  normal_(t, 0, gain / std::sqrt(fan(t, mode, "kaiming_normal_")));
}

}  // namespace kiln::nn::init
