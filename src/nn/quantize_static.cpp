// Eager-mode static post-training quantization of a model's Sequentials
// (see kiln/quantization.h): BatchNorm folded into the convolution before
// it, observers on the inputs of the convolutions and linear layers, and
// their int8 replacements with a following ReLU fused.
#include <cmath>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/quantization.h"
#include "nn/spatial.h"

namespace kiln::quant {
namespace {

// A layer whose input a HistogramObserver sees (prepare), then the layer.
class Observed : public nn::UnaryModule {
 public:
  explicit Observed(std::shared_ptr<nn::UnaryModule> layer) : layer(std::move(layer)) {
    register_module("module", this->layer.get());
  }
  Tensor forward(const Tensor& x) override {
    observer.observe(x);
    return (*layer)(x);
  }
  std::shared_ptr<nn::UnaryModule> layer;
  HistogramObserver observer;
};

// The convolutions conv2d_int8 runs: 2-D, one group, zero padding given as numbers.
const nn::ConvNd* quantizable_conv(const nn::UnaryModule* m) {
  const auto* conv = dynamic_cast<const nn::Conv2d*>(m);
  if (!conv || conv->options.groups != 1 || conv->options.padding_mode != "zeros") return nullptr;
  return conv;
}

// The Sequentials of a model (itself included), gathered before any is
// changed: replacing a layer changes the tree named_modules walks.
std::vector<nn::Sequential*> sequentials(nn::Module& model) {
  std::vector<nn::Sequential*> found;
  for (const auto& [name, m] : model.named_modules())
    if (auto* seq = dynamic_cast<nn::Sequential*>(m)) found.push_back(seq);
  return found;
}

int64_t fuse_conv_bn_in(nn::Sequential& model) {
  int64_t fused = 0;
  for (size_t i = 0; i + 1 < model.size(); ++i) {
    auto* conv = dynamic_cast<nn::Conv2d*>(model.at(i).get());
    auto* bn = dynamic_cast<nn::BatchNorm2d*>(model.at(i + 1).get());
    if (!conv || !bn) continue;
    check(bn->running_mean.defined(), "fuse_conv_bn", "BatchNorm2d at ", i + 1, " keeps no running statistics");
    NoGradGuard no_grad;
    // y = gamma (conv(x) + b - mean) / sqrt(var + eps) + beta: the conv's weight and bias scaled per output channel.
    Tensor factor = rsqrt(bn->running_var.to(kFloat32) + bn->eps);
    if (bn->weight.defined()) factor = factor * bn->weight;
    Shape per_out(static_cast<size_t>(conv->weight.dim()), 1);
    per_out[0] = factor.numel();
    const Tensor b = conv->bias.defined() ? conv->bias : zeros({conv->out_channels});
    Tensor shifted = (b - bn->running_mean.to(kFloat32)) * factor;
    if (bn->bias.defined()) shifted = shifted + bn->bias;
    conv->weight.copy_(conv->weight * factor.reshape(per_out));
    if (conv->bias.defined()) conv->bias.copy_(shifted);
    else conv->bias = shifted.detach().clone();
    model.replace(i + 1, std::make_shared<nn::Identity>());
    ++fused;
  }
  return fused;
}

int64_t prepare_in(nn::Sequential& model) {
  int64_t observed = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    const nn::UnaryModule* m = model.at(i).get();
    if (!quantizable_conv(m) && !dynamic_cast<const nn::Linear*>(m)) continue;
    model.replace(i, std::make_shared<Observed>(model.at(i)));
    ++observed;
  }
  return observed;
}

int64_t convert_in(nn::Sequential& model) {
  int64_t converted = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    const auto* observed = dynamic_cast<const Observed*>(model.at(i).get());
    if (!observed) continue;
    const QParams q = observed->observer.calculate_qparams();
    std::shared_ptr<QuantizedLayer> layer;
    if (const nn::ConvNd* conv = quantizable_conv(observed->layer.get()))
      layer = std::make_shared<QuantizedConv2d>(*conv, q);
    else
      layer = std::make_shared<QuantizedLinear>(dynamic_cast<const nn::Linear&>(*observed->layer), q);
    // A ReLU right after (past Identities: a folded BatchNorm's place) into
    // the int8 layer's output pass.
    size_t next = i + 1;
    while (next < model.size() && dynamic_cast<const nn::Identity*>(model.at(next).get())) ++next;
    if (next < model.size() && dynamic_cast<const nn::ReLU*>(model.at(next).get())) {
      layer->relu = true;
      model.replace(next, std::make_shared<nn::Identity>());
    }
    model.replace(i, layer);
    ++converted;
  }
  return converted;
}

// f applied to every Sequential of the model; the layers it changed.
template <class F>
int64_t over_sequentials(nn::Module& model, const F& f) {
  int64_t changed = 0;
  for (nn::Sequential* seq : sequentials(model)) changed += f(*seq);
  return changed;
}

}  // namespace

int64_t fuse_conv_bn(nn::Module& model) { return over_sequentials(model, fuse_conv_bn_in); }
int64_t prepare(nn::Module& model) { return over_sequentials(model, prepare_in); }
int64_t convert(nn::Module& model) { return over_sequentials(model, convert_in); }

QuantizedLayer::QuantizedLayer(const Tensor& float_weight, const Tensor& float_bias, const QParams& input)
    : weight(quantize_weight(float_weight)),
      bias(float_bias.defined() ? float_bias.detach().clone() : Tensor()),
      input_scale(input.scales.item<double>()),
      input_zero_point(input.zero_points.item<int64_t>()) {}

QuantizedConv2d::QuantizedConv2d(const nn::ConvNd& conv, const QParams& input)
    : QuantizedLayer(conv.weight, conv.bias, input),
      kernel_size(nn::spatial::per_dim("QuantizedConv2d", "kernel_size", conv.kernel_size, 2)),
      stride(nn::spatial::per_dim("QuantizedConv2d", "stride", conv.options.stride, 2)),
      padding(nn::spatial::per_dim("QuantizedConv2d", "padding", conv.options.padding, 2)),
      dilation(nn::spatial::per_dim("QuantizedConv2d", "dilation", conv.options.dilation, 2)) {}

Tensor QuantizedConv2d::forward(const Tensor& x) {
  return conv2d_int8(x, weight, bias, kernel_size, stride, padding, dilation, input_scale, input_zero_point, relu);
}

QuantizedLinear::QuantizedLinear(const nn::Linear& linear, const QParams& input)
    : QuantizedLayer(linear.weight, linear.bias, input) {}

Tensor QuantizedLinear::forward(const Tensor& x) {
  return linear_int8(x, weight, bias, input_scale, input_zero_point, relu);
}

}  // namespace kiln::quant
