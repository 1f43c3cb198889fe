// kiln::nn: Module (named parameters, buffers and children, train/eval,
// state_dict), the standard layers, init functions and losses.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <array>
#include <concepts>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "kiln/tensor.h"

namespace kiln::quant {
struct Int8Weight;
}

namespace kiln::nn {

using StateDict = std::map<std::string, Tensor>;

// The entries of `state` under `prefix` with it removed ("model.w" -> "w"),
// and every entry with `prefix` added: a checkpoint holds several state
// dicts side by side (model, optimizer, schedule) under such prefixes.
StateDict select_prefix(const StateDict& state, const std::string& prefix);
StateDict add_prefix(const StateDict& state, const std::string& prefix);

// Modules are built in place (std::make_shared) and never copied: they
// register the addresses of their members.
class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  int64_t num_parameters() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Parameters and buffers by dotted name ("blocks.0.attn.qkv.weight").
  StateDict state_dict() const;
  // Copies values in. Strict: every key must match, with the same shape.
  void load_state_dict(const StateDict& state, bool strict = true);
  void to(DType dtype);  // converts parameters and floating buffers, in place
  // Moves parameters and buffers to `device` (their values copied; to meta,
  // shapes only). From meta, where there are no values, use to_empty.
  void to(Device device);
  // 4-D (5-D) parameters and buffers stored in `format` (channels_last,
  // channels_last_3d), values unchanged, as module.to(memory_format=...):
  // convolutions then compute in that format whatever their input's.
  void to(MemoryFormat format);
  // Parameters and buffers replaced by uninitialised ones of the same shapes
  // on `device`, as PyTorch's to_empty: a model built on meta gets memory
  // once, then its values from load_state_dict.
  void to_empty(Device device);
  void zero_grad();

  // The module tree: direct children by name; every module below and
  // including this one by dotted name (this one as ""), depth first.
  std::vector<std::pair<std::string, Module*>> named_children() const { return children_; }
  std::vector<Module*> children() const;
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<Module*> modules();
  // fn on every child's subtree, then on this module (PyTorch's order), e.g. to initialise weights.
  Module& apply(const std::function<void(Module&)>& fn);

 protected:
  // Members register their tensors by address so to() and load_state_dict
  // update what the layer's code reads. A buffer that is not persistent is
  // converted and moved with the module but left out of its state_dict.
  void register_parameter(const std::string& name, Tensor* slot, bool requires_grad = true);
  void register_buffer(const std::string& name, Tensor* slot, bool persistent = true);
  void register_module(const std::string& name, Module* child);
  // The child registered as `name` replaced by another (Sequential::replace).
  void replace_module(const std::string& name, Module* child);

 private:
  // Converts every parameter and buffer t that `applies` to into make(t),
  // in place (Note [Converting in place]: every handle on t sees it, an
  // optimizer's too), under no_grad; tied tensors are converted once, and
  // parameters keep requires_grad and their (converted) gradient.
  void replace_tensors(const std::function<bool(const Tensor&)>& applies,
                       const std::function<Tensor(const Tensor&)>& make);
  template <class F>
  void visit(const std::string& prefix, F&& f) const;
  std::vector<std::pair<std::string, Tensor*>> params_, buffers_;
  std::vector<const Tensor*> non_persistent_;  // buffers left out of state_dict
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

// What register_forward_pre_hook / register_forward_hook return: remove()
// takes the hook off (valid while the module lives).
class RemovableHandle {
 public:
  explicit RemovableHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  void remove() {
    if (remove_) std::exchange(remove_, nullptr)();
  }

 private:
  std::function<void()> remove_;
};

// A module with one tensor in and one out, so Sequential can chain it.
// Calling it runs forward between its hooks, as PyTorch's __call__: each
// pre-hook may replace the input, each forward hook the output (by
// returning a tensor; an undefined one leaves it), in registration order.
// Full backward hooks, as PyTorch's register_full_backward_(pre_)hook, run
// when the gradient passes the call: a backward pre-hook sees (and may
// replace) the gradient of the output; a backward hook sees the gradient
// of the input (undefined when the input needs none) beside the output's,
// and may replace the input's.
class UnaryModule : public Module {
 public:
  using ForwardPreHook = std::function<Tensor(Module&, const Tensor& input)>;
  using ForwardHook = std::function<Tensor(Module&, const Tensor& input, const Tensor& output)>;
  using BackwardPreHook = std::function<Tensor(Module&, const Tensor& grad_output)>;
  using BackwardHook = std::function<Tensor(Module&, const Tensor& grad_input, const Tensor& grad_output)>;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x);
  RemovableHandle register_forward_pre_hook(ForwardPreHook hook);
  RemovableHandle register_forward_hook(ForwardHook hook);
  RemovableHandle register_full_backward_pre_hook(BackwardPreHook hook);
  RemovableHandle register_full_backward_hook(BackwardHook hook);

 private:
  // The call with its backward hooks attached (identity nodes around it).
  Tensor call_with_backward_hooks(const Tensor& input);
  std::map<int64_t, ForwardPreHook> pre_hooks_;
  std::map<int64_t, ForwardHook> hooks_;
  std::map<int64_t, BackwardPreHook> backward_pre_hooks_;
  std::map<int64_t, BackwardHook> backward_hooks_;
  int64_t next_hook_ = 0;
};

// Layers of no parameters: the identity; dims start_dim..end_dim merged
// into one; dim `dim` split into `sizes`; any tensor-to-tensor callable.
class Identity : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};
class Flatten : public UnaryModule {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  int64_t start_dim, end_dim;
};
class Unflatten : public UnaryModule {
 public:
  Unflatten(int64_t dim, Shape sizes) : dim(dim), sizes(std::move(sizes)) {}
  Tensor forward(const Tensor& x) override;
  int64_t dim;
  Shape sizes;
};
class Functional : public UnaryModule {
 public:
  explicit Functional(std::function<Tensor(const Tensor&)> fn) : fn_(std::move(fn)) {}
  Tensor forward(const Tensor& x) override { return fn_(x); }

 private:
  std::function<Tensor(const Tensor&)> fn_;
};

class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;  // weight (out, in), bias (out) or undefined
  // Set by quant::quantize_dynamic: forward runs quant::linear_dynamic on
  // these int8 weights (float32 inputs; inference only).
  std::shared_ptr<const quant::Int8Weight> dynamic_int8;
};

// N(0, 1) rows; the padding_idx row starts at zero and gets no gradient;
// max_norm renormalises the rows looked up (see kiln::embedding).
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, std::optional<int64_t> padding_idx = {},
            std::optional<double> max_norm = {});
  Tensor forward(const Tensor& indices) override;
  Tensor weight;
  std::optional<int64_t> padding_idx;
  std::optional<double> max_norm;
};

class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  double eps;
  int64_t dim;
};

class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(int64_t dim, std::optional<double> eps = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight;
  std::optional<double> eps;
  int64_t dim;
};

class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  double p;
};

class GELU : public UnaryModule {
 public:
  explicit GELU(std::string approximate = "none") : approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  std::string approximate;
};
class SiLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
};
class ReLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules) {
    for (const auto& m : modules) push_back(m);
  }
  void push_back(std::shared_ptr<UnaryModule> m);
  // Module i replaced by m, under the same name (quantization's fusion and convert).
  void replace(size_t i, std::shared_ptr<UnaryModule> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return mods_.size(); }
  UnaryModule& operator[](size_t i) { return *mods_[i]; }
  const std::shared_ptr<UnaryModule>& at(size_t i) const { return mods_.at(i); }

 private:
  std::vector<std::shared_ptr<UnaryModule>> mods_;
};

// Holds modules of any kind, registered as "0", "1", ...
template <class M>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> m) {
    mods_.push_back(std::move(m));
    register_module(std::to_string(mods_.size() - 1), mods_.back().get());
  }
  size_t size() const { return mods_.size(); }
  M& operator[](size_t i) { return *mods_[i]; }
  auto begin() { return mods_.begin(); }
  auto end() { return mods_.end(); }

 private:
  std::vector<std::shared_ptr<M>> mods_;
};

// Modules by name, in insertion order, registered under those names.
template <class M = Module>
class ModuleDict : public Module {
 public:
  void insert(const std::string& name, std::shared_ptr<M> m) {
    check(!index_.count(name), "ModuleDict", "already holds a module named '", name, "'");
    check(name.find('.') == std::string::npos && !name.empty(), "ModuleDict", "module name '", name,
          "' must be non-empty and have no '.'");
    index_[name] = mods_.size();
    mods_.emplace_back(name, std::move(m));
    register_module(name, mods_.back().second.get());
  }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  M& operator[](const std::string& name) {
    auto it = index_.find(name);
    check(it != index_.end(), "ModuleDict", "no module named '", name, "'");
    return *mods_[it->second].second;
  }
  size_t size() const { return mods_.size(); }
  auto begin() { return mods_.begin(); }
  auto end() { return mods_.end(); }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<M>>> mods_;
  std::map<std::string, size_t> index_;
};

// Convolutions as torch.nn.functional's: input (N, C, spatial...) or
// unbatched (C, spatial...); weight (out, in / groups, kernel...) (for
// the transposed ones (in, out / groups, kernel...)); stride, padding,
// dilation (and output_padding) of one value or one per spatial dim;
// padding may also be Padding::Same (output size = input size; stride 1)
// or Padding::Valid (none), PyTorch's padding='same' / 'valid'.
enum class Padding { Same, Valid };
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, Shape stride = {1},
              Shape padding = {0}, Shape dilation = {1}, int64_t groups = 1);
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, Shape stride = {1},
              Shape padding = {0}, Shape dilation = {1}, int64_t groups = 1);
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, Shape stride = {1},
              Shape padding = {0}, Shape dilation = {1}, int64_t groups = 1);
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, Shape stride, Padding padding,
              Shape dilation = {1}, int64_t groups = 1);
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Shape stride, Padding padding,
              Shape dilation = {1}, int64_t groups = 1);
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, Shape stride, Padding padding,
              Shape dilation = {1}, int64_t groups = 1);
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, Shape stride = {1},
                        Shape padding = {0}, Shape output_padding = {0}, int64_t groups = 1, Shape dilation = {1});
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, Shape stride = {1},
                        Shape padding = {0}, Shape output_padding = {0}, int64_t groups = 1, Shape dilation = {1});
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, Shape stride = {1},
                        Shape padding = {0}, Shape output_padding = {0}, int64_t groups = 1, Shape dilation = {1});
// Pooling as torch.nn.functional's over (N, C, spatial...) or unbatched
// (C, spatial...): kernel_size, stride (empty: the kernel), padding and
// dilation of one value or one per dim. The _with_indices forms also give
// each maximum's flat index within its (N, C) plane (PyTorch's indices).
// Adaptive pools split each dim of L into output_size bins
// [floor(j L / out), ceil((j + 1) L / out)).
Tensor max_pool1d(const Tensor& input, Shape kernel_size, Shape stride = {}, Shape padding = {0},
                  Shape dilation = {1}, bool ceil_mode = false);
Tensor max_pool2d(const Tensor& input, Shape kernel_size, Shape stride = {}, Shape padding = {0},
                  Shape dilation = {1}, bool ceil_mode = false);
Tensor max_pool3d(const Tensor& input, Shape kernel_size, Shape stride = {}, Shape padding = {0},
                  Shape dilation = {1}, bool ceil_mode = false);
std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, Shape kernel_size, Shape stride = {},
                                                   Shape padding = {0}, Shape dilation = {1}, bool ceil_mode = false);
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, Shape kernel_size, Shape stride = {},
                                                   Shape padding = {0}, Shape dilation = {1}, bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& input, Shape kernel_size, Shape stride = {}, Shape padding = {0},
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor avg_pool2d(const Tensor& input, Shape kernel_size, Shape stride = {}, Shape padding = {0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = {});
Tensor avg_pool3d(const Tensor& input, Shape kernel_size, Shape stride = {}, Shape padding = {0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = {});
Tensor adaptive_avg_pool1d(const Tensor& input, Shape output_size);
Tensor adaptive_avg_pool2d(const Tensor& input, Shape output_size);
std::tuple<Tensor, Tensor> adaptive_max_pool2d(const Tensor& input, Shape output_size);  // values, indices
// Normalisation as torch.nn.functional's. batch_norm: per channel of
// (N, C, ...), over N and the spatial dims, batch statistics in training
// (and the running ones updated: momentum, unbiased variance), the running
// ones in evaluation; group_norm: per sample over each group of channels;
// instance_norm: per sample and channel over the spatial dims.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = {}, const Tensor& bias = {}, bool training = false, double momentum = 0.1,
                  double eps = 1e-5);
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
Tensor instance_norm(const Tensor& input, const Tensor& running_mean = {}, const Tensor& running_var = {},
                     const Tensor& weight = {}, const Tensor& bias = {}, bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);
// Convolution layers as PyTorch's (weight (out, in / groups, kernel...),
// bias (out); both U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in /
// groups * kernel elements); padding_mode "zeros", "reflect", "replicate"
// or "circular".
struct ConvOptions {
  Shape stride = {1}, padding = {0}, dilation = {1};
  int64_t groups = 1;
  bool bias = true;
  std::string padding_mode = "zeros";
};
class ConvNd : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t in_channels, out_channels;
  Shape kernel_size;
  ConvOptions options;

 protected:
  ConvNd(const char* name, int64_t dims, int64_t in_channels, int64_t out_channels, Shape kernel_size,
         ConvOptions options);
  const char* name_;
  int64_t dims_;
};
class Conv1d : public ConvNd {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, Shape kernel_size, ConvOptions options = {})
      : ConvNd("Conv1d", 1, in_channels, out_channels, std::move(kernel_size), std::move(options)) {}
};
class Conv2d : public ConvNd {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Shape kernel_size, ConvOptions options = {})
      : ConvNd("Conv2d", 2, in_channels, out_channels, std::move(kernel_size), std::move(options)) {}
};
class Conv3d : public ConvNd {
 public:
  Conv3d(int64_t in_channels, int64_t out_channels, Shape kernel_size, ConvOptions options = {})
      : ConvNd("Conv3d", 3, in_channels, out_channels, std::move(kernel_size), std::move(options)) {}
};
// weight (in, out / groups, kernel...); fan_in as PyTorch computes it on
// that weight: out / groups * kernel elements.
struct ConvTransposeOptions {
  Shape stride = {1}, padding = {0}, output_padding = {0};
  int64_t groups = 1;
  bool bias = true;
  Shape dilation = {1};
};
class ConvTranspose2d : public UnaryModule {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Shape kernel_size, ConvTransposeOptions options = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  ConvTransposeOptions options;
};
class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(Shape kernel_size, Shape stride = {}, Shape padding = {0}, Shape dilation = {1},
                     bool ceil_mode = false)
      : kernel_size(std::move(kernel_size)), stride(std::move(stride)), padding(std::move(padding)),
        dilation(std::move(dilation)), ceil_mode(ceil_mode) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode); }
  Shape kernel_size, stride, padding, dilation;
  bool ceil_mode;
};
class AvgPool2d : public UnaryModule {
 public:
  explicit AvgPool2d(Shape kernel_size, Shape stride = {}, Shape padding = {0}, bool ceil_mode = false,
                     bool count_include_pad = true, std::optional<int64_t> divisor_override = {})
      : kernel_size(std::move(kernel_size)), stride(std::move(stride)), padding(std::move(padding)),
        ceil_mode(ceil_mode), count_include_pad(count_include_pad), divisor_override(divisor_override) {}
  Tensor forward(const Tensor& x) override {
    return avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
  }
  Shape kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor_override;
};
class AdaptiveAvgPool2d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2d(Shape output_size) : output_size(std::move(output_size)) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  Shape output_size;
};
// BatchNorm1d ((N, C) or (N, C, L)) and BatchNorm2d ((N, C, H, W)):
// weight ones, bias zeros; buffers running_mean, running_var and
// num_batches_tracked (int64); momentum unset: a cumulative average.
class BatchNormNd : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool track_running_stats;

 protected:
  BatchNormNd(const char* name, std::vector<int64_t> input_dims, int64_t num_features, double eps,
              std::optional<double> momentum, bool affine, bool track_running_stats);
  const char* name_;
  std::vector<int64_t> input_dims_;
};
class BatchNorm1d : public BatchNormNd {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNormNd("BatchNorm1d", {2, 3}, num_features, eps, momentum, affine, track_running_stats) {}
};
class BatchNorm2d : public BatchNormNd {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNormNd("BatchNorm2d", {4}, num_features, eps, momentum, affine, track_running_stats) {}
};
class GroupNorm : public UnaryModule {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override { return group_norm(x, num_groups, weight, bias, eps); }
  Tensor weight, bias;
  int64_t num_groups;
  double eps;
};

// torch.nn.MultiheadAttention (kdim = vdim = embed_dim). Inputs (L, N, E),
// or (N, L, E) when batch_first, or unbatched (L, E). Masks as PyTorch's:
// attn_mask (L, S) or (N * num_heads, L, S), key_padding_mask (N, S); a
// bool mask's true entries may not be attended, a float mask is added to
// the scores. is_causal adds the causal mask (with or without attn_mask).
// Without need_weights and without dropout in training, the attention runs
// as flex_attention (scores never materialised); otherwise explicitly,
// returning the weights averaged over heads (N, L, S) or per head
// (N, num_heads, L, S). Parameters: in_proj_weight (3E, E), in_proj_bias,
// out_proj.weight, out_proj.bias.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false);
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                     bool is_causal = false);
  Tensor in_proj_weight, in_proj_bias;
  Linear out_proj;
  int64_t embed_dim, num_heads, head_dim;
  double dropout;
  bool batch_first;
};

// torch.nn.TransformerEncoderLayer: self-attention and a feed-forward
// block (linear1, activation "relu" or "gelu", linear2), each with dropout
// and a residual, layer norms after (or, norm_first, before) each.
struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;
};
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {});
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor operator()(const Tensor& src) { return forward(src); }
  MultiheadAttention self_attn;
  Linear linear1, linear2;
  LayerNorm norm1, norm2;
  TransformerEncoderLayerOptions options;

 private:
  Tensor feed_forward(const Tensor& x);
};

// num_layers encoder layers of the same options in turn ("layers.0", ...),
// then an optional final LayerNorm ("norm").
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers, TransformerEncoderLayerOptions options = {},
                     bool final_norm = false);
  Tensor forward(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  ModuleList<TransformerEncoderLayer> layers;
  std::shared_ptr<LayerNorm> norm;
};

// Recurrent layers as PyTorch's nn.LSTM / nn.GRU: input (L, N, input_size),
// (N, L, input_size) when batch_first, or unbatched (L, input_size);
// states (num_layers * directions, N, hidden_size) (unbatched without N),
// zeros when not given. Gates in PyTorch's order (LSTM i, f, g, o; GRU r,
// z, n) and parameter names (weight_ih_l0, weight_hh_l0, bias_ih_l0,
// bias_hh_l0, ..._reverse), all U(-1/sqrt(hidden), 1/sqrt(hidden));
// dropout between layers in training. No proj_size or packed sequences.
struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;
  bool bidirectional = false;
};
class RNNBase : public Module {
 public:
  int64_t input_size, hidden_size;
  RNNOptions options;
  // Parameters of layer l, direction d (0 forward, 1 reverse): w_ih, w_hh,
  // b_ih, b_hh (the biases undefined without bias).
  std::array<Tensor*, 4> layer_params(int64_t layer, int64_t direction);

 protected:
  RNNBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, RNNOptions options);
  // Runs every layer and direction; step(gates_x, h, c) -> (h, c) for one
  // time step (c undefined for the GRU); gates_x are x W_ih^T + b_ih.
  using Step = std::function<std::pair<Tensor, Tensor>(const Tensor& gates_x, const Tensor& h, const Tensor& c,
                                                       const Tensor& w_hh, const Tensor& b_hh)>;
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, const Tensor& h0, const Tensor& c0, const Step& step);
  const char* name_;

 private:
  std::deque<Tensor> params_store_;  // a deque: slots keep their addresses
};
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  // -> (output, (h_n, c_n)); output's features are 2 hidden_size when bidirectional.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input,
                                                         std::optional<std::tuple<Tensor, Tensor>> hx = {});
};
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = {});  // -> (output, h_n)
};
// One time step: (N, input_size) or (input_size) with its states.
class RNNCellBase : public Module {
 public:
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  RNNCellBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias);
};
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  std::tuple<Tensor, Tensor> forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx = {});
};
class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  Tensor forward(const Tensor& input, const Tensor& hx = {});
};

// Parameters held in a list ("0", "1", ...) or by name; each registered as
// the module's parameter (requires_grad set).
class ParameterList : public Module {
 public:
  void push_back(Tensor t) {
    params_list_.push_back(std::move(t));  // a deque: earlier slots keep their addresses
    register_parameter(std::to_string(params_list_.size() - 1), &params_list_.back());
  }
  size_t size() const { return params_list_.size(); }
  Tensor& operator[](size_t i) { return params_list_.at(i); }

 private:
  std::deque<Tensor> params_list_;
};
class ParameterDict : public Module {
 public:
  void insert(const std::string& name, Tensor t) {
    check(!params_dict_.count(name), "ParameterDict", "already holds a parameter named '", name, "'");
    register_parameter(name, &params_dict_.emplace(name, std::move(t)).first->second);
  }
  bool contains(const std::string& name) const { return params_dict_.count(name) > 0; }
  Tensor& operator[](const std::string& name) {
    auto it = params_dict_.find(name);
    check(it != params_dict_.end(), "ParameterDict", "no parameter named '", name, "'");
    return it->second;
  }
  size_t size() const { return params_dict_.size(); }

 private:
  std::map<std::string, Tensor> params_dict_;  // a map: slots keep their addresses
};

// Dropout as a function (training: zero with probability p, scale by 1/(1-p)).
Tensor dropout(const Tensor& x, double p, bool training);
// Whole channels dropped: one draw per (sample, channel) of (N, C, spatial...)
// or (C, spatial...) with 1, 2 or 3 spatial dims, kept ones scaled by 1 / (1 - p).
Tensor dropout1d(const Tensor& x, double p = 0.5, bool training = true);
Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true);
Tensor dropout3d(const Tensor& x, double p = 0.5, bool training = true);
// SELU's dropout: dropped values become SELU's saturation -1.7581, then
// a x + b keeps a unit normal input's mean and variance; per element, or
// per channel (dim 1 of an input of 3+ dims, dim 0 of a 2-D one).
Tensor alpha_dropout(const Tensor& x, double p, bool training);
Tensor feature_alpha_dropout(const Tensor& x, double p, bool training);

// As torch.nn.functional's: the first half along dim gated by the sigmoid
// of the second; x where x > 0, else weight * x (one weight, or one per
// channel along dim 1); x divided by max(its p-norm along dim, eps); the
// cosine of the angle along dim, x1 . x2 / (max(|x1|, eps) max(|x2|, eps))
// (x1 and x2 broadcast); the p-norm of x1 - x2 + eps along the last dim.
Tensor glu(const Tensor& x, int64_t dim = -1);
Tensor prelu(const Tensor& x, const Tensor& weight);
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6, bool keepdim = false);

// Losses, as torch.nn.functional's. reduction: "mean", "sum" or "none".
// logits (N, C) or (N, C, d...) with integer targets (N) / (N, d...), or
// with class probabilities of the logits' shape (floating point).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, const std::string& reduction = "mean");
// The same with a weight per class (shape [C]; undefined = all 1): "mean"
// then divides by the summed weights of the targets' classes.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, const std::string& reduction = "mean");
// log-probabilities (N, C, d...) and class targets (N, d...).
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = {}, int64_t ignore_index = -100,
                const std::string& reduction = "mean");
// Probabilities in [0, 1] against targets; the logits form is the stable
// one (pos_weight: a weight for positive targets, per class along the last dim).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            const std::string& reduction = "mean");
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                                        const Tensor& pos_weight = {}, const std::string& reduction = "mean");
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
                      double beta = 1.0);
Tensor huber_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean", double delta = 1.0);
// input: log-probabilities; target: probabilities (or their logs with
// log_target). reduction may also be "batchmean" (the sum over the batch size).
Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
              bool log_target = false);
Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin = 0.0,
                           const std::string& reduction = "mean");
// Connectionist temporal classification: -log p(target | log_probs)
// summed over every alignment. log_probs (T, N, C) (log_softmax outputs;
// (T, C) unbatched), targets padded (N, S) or concatenated (the sum of
// target_lengths), one input and target length per sample; reduction
// "mean" divides each loss by its target length before the batch mean;
// zero_infinity: an impossible alignment's infinite loss (and its
// gradient) becomes 0.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank = 0, const std::string& reduction = "mean",
                bool zero_infinity = false);
// im2col and col2im, as torch.nn.functional.unfold / fold: every kernel-sized
// patch of (N, C, H, W) (or (C, H, W)) as a column of (N, C kh kw, L), L the
// number of patches; fold sums columns back into (N, C, H, W) of
// output_size (overlaps add), so fold(unfold(x)) counts each pixel once per
// patch covering it.
Tensor unfold(const Tensor& input, const Shape& kernel_size, const Shape& dilation = {1, 1},
              const Shape& padding = {0, 0}, const Shape& stride = {1, 1});
Tensor fold(const Tensor& input, const Shape& output_size, const Shape& kernel_size, const Shape& dilation = {1, 1},
            const Shape& padding = {0, 0}, const Shape& stride = {1, 1});
// torch.nn.functional.interpolate of (N, C, spatial...), 1 to 3 spatial
// dims: mode "nearest", "nearest-exact", "linear" (3-D input), "bilinear"
// (4-D) or "trilinear" (5-D). Exactly one of size and scale_factor (one
// value for every spatial dim, or one per dim); align_corners only for the
// linear modes (default false); recompute_scale_factor: sample by the
// output size rather than by the given factor.
Tensor interpolate(const Tensor& input, std::optional<Shape> size = {},
                   std::optional<std::vector<double>> scale_factor = {}, const std::string& mode = "nearest",
                   std::optional<bool> align_corners = {}, std::optional<bool> recompute_scale_factor = {});
// 1 - cos(x1, x2) for target 1, max(0, cos - margin) for target -1 (rows of
// 2-d inputs, or one pair of 1-d vectors).
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin = 0.0,
                             const std::string& reduction = "mean");

// Value semantics for a module, as libtorch's ModuleHolder / TORCH_MODULE:
// a shared handle (copies share the module) built with the module's own
// constructor arguments, used through -> and called as the module is
// (operator() when it has one, else forward). A holder converts to the
// module's pointer, so register_module(name, holder) registers it.
//   class NetImpl : public kiln::nn::Module { ... };
//   KILN_MODULE(Net);   // Net n(args...); n->parameters(); n(x);
template <class M>
class ModuleHolder {
 public:
  template <class... Args>
    requires std::constructible_from<M, Args...>
  explicit ModuleHolder(Args&&... args) : impl_(std::make_shared<M>(std::forward<Args>(args)...)) {}
  ModuleHolder(std::shared_ptr<M> module) : impl_(std::move(module)) {}
  ModuleHolder(std::nullptr_t) {}  // empty, as libtorch's holders can be
  M* operator->() const { return get(); }
  M& operator*() const { return *get(); }
  M* get() const {
    check(impl_ != nullptr, "ModuleHolder", "the holder is empty (built from nullptr)");
    return impl_.get();
  }
  operator M*() const { return get(); }
  const std::shared_ptr<M>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    if constexpr (requires(M& m) { m(std::forward<Args>(args)...); })
      return (*get())(std::forward<Args>(args)...);
    else
      return get()->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<M> impl_;
};
#define KILN_MODULE(Name)                                        \
  class Name : public ::kiln::nn::ModuleHolder<Name##Impl> {    \
   public:                                                       \
    using ::kiln::nn::ModuleHolder<Name##Impl>::ModuleHolder;    \
  }

namespace init {
// In place, without recording history, as torch.nn.init.
void normal_(const Tensor& t, double mean = 0.0, double std = 1.0);
void uniform_(const Tensor& t, double low = 0.0, double high = 1.0);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);
// fan_in / fan_out of a weight (out, in, ...).
void xavier_uniform_(const Tensor& t, double gain = 1.0);
void xavier_normal_(const Tensor& t, double gain = 1.0);
void kaiming_uniform_(const Tensor& t, double a = 0.0, const std::string& mode = "fan_in");
void kaiming_normal_(const Tensor& t, double a = 0.0, const std::string& mode = "fan_in");
}  // namespace init

}  // namespace kiln::nn

KILN_API_END
