// A GPT (token + position embeddings, pre-norm transformer blocks with
// causal self-attention and a GELU MLP, final LayerNorm, head tied to the
// token embedding), written against plain ops; attention is flex_attention
// (plain ops when attention dropout is on in training).
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <map>
#include <string>

#include "kiln/distributed.h"
#include "kiln/moe.h"
#include "kiln/nn.h"

namespace kiln::nn {

struct GPTConfig {
  int64_t vocab_size = 256;
  int64_t block_size = 128;  // context length
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  // > 0: each block's MLP is a mixture of this many experts (nn::MoE, each
  // expert the MLP's shape), of which every token uses expert_top_k.
  int64_t n_experts = 0;
  int64_t expert_top_k = 2;
};

// Keys and values of the positions seen so far, per layer, for generation:
// each new token costs one decode step instead of a recompute of the prefix.
struct KVCache {
  std::vector<Tensor> k, v;  // per layer (B, H, block_size, D)
  int64_t len = 0;           // positions filled
};

class CausalSelfAttention : public UnaryModule {
 public:
  explicit CausalSelfAttention(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  // x holds positions cache.len .. cache.len + T - 1; appends their k, v to
  // layer `layer` of the cache and attends (flex_attention) over all so far.
  Tensor forward_cached(const Tensor& x, KVCache& cache, size_t layer);
  Linear qkv, proj;

 private:
  int64_t n_head_;
  double dropout_;
  int64_t block_size_;
};

class MLP : public UnaryModule {
 public:
  explicit MLP(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;
  Linear fc, proj;
};

class Block : public UnaryModule {
 public:
  // expert_group: the ranks the experts are sharded over (n_experts > 0).
  explicit Block(const GPTConfig& c, distributed::ProcessGroup* expert_group = nullptr);
  Tensor forward(const Tensor& x) override;
  Tensor forward_cached(const Tensor& x, KVCache& cache, size_t layer);
  LayerNorm ln1;
  CausalSelfAttention attn;
  LayerNorm ln2;
  std::unique_ptr<MLP> mlp;  // n_experts == 0
  std::unique_ptr<MoE> moe;  // n_experts > 0, registered as "mlp" too
};

class GPT : public Module {
 public:
  // expert_group: shards the experts of a mixture-of-experts GPT over its
  // ranks (null: every expert here).
  explicit GPT(const GPTConfig& c, distributed::ProcessGroup* expert_group = nullptr);
  // idx (B, T) int64 with T <= block_size -> logits (B, T, vocab_size).
  Tensor forward(const Tensor& idx);
  // Logits of the new positions idx (B, T) that follow the cache's contents
  // (inference: runs without recording gradients).
  Tensor forward_cached(const Tensor& idx, KVCache& cache);
  // Appends `tokens` sampled tokens to idx (B, T). temperature 0 is greedy;
  // top_k 0 samples from the whole distribution. With use_cache, each token
  // is one decode step over the KV cache; once the context is full, each step
  // rebuilds the cache from the last block_size tokens (the window the
  // uncached path sees), so both paths give the same tokens.
  Tensor generate(Tensor idx, int64_t tokens, double temperature = 1.0, int64_t top_k = 0, bool use_cache = true);
  const GPTConfig& config() const { return cfg_; }
  // The state_dict's names and shapes for config c, computed without building
  // the model: a loader checks a checkpoint against them before allocating
  // anything (a test pins them to a real model's state_dict).
  static std::map<std::string, Shape> state_shapes(const GPTConfig& c);

  Embedding wte, wpe;
  ModuleList<Block> blocks;
  LayerNorm ln_f;

 private:
  GPTConfig cfg_;
};

}  // namespace kiln::nn

KILN_API_END
