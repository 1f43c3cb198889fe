// The GPT of the main job (`kiln train` / `kiln generate`), GPT-2 style
// initialisation: N(0, 0.02) weights, output projections scaled by
// 1/sqrt(2 * n_layer), zero biases.
#include "kiln/gpt.h"

#include <cmath>
#include <limits>

#include "kiln/attention.h"
#include "kiln/autograd.h"
#include "kiln/error.h"

namespace kiln::nn {
namespace {

// Block size of the causal block mask. At the default context of 128,
// blocks of 64 skip one of the 4 block pairs and, inside the two diagonal
// ones, the 32 x 32 tiles above the diagonal (Note [Tiles of a partial
// block]): the same 10 of 16 tiles as blocks of 32, in fewer, larger
// products, measured faster alone and in the training step (alternating
// builds; the figures are in this line's commit).
constexpr int64_t kAttentionBlock = 64;

// Every field in range before any member is built from it (a zero n_head
// used to divide by zero, a negative n_layer to build nothing).
const GPTConfig& validated(const GPTConfig& c) {
  check(c.vocab_size >= 1, "GPT", "vocab_size must be >= 1 but got ", c.vocab_size);
  check(c.block_size >= 1, "GPT", "block_size must be >= 1 but got ", c.block_size);
  check(c.n_layer >= 0, "GPT", "n_layer must be >= 0 but got ", c.n_layer);
  check(c.n_head >= 1, "GPT", "n_head must be >= 1 but got ", c.n_head);
  check(c.n_embd >= 1, "GPT", "n_embd must be >= 1 but got ", c.n_embd);
  check(c.n_embd % c.n_head == 0, "GPT", "n_embd (", c.n_embd, ") must be a multiple of n_head (", c.n_head, ")");
  check(c.dropout >= 0 && c.dropout < 1, "GPT", "dropout must be in [0, 1) but got ", c.dropout);
  check(c.n_experts >= 0, "GPT", "n_experts must be >= 0 but got ", c.n_experts);
  check(c.n_experts == 0 || (c.expert_top_k >= 1 && c.expert_top_k <= c.n_experts), "GPT", "expert_top_k ",
        c.expert_top_k, " must be in [1, n_experts = ", c.n_experts, "]");
  return c;
}

void gpt2_init(Linear& l, double std) {
  init::normal_(l.weight, 0.0, std);
  if (l.bias.defined()) init::zeros_(l.bias);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c)
    : qkv(validated(c).n_embd, 3 * c.n_embd), proj(c.n_embd, c.n_embd), n_head_(c.n_head), dropout_(c.dropout),
      block_size_(c.block_size) {
  register_module("qkv", &qkv);
  register_module("proj", &proj);
  gpt2_init(qkv, 0.02);
  gpt2_init(proj, 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer)));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_, D = C / H;
  const Tensor h = qkv(x);  // (B, T, 3C)
  auto heads = [&](int64_t i) { return h.narrow(2, i * C, C).view({B, T, H, D}).transpose(1, 2); };
  const Tensor q = heads(0), k = heads(1), v = heads(2);  // (B, H, T, D), strided views
  if (dropout_ == 0.0 || !is_training()) {
    // flex_attention never materialises the (T, T) scores; it has no
    // attention dropout (neither has PyTorch's), so dropout > 0 in training
    // takes the plain-op path below.
    const auto mask = create_block_mask(CausalMask{}, 1, 1, T, T, kAttentionBlock, x.device());
    const Tensor y = flex_attention(q, k, v, NoScoreMod{}, mask).out.transpose(1, 2).reshape({B, T, C});
    return proj(y);
  }
  Tensor att = matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(D)));
  att = masked_fill(att, triu(ones({T, T}, x.device()), 1) > 0, -std::numeric_limits<double>::infinity());
  att = dropout(softmax(att, -1), dropout_, is_training());
  const Tensor y = matmul(att, v).transpose(1, 2).reshape({B, T, C});
  return dropout(proj(y), dropout_, is_training());
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, KVCache& cache, size_t layer) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_, D = C / H;
  const int64_t start = cache.len, block = block_size_;
  check(start + T <= block, "GPT", "KV cache holds ", block, " positions but ", start + T, " were asked");
  if (cache.k.size() <= layer) {
    cache.k.resize(layer + 1), cache.v.resize(layer + 1);
    cache.k[layer] = zeros({B, H, block, D}, x.options());
    cache.v[layer] = zeros({B, H, block, D}, x.options());
  }
  const Tensor h = qkv(x);
  auto heads = [&](int64_t i) { return h.narrow(2, i * C, C).view({B, T, H, D}).transpose(1, 2); };
  cache.k[layer].narrow(2, start, T).copy_(heads(1));
  cache.v[layer].narrow(2, start, T).copy_(heads(2));
  const Tensor k = cache.k[layer].narrow(2, 0, start + T), v = cache.v[layer].narrow(2, 0, start + T);
  // Query i sits at position start + i.
  const auto mask = create_block_mask([start](int64_t, int64_t, int64_t q, int64_t kv) { return start + q >= kv; }, 1,
                                      1, T, start + T);
  const Tensor y = flex_attention(heads(0), k, v, NoScoreMod{}, mask).out.transpose(1, 2).reshape({B, T, C});
  return proj(y);
}

MLP::MLP(const GPTConfig& c) : fc(c.n_embd, 4 * c.n_embd), proj(4 * c.n_embd, c.n_embd) {
  register_module("fc", &fc);
  register_module("proj", &proj);
  gpt2_init(fc, 0.02);
  gpt2_init(proj, 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer)));
}

Tensor MLP::forward(const Tensor& x) { return proj(gelu(fc(x), "tanh")); }

Block::Block(const GPTConfig& c, distributed::ProcessGroup* expert_group) : ln1(c.n_embd), attn(c), ln2(c.n_embd) {
  register_module("ln1", &ln1);
  register_module("attn", &attn);
  register_module("ln2", &ln2);
  if (c.n_experts == 0) {
    mlp = std::make_unique<MLP>(c);
    register_module("mlp", mlp.get());
    return;
  }
  // Each expert initialised as the MLP is.
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  moe = std::make_unique<MoE>(c.n_embd, c.n_experts, c.expert_top_k, 4 * c.n_embd, expert_group, [&](Expert& e) {
    gpt2_init(e.up, 0.02);
    gpt2_init(e.down, proj_std);
  });
  register_module("mlp", moe.get());
}

Tensor Block::forward(const Tensor& x) {
  const Tensor h = x + attn(ln1(x));
  const Tensor n = ln2(h);
  return h + (mlp ? (*mlp)(n) : (*moe)(n));
}

Tensor Block::forward_cached(const Tensor& x, KVCache& cache, size_t layer) {
  const Tensor h = x + attn.forward_cached(ln1(x), cache, layer);
  const Tensor n = ln2(h);
  return h + (mlp ? (*mlp)(n) : (*moe)(n));
}

GPT::GPT(const GPTConfig& c, distributed::ProcessGroup* expert_group) : wte(validated(c).vocab_size, c.n_embd), wpe(c.block_size, c.n_embd), ln_f(c.n_embd), cfg_(c) {
  register_module("wte", &wte);
  register_module("wpe", &wpe);
  for (int64_t i = 0; i < c.n_layer; ++i) blocks.push_back(std::make_shared<Block>(c, expert_group));
  register_module("blocks", &blocks);
  register_module("ln_f", &ln_f);
  init::normal_(wte.weight, 0.0, 0.02);
  init::normal_(wpe.weight, 0.0, 0.02);
}

std::map<std::string, Shape> GPT::state_shapes(const GPTConfig& cfg) {
  const GPTConfig& c = validated(cfg);
  const int64_t C = c.n_embd;
  std::map<std::string, Shape> s{{"wte.weight", {c.vocab_size, C}}, {"wpe.weight", {c.block_size, C}},
                                 {"ln_f.weight", {C}}, {"ln_f.bias", {C}}};
  const std::pair<const char*, Shape> block[] = {
      {"ln1.weight", {C}}, {"ln1.bias", {C}}, {"ln2.weight", {C}}, {"ln2.bias", {C}},
      {"attn.qkv.weight", {3 * C, C}}, {"attn.qkv.bias", {3 * C}}, {"attn.proj.weight", {C, C}},
      {"attn.proj.bias", {C}}};
  const std::pair<const char*, Shape> mlp[] = {
      {"fc.weight", {4 * C, C}}, {"fc.bias", {4 * C}}, {"proj.weight", {C, 4 * C}}, {"proj.bias", {C}}};
  const std::pair<const char*, Shape> expert[] = {
      {"up.weight", {4 * C, C}}, {"up.bias", {4 * C}}, {"down.weight", {C, 4 * C}}, {"down.bias", {C}}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (const auto& [name, shape] : block) s.emplace(b + name, shape);
    if (c.n_experts == 0)
      for (const auto& [name, shape] : mlp) s.emplace(b + "mlp." + name, shape);
    else
      s.emplace(b + "mlp.router.weight", Shape{c.n_experts, C});
    for (int64_t e = 0; e < c.n_experts; ++e)
      for (const auto& [name, shape] : expert) s.emplace(b + "mlp.experts." + std::to_string(e) + "." + name, shape);
  }
  return s;
}

Tensor GPT::forward(const Tensor& idx) {
  check(idx.dim() == 2, "GPT", "expected token ids of shape (B, T) but got ", idx.dim(), " dims");
  const int64_t T = idx.size(1);
  check(T <= cfg_.block_size, "GPT", "sequence length ", T, " exceeds block_size ", cfg_.block_size);
  Tensor x = wte(idx) + wpe(arange(T, TensorOptions(kInt64).device(idx.device())));
  for (auto& b : blocks) x = b->forward(x);
  return matmul(ln_f(x), wte.weight.t());  // the head shares the token embedding
}

Tensor GPT::forward_cached(const Tensor& idx, KVCache& cache) {
  NoGradGuard no_grad;  // generation only: the cache is written in place
  const int64_t T = idx.size(1);
  Tensor x = wte(idx) + wpe(arange(cache.len, cache.len + T, 1, TensorOptions(kInt64).device(idx.device())));
  for (size_t l = 0; l < blocks.size(); ++l) x = blocks[l].forward_cached(x, cache, l);
  cache.len += T;
  return matmul(ln_f(x), wte.weight.t());
}

Tensor GPT::generate(Tensor idx, int64_t tokens, double temperature, int64_t top_k, bool use_cache) {
  NoGradGuard no_grad;
  KVCache cache;
  for (int64_t i = 0; i < tokens; ++i) {
    const int64_t T = idx.size(1);
    Tensor logits;
    if (use_cache) {
      if (cache.len == 0 || cache.len >= cfg_.block_size) {
        // (Re)fill the cache from the window the next step may see.
        cache = KVCache{};
        const Tensor ctx = T > cfg_.block_size ? idx.slice(1, T - cfg_.block_size) : idx;
        logits = forward_cached(ctx, cache).select(1, -1);
      } else {
        logits = forward_cached(idx.slice(1, T - 1), cache).select(1, -1);
      }
    } else {
      const Tensor ctx = T > cfg_.block_size ? idx.slice(1, T - cfg_.block_size) : idx;
      logits = forward(ctx).select(1, -1);  // (B, V)
    }
    Tensor next;
    if (temperature <= 0) {
      next = argmax(logits, -1, true);
    } else {
      // Shifted by the largest logit first: at a temperature so small that
      // logit / temperature overflows (below about 1e-37), the largest is 0
      // and the rest -inf, which samples greedily, where inf - inf would give
      // softmax NaN.
      logits = (logits - amax(logits, {-1}, true)) / temperature;
      if (top_k > 0 && top_k < logits.size(-1)) {
        const Tensor kth = std::get<0>(topk(logits, top_k, -1)).narrow(-1, top_k - 1, 1);
        logits = masked_fill(logits, logits < kth, -std::numeric_limits<double>::infinity());
      }
      next = multinomial(softmax(logits, -1), 1, true);
    }
    idx = cat({idx, next}, 1);
  }
  return idx;
}

}  // namespace kiln::nn
