// Built when libtorch is not installed: the peer comparisons are skipped.
#include "peers/peer.h"

namespace kiln::bench::peer {

std::optional<double> layer_norm_seconds(long, long, int) { return std::nullopt; }
std::optional<double> softmax_seconds(long, long, int) { return std::nullopt; }
std::optional<double> small_add_seconds_per_call(int) { return std::nullopt; }
std::optional<double> dense_causal_attention_seconds(long, long, long, int) { return std::nullopt; }
std::optional<double> gpt_train_tokens_per_second(long, long, long, long, long, long, int, int) { return std::nullopt; }

std::optional<double> conv2d_seconds(const ConvShape&, bool, int, bool) { return std::nullopt; }
std::optional<double> cnn_train_images_per_second(long, int, int, bool) { return std::nullopt; }

std::optional<double> linear_dynamic_seconds(long, long, long, int) { return std::nullopt; }

}  // namespace kiln::bench::peer
