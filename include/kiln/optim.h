// Optimizers (SGD, Adam, AdamW, Adamax, NAdam, RAdam, RMSprop, Adagrad) with parameter groups,
// gradient clipping and the warmup + cosine LR schedule, with PyTorch's
// update rules. Learning-rate schedulers: kiln/lr_scheduler.h.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn.h"

namespace kiln::optim {

// A parameter group, as PyTorch's param_groups entries: tensors and their
// hyperparameters by PyTorch's names ("lr", "weight_decay", "momentum",
// "eps", ...; Adam's betas as "beta1" and "beta2"; flags as 0 or 1). Options
// a group leaves out come from the optimizer's defaults when it is added.
struct ParamGroup {
  ParamGroup(std::vector<Tensor> params, std::map<std::string, double> options = {})
      : params(std::move(params)), options(std::move(options)) {}
  std::vector<Tensor> params;
  std::map<std::string, double> options;
  // An option of the group (a kiln::Error naming the known ones if absent).
  double& operator[](const std::string& name);
  double operator[](const std::string& name) const;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // Gradients to none (PyTorch's default), or to zero in place.
  void zero_grad(bool set_to_none = true);
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  void add_param_group(ParamGroup group);
  const std::map<std::string, double>& defaults() const { return defaults_; }
  // The learning rate of group 0 / of every group.
  double lr() const { return groups_.at(0)["lr"]; }
  void set_lr(double lr);
  // PyTorch's layout as tensors by name: "state.<i>.<name>" for parameter i
  // (numbered across the groups in order; "step" counts its updates) and
  // "param_groups.<g>.<option>" (0-dim float64) with "param_groups.<g>.params"
  // (the group's parameter numbers). load_state_dict checks that the groups
  // and shapes match.
  virtual nn::StateDict state_dict() const;
  virtual void load_state_dict(const nn::StateDict& state);

 protected:
  Optimizer(std::string name, std::vector<ParamGroup> groups, std::map<std::string, double> defaults);
  // Refuses a group whose options are out of range (add_param_group calls
  // it; derived constructors call it for the groups they are built with).
  virtual void check_group(const ParamGroup& group) const = 0;
  // Per parameter, numbered across groups: its state tensors by name
  // (PyTorch's optimizer.state[p]) and the updates it has had.
  struct ParamState {
    std::map<std::string, Tensor> tensors;
    int64_t step = 0;
  };
  // f(group, param, state) for every parameter that has a gradient.
  void for_each_param_with_grad(const std::function<void(const ParamGroup&, const Tensor&, ParamState&)>& f);
  std::string name_;
  std::vector<ParamGroup> groups_;
  std::vector<ParamState> state_;

 private:
  void add_group(ParamGroup group);  // add_param_group without check_group
  std::map<std::string, double> defaults_;
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
  SGD(std::vector<ParamGroup> groups, SGDOptions defaults);
  void step() override;

 private:
  void check_group(const ParamGroup& group) const override;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
};
struct AdamWOptions {  // AdamOptions with PyTorch's AdamW default weight decay
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

// Adam: weight decay is added to the gradient (L2); AdamW decouples it
// (the parameter shrinks by lr * weight_decay before the update).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  Adam(std::vector<ParamGroup> groups, AdamOptions defaults);
  void step() override;
  int64_t steps() const;  // updates of the first parameter

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions defaults, bool decoupled);

 private:
  void check_group(const ParamGroup& group) const override;
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
  AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults);
};

// Adamax: the second moment is an exponentially weighted infinity norm,
// max(beta2 u, |g| + eps).
struct AdamaxOptions {
  double lr = 2e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};
class Adamax : public Optimizer {
 public:
  Adamax(std::vector<Tensor> params, AdamaxOptions options);
  Adamax(std::vector<ParamGroup> groups, AdamaxOptions defaults);
  void step() override;

 private:
  void check_group(const ParamGroup& group) const override;
};

// NAdam: Adam with Nesterov momentum and its momentum-decay schedule
// (state "mu_product" beside the moments, as PyTorch's).
struct NAdamOptions {
  double lr = 2e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum_decay = 4e-3;
  bool decoupled_weight_decay = false;
};
class NAdam : public Optimizer {
 public:
  NAdam(std::vector<Tensor> params, NAdamOptions options);
  NAdam(std::vector<ParamGroup> groups, NAdamOptions defaults);
  void step() override;

 private:
  void check_group(const ParamGroup& group) const override;
};

// RAdam: Adam whose adaptive step is rectified by its variance, and plain
// momentum while that is undefined (the first few steps).
struct RAdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;
};
class RAdam : public Optimizer {
 public:
  RAdam(std::vector<Tensor> params, RAdamOptions options);
  RAdam(std::vector<ParamGroup> groups, RAdamOptions defaults);
  void step() override;

 private:
  void check_group(const ParamGroup& group) const override;
};

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
};

class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options);
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions defaults);
  void step() override;

 private:
  void check_group(const ParamGroup& group) const override;
};

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
};

class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> params, AdagradOptions options);
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions defaults);
  void step() override;

 private:
  void check_group(const ParamGroup& group) const override;
};

// L-BFGS (PyTorch's torch.optim.LBFGS): each step(closure) runs up to
// max_iter quasi-Newton iterations, the direction from the last
// history_size curvature pairs, with a fixed step (lr; the first
// iteration's scaled by 1 / |g|_1) or a strong-Wolfe line search. The
// closure clears the gradients, computes the loss, calls backward and
// returns the loss; step returns its first value. One parameter group.
struct LBFGSOptions {
  double lr = 1;
  int64_t max_iter = 20;
  std::optional<int64_t> max_eval;  // default max_iter * 5 / 4
  double tolerance_grad = 1e-7;
  double tolerance_change = 1e-9;
  int64_t history_size = 100;
  std::string line_search_fn;  // "" (none) or "strong_wolfe"
};
class LBFGS : public Optimizer {
 public:
  LBFGS(std::vector<Tensor> params, LBFGSOptions options = {});
  Tensor step(const std::function<Tensor()>& closure);
  void step() override;  // an error: L-BFGS re-evaluates the loss
  // The base layout plus the algorithm's state as "state.0.<name>" (PyTorch
  // keeps it on the first parameter): d, t, old_dirs and old_stps (stacked,
  // history x n), ro, H_diag, prev_flat_grad, prev_loss, func_evals, n_iter.
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 private:
  void check_group(const ParamGroup& group) const override;
  Tensor gather_flat_grad() const;
  void add_to_params(double t, const Tensor& d);
  void set_params(const std::vector<Tensor>& x);
  struct Evaluation {
    double loss;
    Tensor flat_grad;
  };
  Evaluation evaluate_at(const std::function<Tensor()>& closure, const std::vector<Tensor>& x, double t,
                         const Tensor& d);
  struct LineSearchResult {
    double loss;
    Tensor flat_grad;
    double t;
    int64_t evals;
  };
  LineSearchResult strong_wolfe(const std::function<Tensor()>& closure, const std::vector<Tensor>& x, double t,
                                const Tensor& d, double loss, const Tensor& flat_grad, double gtd);
  std::string line_search_fn_;
  // The algorithm's state between steps.
  Tensor d_, prev_flat_grad_;
  double t_ = 0, H_diag_ = 1, prev_loss_ = 0;
  std::vector<Tensor> old_dirs_, old_stps_;
  std::vector<double> ro_;
  int64_t func_evals_ = 0, n_iter_ = 0;
};

// Clamps every gradient to [-clip_value, clip_value] in place.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

// Scales gradients so their global 2-norm is at most max_norm; returns the
// norm before clipping (a float64 0-dim tensor, as PyTorch returns a tensor:
// reading it is left to the caller).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// Linear warmup from 0 to base_lr over `warmup` steps, then cosine decay to
// min_lr at `total` steps (and min_lr after).
double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double base_lr, double min_lr);

}  // namespace kiln::optim

KILN_API_END
