// Optimizers (SGD, AdamW), gradient clipping and the warmup + cosine LR
// schedule, with PyTorch's update rules.
#pragma once
#include <vector>

#include "kiln/nn.h"

namespace kiln::optim {

class Optimizer {
 public:
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad();
  // State as tensors by name ("step", "0.exp_avg", ...), for checkpoints.
  virtual nn::StateDict state_dict() const = 0;
  virtual void load_state_dict(const nn::StateDict& state) = 0;
  double lr;

 protected:
  std::vector<Tensor> params_;
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 private:
  SGDOptions opt_;
  std::vector<Tensor> momentum_;  // undefined until the first step
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
  void step() override;
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;
  int64_t steps() const { return step_; }

 private:
  AdamWOptions opt_;
  int64_t step_ = 0;
  std::vector<Tensor> exp_avg_, exp_avg_sq_, max_exp_avg_sq_;
};

// Scales gradients so their global 2-norm is at most max_norm; returns the
// norm before clipping (a float64 0-dim tensor, as PyTorch returns a tensor:
// reading it is left to the caller).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// Linear warmup from 0 to base_lr over `warmup` steps, then cosine decay to
// min_lr at `total` steps (and min_lr after).
double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double base_lr, double min_lr);

}  // namespace kiln::optim
