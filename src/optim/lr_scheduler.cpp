// Learning-rate schedulers (kiln/lr_scheduler.h), PyTorch's formulas in
// closed form.
#include "kiln/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/error.h"

namespace kiln::optim {
namespace {

Tensor doubles(const std::vector<double>& v) { return tensor<double>(std::vector<double>(v)); }

std::vector<double> read_doubles(const nn::StateDict& s, const std::string& key, const char* op) {
  auto it = s.find(key);
  check(it != s.end(), op, "scheduler state has no '", key, "'");
  const Tensor t = it->second.to(kFloat64).contiguous();
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + t.numel());
}

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(&optimizer) {}

void LRScheduler::start() {
  // The first scheduler on an optimizer records each group's initial lr;
  // later ones (SequentialLR's, or one built after a resume) start from it.
  for (ParamGroup& g : optimizer_->param_groups()) base_lrs_.push_back(g.options.emplace("initial_lr", g["lr"]).first->second);
  apply(0);
}

void LRScheduler::apply(int64_t epoch) {
  last_epoch_ = epoch;
  last_lr_.clear();
  auto& groups = optimizer_->param_groups();
  for (size_t i = 0; i < groups.size(); ++i) last_lr_.push_back(groups[i]["lr"] = lr_at(base_lrs_.at(i), epoch));
}

void LRScheduler::step() { apply(last_epoch_ + 1); }

nn::StateDict LRScheduler::state_dict() const {
  return {{"last_epoch", scalar_tensor(last_epoch_, kInt64)}, {"base_lrs", doubles(base_lrs_)}, {"last_lr", doubles(last_lr_)}};
}

void LRScheduler::load_state_dict(const nn::StateDict& s) {
  auto it = s.find("last_epoch");
  check(it != s.end(), "load_state_dict", "scheduler state has no 'last_epoch'");
  std::vector<double> base = read_doubles(s, "base_lrs", "load_state_dict");
  check(base.size() == optimizer_->param_groups().size(), "load_state_dict", "the scheduler state has ", base.size(),
        " base lrs but the optimizer has ", optimizer_->param_groups().size(), " parameter groups");
  last_epoch_ = it->second.item<int64_t>();
  base_lrs_ = std::move(base);
  last_lr_ = read_doubles(s, "last_lr", "load_state_dict");
}

StepLR::StepLR(Optimizer& o, int64_t step_size, double gamma) : LRScheduler(o), step_size_(step_size), gamma_(gamma) {
  check(step_size >= 1, "StepLR", "step_size must be at least 1 but got ", step_size);
  start();
}
double StepLR::lr_at(double base, int64_t e) const { return base * std::pow(gamma_, static_cast<double>(e / step_size_)); }

MultiStepLR::MultiStepLR(Optimizer& o, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(o), milestones_(std::move(milestones)), gamma_(gamma) {
  check(std::is_sorted(milestones_.begin(), milestones_.end()), "MultiStepLR", "milestones must be increasing");
  start();
}
double MultiStepLR::lr_at(double base, int64_t e) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), e) - milestones_.begin();
  return base * std::pow(gamma_, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(Optimizer& o, double gamma) : LRScheduler(o), gamma_(gamma) { start(); }
double ExponentialLR::lr_at(double base, int64_t e) const { return base * std::pow(gamma_, static_cast<double>(e)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& o, int64_t T_max, double eta_min)
    : LRScheduler(o), t_max_(T_max), eta_min_(eta_min) {
  check(T_max >= 1, "CosineAnnealingLR", "T_max must be at least 1 but got ", T_max);
  start();
}
double CosineAnnealingLR::lr_at(double base, int64_t e) const {
  return eta_min_ + (base - eta_min_) * (1 + std::cos(M_PI * static_cast<double>(e) / static_cast<double>(t_max_))) / 2;
}

LinearLR::LinearLR(Optimizer& o, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(o), start_(start_factor), end_(end_factor), total_(total_iters) {
  check(start_factor > 0 && start_factor <= 1, "LinearLR", "start_factor must be in (0, 1] but got ", start_factor);
  check(end_factor >= 0 && end_factor <= 1, "LinearLR", "end_factor must be in [0, 1] but got ", end_factor);
  check(total_iters >= 1, "LinearLR", "total_iters must be at least 1 but got ", total_iters);
  start();
}
double LinearLR::lr_at(double base, int64_t e) const {
  const double t = static_cast<double>(std::min(e, total_)) / static_cast<double>(total_);
  return base * (start_ + (end_ - start_) * t);
}

LambdaLR::LambdaLR(Optimizer& o, std::function<double(int64_t)> f) : LRScheduler(o), lambda_(std::move(f)) {
  check(static_cast<bool>(lambda_), "LambdaLR", "lr_lambda is empty");
  start();
}
double LambdaLR::lr_at(double base, int64_t e) const { return base * lambda_(e); }

OneCycleLR::OneCycleLR(Optimizer& o, double max_lr, int64_t total_steps, double pct_start,
                       const std::string& anneal_strategy, double div_factor, double final_div_factor,
                       bool three_phase)
    : LRScheduler(o), total_(total_steps), cos_(anneal_strategy == "cos") {
  check(total_steps >= 1, "OneCycleLR", "total_steps must be at least 1 but got ", total_steps);
  check(pct_start >= 0 && pct_start <= 1, "OneCycleLR", "pct_start must be in [0, 1] but got ", pct_start);
  check(anneal_strategy == "cos" || anneal_strategy == "linear", "OneCycleLR",
        "anneal_strategy must be 'cos' or 'linear' but got '", anneal_strategy, "'");
  check(max_lr > 0 && div_factor > 0 && final_div_factor > 0, "OneCycleLR",
        "max_lr, div_factor and final_div_factor must be positive");
  const double initial = max_lr / div_factor, min_lr = initial / final_div_factor;
  const double up = pct_start * static_cast<double>(total_steps) - 1, last = static_cast<double>(total_steps) - 1;
  if (three_phase)
    phases_ = {{up, initial, max_lr}, {2 * pct_start * static_cast<double>(total_steps) - 2, max_lr, initial},
               {last, initial, min_lr}};
  else
    phases_ = {{up, initial, max_lr}, {last, max_lr, min_lr}};
  for (ParamGroup& g : optimizer_->param_groups()) g["lr"] = initial;
  start();
}

double OneCycleLR::lr_at(double, int64_t e) const {
  check(e <= total_, "OneCycleLR", "stepped ", e, " times but total_steps is ", total_);
  double start_step = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (static_cast<double>(e) <= p.end_step || i + 1 == phases_.size()) {
      const double pct = (static_cast<double>(e) - start_step) / (p.end_step - start_step);
      return cos_ ? p.end_lr + (p.start_lr - p.end_lr) / 2 * (1 + std::cos(M_PI * pct))
                  : (p.end_lr - p.start_lr) * pct + p.start_lr;
    }
    start_step = p.end_step;
  }
  return phases_.back().end_lr;
}

SequentialLR::SequentialLR(Optimizer& o, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(o), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  check(!schedulers_.empty() && milestones_.size() + 1 == schedulers_.size(), "SequentialLR", "expected one milestone "
        "fewer than schedulers but got ", schedulers_.size(), " schedulers and ", milestones_.size(), " milestones");
  check(std::is_sorted(milestones_.begin(), milestones_.end()), "SequentialLR", "milestones must be increasing");
  for (const auto& s : schedulers_)
    check(s && &s->optimizer() == &o, "SequentialLR", "every scheduler must drive the same optimizer");
  start();
}

double SequentialLR::lr_at(double base, int64_t e) const {
  const size_t i = static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), e) - milestones_.begin());
  return schedulers_[i]->lr_at(base, e - (i == 0 ? 0 : milestones_[i - 1]));
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& o, const std::string& mode, double factor, int64_t patience,
                                     double threshold, const std::string& threshold_mode, int64_t cooldown,
                                     double min_lr, double eps)
    : optimizer_(&o), max_mode_(mode == "max"), rel_(threshold_mode == "rel"), factor_(factor), threshold_(threshold),
      min_lr_(min_lr), eps_(eps), patience_(patience), cooldown_(cooldown) {
  check(mode == "min" || mode == "max", "ReduceLROnPlateau", "mode must be 'min' or 'max' but got '", mode, "'");
  check(threshold_mode == "rel" || threshold_mode == "abs", "ReduceLROnPlateau",
        "threshold_mode must be 'rel' or 'abs' but got '", threshold_mode, "'");
  check(factor < 1, "ReduceLROnPlateau", "factor must be below 1 but got ", factor);
  best_ = max_mode_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::better(double a) const {
  if (max_mode_) return rel_ ? a > best_ * (1 + threshold_) : a > best_ + threshold_;
  return rel_ ? a < best_ * (1 - threshold_) : a < best_ - threshold_;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > patience_) {
    for (ParamGroup& g : optimizer_->param_groups()) {
      const double old_lr = g["lr"], new_lr = std::max(old_lr * factor_, min_lr_);
      if (old_lr - new_lr > eps_) g["lr"] = new_lr;
    }
    cooldown_counter_ = cooldown_;
    num_bad_epochs_ = 0;
  }
}

std::vector<double> ReduceLROnPlateau::get_last_lr() const {
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_->param_groups()) lrs.push_back(g["lr"]);
  return lrs;
}

nn::StateDict ReduceLROnPlateau::state_dict() const {
  return {{"best", scalar_tensor(best_, kFloat64)},
          {"num_bad_epochs", scalar_tensor(num_bad_epochs_, kInt64)},
          {"cooldown_counter", scalar_tensor(cooldown_counter_, kInt64)},
          {"last_epoch", scalar_tensor(last_epoch_, kInt64)}};
}

void ReduceLROnPlateau::load_state_dict(const nn::StateDict& s) {
  auto get = [&](const char* key) {
    auto it = s.find(key);
    check(it != s.end(), "load_state_dict", "ReduceLROnPlateau state has no '", key, "'");
    return it->second;
  };
  best_ = get("best").item<double>();
  num_bad_epochs_ = get("num_bad_epochs").item<int64_t>();
  cooldown_counter_ = get("cooldown_counter").item<int64_t>();
  last_epoch_ = get("last_epoch").item<int64_t>();
}

}  // namespace kiln::optim
