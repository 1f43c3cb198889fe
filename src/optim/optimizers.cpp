// SGD and AdamW, updating parameters in place without recording history.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/optim.h"

namespace kiln::optim {
namespace {

// Loads tensor `key` of a state dict into `slot` (which may be undefined).
void load_slot(const nn::StateDict& s, const std::string& key, Tensor& slot, const Tensor& param) {
  auto it = s.find(key);
  if (it == s.end()) {
    slot = Tensor();
    return;
  }
  check(it->second.sizes() == param.sizes(), "load_state_dict", "optimizer state '", key,
        "' does not match its parameter's shape");
  slot = it->second.to(param.dtype()).clone();
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double learning_rate) : lr(learning_rate), params_(std::move(params)) {
  check(lr >= 0, "optimizer", "invalid learning rate ", lr);
  for (const Tensor& p : params_)
    check(p.requires_grad(), "optimizer", "can only optimize tensors that require grad");
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.set_grad(Tensor());
}

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : Optimizer(std::move(params), o.lr), opt_(o) {
  check(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD",
        "nesterov momentum requires a momentum and zero dampening");
  momentum_.resize(params_.size());
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (opt_.weight_decay != 0) g = g + p * opt_.weight_decay;
    if (opt_.momentum != 0) {
      Tensor& buf = momentum_[i];
      if (!buf.defined()) buf = g.clone();
      else buf.mul_(opt_.momentum).add_(g, 1 - opt_.dampening);
      g = opt_.nesterov ? g + buf * opt_.momentum : buf;
    }
    p.sub_(g, lr);
  }
}

nn::StateDict SGD::state_dict() const {
  nn::StateDict s;
  for (size_t i = 0; i < momentum_.size(); ++i)
    if (momentum_[i].defined()) s.emplace(std::to_string(i) + ".momentum_buffer", momentum_[i]);
  return s;
}

void SGD::load_state_dict(const nn::StateDict& s) {
  for (size_t i = 0; i < params_.size(); ++i) load_slot(s, std::to_string(i) + ".momentum_buffer", momentum_[i], params_[i]);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o) : Optimizer(std::move(params), o.lr), opt_(o) {
  check(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "AdamW", "invalid betas (", o.beta1, ", ",
        o.beta2, ")");
  check(o.eps >= 0, "AdamW", "invalid epsilon ", o.eps);
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  max_exp_avg_sq_.resize(params_.size());
}

void AdamW::step() {
  NoGradGuard no_grad;
  ++step_;
  const double bc1 = 1 - std::pow(opt_.beta1, static_cast<double>(step_));
  const double bc2 = 1 - std::pow(opt_.beta2, static_cast<double>(step_));
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros_like(p);
      exp_avg_sq_[i] = zeros_like(p);
      if (opt_.amsgrad) max_exp_avg_sq_[i] = zeros_like(p);
    }
    p.mul_(1 - lr * opt_.weight_decay);  // decoupled weight decay
    exp_avg_[i].mul_(opt_.beta1).add_(g, 1 - opt_.beta1);
    exp_avg_sq_[i].mul_(opt_.beta2).add_(g * g, 1 - opt_.beta2);
    Tensor second = exp_avg_sq_[i];
    if (opt_.amsgrad) {
      max_exp_avg_sq_[i].copy_(maximum(max_exp_avg_sq_[i], exp_avg_sq_[i]));
      second = max_exp_avg_sq_[i];
    }
    const Tensor denom = sqrt(second) / std::sqrt(bc2) + opt_.eps;
    // The step size as a number operand, not an alpha attribute: it changes
    // every step, and kiln::compile reads numbers per call but keys on attributes.
    p.sub_(exp_avg_[i] / denom * (lr / bc1));
  }
}

nn::StateDict AdamW::state_dict() const {
  nn::StateDict s;
  s.emplace("step", scalar_tensor(step_, kInt64));
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string k = std::to_string(i);
    if (exp_avg_[i].defined()) s.emplace(k + ".exp_avg", exp_avg_[i]);
    if (exp_avg_sq_[i].defined()) s.emplace(k + ".exp_avg_sq", exp_avg_sq_[i]);
    if (max_exp_avg_sq_[i].defined()) s.emplace(k + ".max_exp_avg_sq", max_exp_avg_sq_[i]);
  }
  return s;
}

void AdamW::load_state_dict(const nn::StateDict& s) {
  auto it = s.find("step");
  check(it != s.end(), "load_state_dict", "AdamW state has no 'step'");
  step_ = it->second.item<int64_t>();
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string k = std::to_string(i);
    load_slot(s, k + ".exp_avg", exp_avg_[i], params_[i]);
    load_slot(s, k + ".exp_avg_sq", exp_avg_sq_[i], params_[i]);
    load_slot(s, k + ".max_exp_avg_sq", max_exp_avg_sq_[i], params_[i]);
  }
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  // As PyTorch: each gradient's norm in its own dtype, then the norm of
  // those norms, and the gradients scaled by min(1, max_norm / norm) as a
  // tensor: nothing is read back, so a compiled training step keeps the
  // clipping in its graph.
  std::vector<Tensor> norms;
  for (const Tensor& p : params)
    if (p.grad().defined()) norms.push_back(norm(p.grad()).to(kFloat64));
  if (norms.empty()) return zeros({}, kFloat64);
  const Tensor total = norm(stack(norms));
  const Tensor scale = clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  for (const Tensor& p : params)
    if (p.grad().defined()) p.grad().mul_(scale);
  return total;
}

double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double base_lr, double min_lr) {
  if (warmup > 0 && step < warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(total - warmup, 1));
  return min_lr + 0.5 * (base_lr - min_lr) * (1 + std::cos(M_PI * progress));
}

}  // namespace kiln::optim
