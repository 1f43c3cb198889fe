// The standard layers, initialised as PyTorch initialises them.
#include <cmath>

#include "kiln/error.h"
#include "kiln/nn.h"
#include "kiln/quantization.h"

namespace kiln::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  check(in > 0 && out > 0, "Linear", "expected positive sizes but got in_features=", in, ", out_features=", out);
  // PyTorch: kaiming_uniform_(a=sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)), for both.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = empty({out, in});
  init::uniform_(weight, -bound, bound);
  register_parameter("weight", &weight);
  if (has_bias) {
    bias = empty({out});
    init::uniform_(bias, -bound, bound);
  }
  register_parameter("bias", &bias);
}

Tensor Linear::forward(const Tensor& x) {
  if (dynamic_int8) return quant::linear_dynamic(x, *dynamic_int8, bias);
  return linear(x, weight, bias);
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad, std::optional<double> max_norm_)
    : padding_idx(pad), max_norm(max_norm_) {
  check(num > 0 && dim > 0, "Embedding", "expected positive sizes but got ", num, " x ", dim);
  check(!pad || (*pad >= -num && *pad < num), "Embedding", "padding_idx ", pad.value_or(0), " must be within the ", num,
        " rows");
  weight = randn({num, dim});
  if (pad) weight.select(0, *pad < 0 ? *pad + num : *pad).zero_();
  register_parameter("weight", &weight);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices, padding_idx, max_norm); }

LayerNorm::LayerNorm(int64_t d, double e, bool affine) : eps(e), dim(d) {
  if (affine) {
    weight = ones({d});
    bias = zeros({d});
  }
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, {dim}, weight, bias, eps); }

RMSNorm::RMSNorm(int64_t d, std::optional<double> e) : eps(e), dim(d) {
  weight = ones({d});
  register_parameter("weight", &weight);
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, {dim}, weight, eps); }

Dropout::Dropout(double prob) : p(prob) {
  check(p >= 0 && p <= 1, "Dropout", "probability has to be between 0 and 1, but got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

void Sequential::push_back(std::shared_ptr<UnaryModule> m) {
  mods_.push_back(std::move(m));
  register_module(std::to_string(mods_.size() - 1), mods_.back().get());
}

void Sequential::replace(size_t i, std::shared_ptr<UnaryModule> m) {
  check(i < mods_.size(), "Sequential", "replace: index ", i, " is out of range for ", mods_.size(), " modules");
  mods_[i] = std::move(m);
  replace_module(std::to_string(i), mods_[i].get());
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : mods_) h = (*m)(h);  // through operator(), so the children's hooks run
  return h;
}

Tensor Unflatten::forward(const Tensor& x) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  check(d >= 0 && d < x.dim(), "Unflatten", "dim ", dim, " is out of range for a ", x.dim(), "-d input");
  int64_t product = 1;
  bool inferred = false;
  for (int64_t s : sizes) s == -1 ? void(inferred = true) : void(product *= s);
  check(inferred ? product > 0 && x.size(d) % product == 0 : product == x.size(d), "Unflatten", "sizes ",
        shape_text(sizes), " do not fill dim ", d, " of size ", x.size(d), " (input ", shape_text(x.sizes()), ")");
  Shape shape = x.sizes();
  shape.erase(shape.begin() + d);
  shape.insert(shape.begin() + d, sizes.begin(), sizes.end());
  return x.reshape(shape);
}

}  // namespace kiln::nn
