// A GPT (token + position embeddings, pre-norm transformer blocks with
// causal self-attention and a GELU MLP, final LayerNorm, head tied to the
// token embedding), written against plain ops.
#pragma once
#include <string>

#include "kiln/nn.h"

namespace kiln::nn {

struct GPTConfig {
  int64_t vocab_size = 256;
  int64_t block_size = 128;  // context length
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
};

class CausalSelfAttention : public UnaryModule {
 public:
  explicit CausalSelfAttention(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  Linear qkv, proj;

 private:
  int64_t n_head_;
  double dropout_;
  Tensor causal_;  // (block, block) bool, true above the diagonal
};

class MLP : public UnaryModule {
 public:
  explicit MLP(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;
  Linear fc, proj;
};

class Block : public UnaryModule {
 public:
  explicit Block(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;
  LayerNorm ln1;
  CausalSelfAttention attn;
  LayerNorm ln2;
  MLP mlp;
};

class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& c);
  // idx (B, T) int64 with T <= block_size -> logits (B, T, vocab_size).
  Tensor forward(const Tensor& idx);
  // Appends `tokens` sampled tokens to idx (B, T). temperature 0 is greedy;
  // top_k 0 samples from the whole distribution.
  Tensor generate(Tensor idx, int64_t tokens, double temperature = 1.0, int64_t top_k = 0);
  const GPTConfig& config() const { return cfg_; }

  Embedding wte, wpe;
  ModuleList<Block> blocks;
  LayerNorm ln_f;

 private:
  GPTConfig cfg_;
};

}  // namespace kiln::nn
