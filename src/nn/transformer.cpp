// torch.nn.MultiheadAttention, TransformerEncoderLayer and
// TransformerEncoder. The attention runs as flex_attention when nothing
// needs the attention weights themselves (need_weights false, no dropout
// on them); PyTorch's masks become its mask_mod (bool masks, causal) and
// score_mod (float masks, added). Otherwise the scores are materialised:
// softmax(q k^T / sqrt(d) + masks), dropout, times v, as PyTorch's
// multi_head_attention_forward.
#include <cmath>
#include <limits>

#include "kiln/attention.h"
#include "kiln/error.h"
#include "kiln/nn.h"

namespace kiln::nn {
namespace {

// The bool masks of one call as flex_attention's mask_mod: (b, h, q, kv)
// may be attended unless causal forbids it or a mask's entry is true.
// attn: (L, S) (matrix_stride 0) or (N * heads, L, S); padding: (N, S).
struct BoolMasks {
  const bool* attn = nullptr;
  const bool* padding = nullptr;
  int64_t matrix_stride = 0, heads = 1, S = 0;
  bool causal = false;
  bool operator()(int64_t b, int64_t h, int64_t q, int64_t kv) const {
    if (causal && kv > q) return false;
    if (attn && attn[(b * heads + h) * matrix_stride + q * S + kv]) return false;
    return !(padding && padding[b * S + kv]);
  }
};
// The float masks as a score_mod: their entries added to the score (no
// gradient flows to them).
struct FloatMasks {
  const double* attn = nullptr;
  const double* padding = nullptr;
  int64_t matrix_stride = 0, heads = 1, S = 0;
  template <class T>
  T operator()(T score, int64_t b, int64_t h, int64_t q, int64_t kv) const {
    double added = 0;
    if (attn) added += attn[(b * heads + h) * matrix_stride + q * S + kv];
    if (padding) added += padding[b * S + kv];
    return score + T(added);
  }
};

void check_mask_dtype(const Tensor& m, const char* name) {
  check(m.dtype() == kBool || is_floating(m.dtype()), "MultiheadAttention", "expected ", name,
        " of dtype bool or a floating dtype but got ", m.dtype());
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, double p, bool bias, bool bf)
    : out_proj(std::max<int64_t>(e, 1), std::max<int64_t>(e, 1), bias), embed_dim(e), num_heads(h),
      head_dim(h > 0 ? e / h : 0), dropout(p), batch_first(bf) {
  check(e > 0 && h > 0 && e % h == 0, "MultiheadAttention", "expected embed_dim (", e,
        ") divisible by a positive num_heads (", h, ")");
  check(p >= 0 && p <= 1, "MultiheadAttention", "expected a dropout probability in [0, 1] but got ", p);
  in_proj_weight = empty({3 * e, e});
  init::xavier_uniform_(in_proj_weight);
  register_parameter("in_proj_weight", &in_proj_weight);
  if (bias) {
    in_proj_bias = zeros({3 * e});
    register_parameter("in_proj_bias", &in_proj_bias);
    init::zeros_(out_proj.bias);
  }
  register_module("out_proj", &out_proj);
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const Tensor& key_padding_mask, bool need_weights,
                                                       const Tensor& attn_mask, bool average_attn_weights,
                                                       bool is_causal) {
  const char* op = "MultiheadAttention";
  const bool unbatched = query.dim() == 2;
  check((query.dim() == 3 || unbatched) && key.dim() == query.dim() && value.dim() == query.dim(), op,
        "expected query, key and value all 3-D (batched) or all 2-D (unbatched) but got ", shape_text(query.sizes()),
        ", ", shape_text(key.sizes()), ", ", shape_text(value.sizes()));
  auto batch_major = [&](const Tensor& t) { return unbatched ? t.unsqueeze(0) : batch_first ? t : t.transpose(0, 1); };
  const Tensor q_in = batch_major(query), k_in = batch_major(key), v_in = batch_major(value);
  const int64_t N = q_in.size(0), L = q_in.size(1), S = k_in.size(1), E = embed_dim, H = num_heads;
  check(q_in.size(2) == E && k_in.size(2) == E && v_in.size(2) == E, op, "expected inputs of embed_dim ", E,
        " features but got ", shape_text(query.sizes()), ", ", shape_text(key.sizes()), ", ", shape_text(value.sizes()));
  check(k_in.sizes() == v_in.sizes() && k_in.size(0) == N, op, "expected key and value of one shape and the query's ",
        "batch but got query ", shape_text(query.sizes()), ", key ", shape_text(key.sizes()), ", value ",
        shape_text(value.sizes()));
  // The masks in batched form: attn (L, S) or (N, H, L, S); padding (N, S).
  Tensor attn, padding;
  if (attn_mask.defined()) {
    check_mask_dtype(attn_mask, "attn_mask");
    const bool per_head = attn_mask.dim() == 3;
    check((attn_mask.dim() == 2 && attn_mask.size(0) == L && attn_mask.size(1) == S) ||
              (per_head && attn_mask.sizes() == Shape{N * H, L, S}),
          op, "expected attn_mask of shape (", L, ", ", S, ") or (", N * H, ", ", L, ", ", S, ") but got ",
          shape_text(attn_mask.sizes()));
    attn = per_head ? attn_mask.reshape({N, H, L, S}) : attn_mask;
  }
  if (key_padding_mask.defined()) {
    check_mask_dtype(key_padding_mask, "key_padding_mask");
    check(key_padding_mask.sizes() == (unbatched ? Shape{S} : Shape{N, S}), op, "expected key_padding_mask of shape ",
          unbatched ? shape_text(Shape{S}) : shape_text(Shape{N, S}), " but got ",
          shape_text(key_padding_mask.sizes()));
    padding = key_padding_mask.reshape({N, S});
  }
  // Projections, split into heads: (N, H, len, D).
  auto project = [&](const Tensor& x, int64_t part) {
    const Tensor b = in_proj_bias.defined() ? in_proj_bias.narrow(0, part * E, E) : Tensor();
    return linear(x, in_proj_weight.narrow(0, part * E, E), b).view({N, x.size(1), H, head_dim}).transpose(1, 2);
  };
  const Tensor q = project(q_in, 0), k = project(k_in, 1), v = project(v_in, 2);
  const bool drop = is_training() && dropout > 0;
  Tensor out, weights;
  if (!need_weights && !drop) {
    BoolMasks allowed;
    FloatMasks added;
    const Tensor attn_c = !attn.defined() ? Tensor() : attn.dtype() == kBool ? attn.contiguous() : attn.to(kFloat64).contiguous();
    const Tensor pad_c = !padding.defined() ? Tensor() : padding.dtype() == kBool ? padding.contiguous() : padding.to(kFloat64).contiguous();
    const int64_t stride = attn.defined() && attn.dim() == 4 ? L * S : 0;
    allowed.heads = added.heads = H, allowed.S = added.S = S, allowed.matrix_stride = added.matrix_stride = stride;
    allowed.causal = is_causal;
    if (attn_c.defined() && attn_c.dtype() == kBool) allowed.attn = attn_c.data_ptr<bool>();
    if (attn_c.defined() && attn_c.dtype() != kBool) added.attn = attn_c.data_ptr<double>();
    if (pad_c.defined() && pad_c.dtype() == kBool) allowed.padding = pad_c.data_ptr<bool>();
    if (pad_c.defined() && pad_c.dtype() != kBool) added.padding = pad_c.data_ptr<double>();
    const int64_t mask_batch = allowed.padding || stride ? N : 1, mask_heads = stride ? H : 1;
    const auto block_mask = create_block_mask(allowed, mask_batch, mask_heads, L, S, 128, q.device());
    out = flex_attention(q, k, v, added, block_mask).out;
  } else {
    const double neg_inf = -std::numeric_limits<double>::infinity();
    Tensor scores = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
    if (attn.defined())
      scores = attn.dtype() == kBool ? masked_fill(scores, attn, neg_inf) : scores + attn.to(scores.dtype());
    if (padding.defined()) {
      const Tensor p = padding.view({N, 1, 1, S});
      scores = padding.dtype() == kBool ? masked_fill(scores, p, neg_inf) : scores + p.to(scores.dtype());
    }
    if (is_causal) scores = masked_fill(scores, triu(ones({L, S}, kBool), 1), neg_inf);
    const Tensor probs = softmax(scores, -1);
    if (need_weights) weights = average_attn_weights ? probs.mean({1}) : probs;
    out = matmul(drop ? nn::dropout(probs, dropout, true) : probs, v);
  }
  Tensor y = out_proj(out.transpose(1, 2).reshape({N, L, E}));
  if (unbatched) return {y.squeeze(0), weights.defined() ? weights.squeeze(0) : weights};
  return {batch_first ? y : y.transpose(0, 1), weights};
}

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions o)
    : self_attn(d_model, nhead, o.dropout, o.bias, o.batch_first),
      linear1(d_model, std::max<int64_t>(o.dim_feedforward, 1), o.bias),
      linear2(std::max<int64_t>(o.dim_feedforward, 1), d_model, o.bias),
      norm1(d_model, o.layer_norm_eps),
      norm2(d_model, o.layer_norm_eps),
      options(std::move(o)) {
  check(options.activation == "relu" || options.activation == "gelu", "TransformerEncoderLayer",
        "expected activation 'relu' or 'gelu' but got '", options.activation, "'");
  check(options.dim_feedforward > 0, "TransformerEncoderLayer", "expected a positive dim_feedforward but got ",
        options.dim_feedforward);
  if (!options.bias) norm1.bias = Tensor(), norm2.bias = Tensor();  // PyTorch's LayerNorm(bias=False)
  register_module("self_attn", &self_attn);
  register_module("linear1", &linear1);
  register_module("linear2", &linear2);
  register_module("norm1", &norm1);
  register_module("norm2", &norm2);
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  const Tensor h = linear1(x);
  const Tensor a = options.activation == "relu" ? relu(h) : gelu(h);
  return nn::dropout(linear2(nn::dropout(a, options.dropout, is_training())), options.dropout, is_training());
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) {
  auto attend = [&](const Tensor& x) {
    const Tensor a = std::get<0>(self_attn.forward(x, x, x, src_key_padding_mask, false, src_mask, true, is_causal));
    return nn::dropout(a, options.dropout, is_training());
  };
  if (options.norm_first) {
    const Tensor x = src + attend(norm1(src));
    return x + feed_forward(norm2(x));
  }
  const Tensor x = norm1(src + attend(src));
  return norm2(x + feed_forward(x));
}

TransformerEncoder::TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                                       TransformerEncoderLayerOptions options, bool final_norm) {
  check(num_layers >= 1, "TransformerEncoder", "expected at least one layer but got ", num_layers);
  for (int64_t i = 0; i < num_layers; ++i) layers.push_back(std::make_shared<TransformerEncoderLayer>(d_model, nhead, options));
  register_module("layers", &layers);
  if (final_norm) {
    norm = std::make_shared<LayerNorm>(d_model, options.layer_norm_eps);
    register_module("norm", norm.get());
  }
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                   bool is_causal) {
  Tensor x = src;
  for (auto& layer : layers) x = layer->forward(x, mask, src_key_padding_mask, is_causal);
  return norm ? (*norm)(x) : x;
}

}  // namespace kiln::nn
