// The libtorch 1.13 peer: the same ops run through PyTorch's C++ library.
// Built from torch_peer.cpp when CMake finds Torch, else no_torch_peer.cpp.
#pragma once
#include <optional>

namespace kiln::bench::peer {

// Best-of-n seconds for the op on random float32 input of the given shape,
// with `threads` intra-op threads; nullopt when libtorch is not built in.
std::optional<double> layer_norm_seconds(long rows, long cols, int threads);
std::optional<double> softmax_seconds(long rows, long cols, int threads);

// Seconds per call of an eager add of two 1-element float32 tensors (the
// per-op overhead: dispatch, allocation, no arithmetic to speak of), the
// best of several batches of `calls` calls.
std::optional<double> small_add_seconds_per_call(int calls);

// Training tokens per second of the GPT of `kiln train` built from
// torch::nn pieces (same shapes, same AdamW settings, same init scheme),
// over `steps` steps after 2 warm-up steps.
std::optional<double> gpt_train_tokens_per_second(long layers, long heads, long width, long context, long vocab,
                                                  long batch, int steps, int threads);

// Best-of-n seconds of dense causal attention in libtorch (materialised
// scores, masked_fill, softmax, matmul), float32, (1, H, L, E).
std::optional<double> dense_causal_attention_seconds(long heads, long len, long dim, int threads);

// A conv2d's shape: input (N, C, H, W), O outputs, k x k kernel.
struct ConvShape {
  long N, C, H, W, O, k, stride, padding, groups;
};
// Each side's conv2d timing: best of at least 3 calls and of at least this many seconds of calls.
inline constexpr double kConvSeconds = 0.25;
// Best-of-n seconds of libtorch's conv2d with bias, forward only or forward + backward (all three gradients).
std::optional<double> conv2d_seconds(const ConvShape& s, bool backward, int threads, bool channels_last = false);
// Training images per second of the Fashion-MNIST CNN (two conv3x3-BN-ReLU-maxpool stages, linear 3136 -> 128,
// dropout, linear 128 -> 10; AdamW), random images, over `steps` steps after 2 warm-up steps.
std::optional<double> cnn_train_images_per_second(long batch, int steps, int threads, bool channels_last = false);

// Best-of-n seconds of libtorch's dynamic quantized Linear (quantized::linear_dynamic, int8 weights per tensor,
// activations quantized per call) on the oneDNN engine; nullopt without it.
std::optional<double> linear_dynamic_seconds(long batch, long in, long out, int threads);

}  // namespace kiln::bench::peer
