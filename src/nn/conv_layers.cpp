// The convolution, transposed convolution, batch norm and group norm
// modules: PyTorch's parameters, buffers, names and initialisations over
// the functions of conv.cpp, pooling.cpp and normalization.cpp.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/nn.h"
#include "nn/spatial.h"

namespace kiln::nn {
namespace {

// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's kaiming_uniform_(a=sqrt(5))
// for convolution weights, and its bias rule.
Tensor uniform_by_fan_in(Shape shape, int64_t fan_in) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  Tensor t = empty(std::move(shape));
  init::uniform_(t, -bound, bound);
  return t;
}

}  // namespace

ConvNd::ConvNd(const char* name, int64_t dims, int64_t in, int64_t out, Shape kernel, ConvOptions o)
    : in_channels(in), out_channels(out), kernel_size(spatial::per_dim(name, "kernel_size", kernel, dims)),
      options(std::move(o)), name_(name), dims_(dims) {
  check(in > 0 && out > 0 && options.groups > 0 && in % options.groups == 0 && out % options.groups == 0, name,
        "expected positive in_channels (", in, ") and out_channels (", out, ") divisible by groups (", options.groups,
        ")");
  const std::string& mode = options.padding_mode;
  check(mode == "zeros" || mode == "reflect" || mode == "replicate" || mode == "circular", name,
        "expected padding_mode 'zeros', 'reflect', 'replicate' or 'circular' but got '", mode, "'");
  Shape w = {out, in / options.groups};
  w.insert(w.end(), kernel_size.begin(), kernel_size.end());
  const int64_t fan_in = in / options.groups * shape_numel(kernel_size);
  weight = uniform_by_fan_in(w, fan_in);
  register_parameter("weight", &weight);
  if (options.bias) {
    bias = uniform_by_fan_in({out}, fan_in);
    register_parameter("bias", &bias);
  }
}

Tensor ConvNd::forward(const Tensor& x) {
  Tensor in = x;
  Shape padding = options.padding;
  if (options.padding_mode != "zeros") {  // pad explicitly in that mode, then convolve unpadded
    const Shape p = spatial::per_dim(name_, "padding", options.padding, dims_);
    Shape pads;
    for (int64_t i = dims_ - 1; i >= 0; --i) pads.push_back(p[static_cast<size_t>(i)]), pads.push_back(p[static_cast<size_t>(i)]);
    in = pad(x, pads, options.padding_mode);
    padding = {0};
  }
  switch (dims_) {
    case 1: return conv1d(in, weight, bias, options.stride, padding, options.dilation, options.groups);
    case 2: return conv2d(in, weight, bias, options.stride, padding, options.dilation, options.groups);
    default: return conv3d(in, weight, bias, options.stride, padding, options.dilation, options.groups);
  }
}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Shape kernel, ConvTransposeOptions o) : options(std::move(o)) {
  check(in > 0 && out > 0 && options.groups > 0 && in % options.groups == 0 && out % options.groups == 0,
        "ConvTranspose2d", "expected positive in_channels (", in, ") and out_channels (", out,
        ") divisible by groups (", options.groups, ")");
  kernel = spatial::per_dim("ConvTranspose2d", "kernel_size", kernel, 2);
  const int64_t fan_in = out / options.groups * shape_numel(kernel);  // PyTorch's, on the (in, out / g, k) weight
  weight = uniform_by_fan_in({in, out / options.groups, kernel[0], kernel[1]}, fan_in);
  register_parameter("weight", &weight);
  if (options.bias) {
    bias = uniform_by_fan_in({out}, fan_in);
    register_parameter("bias", &bias);
  }
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return conv_transpose2d(x, weight, bias, options.stride, options.padding, options.output_padding, options.groups,
                          options.dilation);
}

BatchNormNd::BatchNormNd(const char* name, std::vector<int64_t> input_dims, int64_t n, double e,
                         std::optional<double> m, bool affine, bool track)
    : num_features(n), eps(e), momentum(m), track_running_stats(track), name_(name), input_dims_(std::move(input_dims)) {
  check(n > 0, name, "expected a positive num_features but got ", n);
  if (affine) {
    weight = ones({n}), bias = zeros({n});
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
  if (track) {
    running_mean = zeros({n}), running_var = ones({n}), num_batches_tracked = zeros({}, kInt64);
    register_buffer("running_mean", &running_mean);
    register_buffer("running_var", &running_var);
    register_buffer("num_batches_tracked", &num_batches_tracked);
  }
}

Tensor BatchNormNd::forward(const Tensor& x) {
  check(std::find(input_dims_.begin(), input_dims_.end(), x.dim()) != input_dims_.end(), name_, "expected a ",
        input_dims_.size() == 1 ? std::to_string(input_dims_[0]) + "-D" : "2-D or 3-D", " input but got shape ",
        shape_text(x.sizes()));
  check(x.size(1) == num_features, name_, "expected ", num_features, " channels but got shape ", shape_text(x.sizes()));
  double factor = momentum.value_or(0.0);
  if (is_training() && track_running_stats) {
    {
      NoGradGuard no_grad;
      num_batches_tracked.add_(scalar_tensor(1, kInt64));
    }
    if (!momentum) factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());  // cumulative average
  }
  // Batch statistics in training, or without running ones to use.
  const bool batch_stats = is_training() || !track_running_stats;
  return batch_norm(x, batch_stats && !is_training() ? Tensor() : running_mean,
                    batch_stats && !is_training() ? Tensor() : running_var, weight, bias, batch_stats, factor, eps);
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double e, bool affine) : num_groups(groups), eps(e) {
  check(groups > 0 && channels > 0 && channels % groups == 0, "GroupNorm", "expected num_channels (", channels,
        ") divisible by a positive num_groups (", groups, ")");
  if (affine) {
    weight = ones({channels}), bias = zeros({channels});
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
}

}  // namespace kiln::nn
