// Learning-rate schedulers, as torch.optim.lr_scheduler: each sets the lr of
// every parameter group of its optimizer from that group's initial lr and
// the epoch count. Construction applies epoch 0; step() advances one epoch.
// The closed forms are used (PyTorch's chained forms give the same values
// when nothing else changes the lr). state_dict holds the epoch and the
// base lrs (and the plateau scheduler's counters) as tensors.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim.h"

namespace kiln::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  void step();
  int64_t last_epoch() const { return last_epoch_; }
  std::vector<double> get_last_lr() const { return last_lr_; }
  // The lr of a group whose initial lr is base_lr, at `epoch` (>= 0).
  virtual double lr_at(double base_lr, int64_t epoch) const = 0;
  virtual nn::StateDict state_dict() const;
  virtual void load_state_dict(const nn::StateDict& state);
  Optimizer& optimizer() const { return *optimizer_; }

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  void apply(int64_t epoch);  // sets every group's lr for `epoch`
  // Called by the derived constructor: records each group's initial lr and applies epoch 0.
  void start();
  Optimizer* optimizer_;
  std::vector<double> base_lrs_, last_lr_;
  int64_t last_epoch_ = -1;
};

// lr * gamma^floor(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr * gamma^(milestones passed)
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// lr * gamma^epoch
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  double gamma_;
};

// eta_min + (lr - eta_min) (1 + cos(pi epoch / T_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// lr * factor, the factor linear from start_factor to end_factor over
// total_iters epochs, then end_factor.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  double start_, end_;
  int64_t total_;
};

// lr * lambda(epoch)
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  std::function<double(int64_t)> lambda_;
};

// The 1cycle policy: from max_lr / div_factor up to max_lr over the first
// pct_start of total_steps, then down to that / final_div_factor (cosine or
// linear). Ignores the groups' own lrs (as PyTorch's). Stepping past
// total_steps is an error.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, double pct_start = 0.3,
             const std::string& anneal_strategy = "cos", double div_factor = 25.0, double final_div_factor = 1e4,
             bool three_phase = false);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  struct Phase {
    double end_step, start_lr, end_lr;
  };
  std::vector<Phase> phases_;
  int64_t total_;
  bool cos_;
};

// Runs `schedulers` one after another, switching at the milestones (epochs);
// each starts from its own epoch 0.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Multiplies every lr by `factor` when the metric given to step() has not
// improved for more than `patience` epochs (then waits `cooldown` epochs).
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, const std::string& mode = "min", double factor = 0.1, int64_t patience = 10,
                    double threshold = 1e-4, const std::string& threshold_mode = "rel", int64_t cooldown = 0,
                    double min_lr = 0.0, double eps = 1e-8);
  void step(double metric);
  std::vector<double> get_last_lr() const;
  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);

 private:
  bool better(double a) const;
  Optimizer* optimizer_;
  bool max_mode_, rel_;
  double factor_, threshold_, min_lr_, eps_;
  int64_t patience_, cooldown_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace kiln::optim

KILN_API_END
