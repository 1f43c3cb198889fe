// The optimizer base: parameter groups, per-parameter state and its
// PyTorch-layout state dict; gradient clipping and the warmup + cosine schedule.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/optim.h"
#include "optim/state_slot.h"

namespace kiln::optim {
namespace {

std::string known_options(const std::map<std::string, double>& options) {
  std::string s;
  for (const auto& [k, v] : options) s += (s.empty() ? "" : ", ") + k;
  return s;
}

}  // namespace

double& ParamGroup::operator[](const std::string& name) {
  auto it = options.find(name);
  check(it != options.end(), "param_group", "no option '", name, "' (the group has: ", known_options(options), ")");
  return it->second;
}

double ParamGroup::operator[](const std::string& name) const { return const_cast<ParamGroup&>(*this)[name]; }

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, std::map<std::string, double> defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  check(!groups.empty(), name_.c_str(), "got an empty parameter list");
  // The derived constructor checks these groups' options (check_group is
  // not callable before it runs).
  for (ParamGroup& g : groups) add_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  add_group(std::move(group));
  try {
    check_group(groups_.back());
  } catch (...) {
    state_.resize(state_.size() - groups_.back().params.size());
    groups_.pop_back();
    throw;
  }
}

void Optimizer::add_group(ParamGroup group) {
  for (const auto& [k, v] : group.options)
    check(defaults_.count(k), name_.c_str(), "unknown option '", k, "' in a parameter group (", name_, " takes ",
          known_options(defaults_), ")");
  for (const auto& [k, v] : defaults_) group.options.emplace(k, v);
  std::set<const void*> seen;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) seen.insert(p.impl());
  for (const Tensor& p : group.params) {
    check(p.requires_grad(), name_.c_str(), "can only optimize tensors that require grad");
    check(seen.insert(p.impl()).second, name_.c_str(), "a parameter appears in more than one parameter group");
  }
  check(group["lr"] >= 0, name_.c_str(), "invalid learning rate ", group["lr"]);
  state_.resize(state_.size() + group.params.size());
  groups_.push_back(std::move(group));
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) {
      if (set_to_none) p.set_grad(Tensor());
      else if (p.grad().defined()) p.grad().zero_();
    }
}

void Optimizer::set_lr(double lr) {
  check(lr >= 0, name_.c_str(), "invalid learning rate ", lr);
  for (ParamGroup& g : groups_) g["lr"] = lr;
}

void Optimizer::for_each_param_with_grad(
    const std::function<void(const ParamGroup&, const Tensor&, ParamState&)>& f) {
  NoGradGuard no_grad;
  size_t i = 0;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) {
      ParamState& s = state_[i++];
      if (p.grad().defined()) f(g, p, s);
    }
}

nn::StateDict Optimizer::state_dict() const {
  nn::StateDict out;
  size_t i = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const std::string gk = "param_groups." + std::to_string(gi) + ".";
    for (const auto& [k, v] : groups_[gi].options) out.emplace(gk + k, scalar_tensor(v, kFloat64));
    std::vector<int64_t> numbers;
    for (size_t j = 0; j < groups_[gi].params.size(); ++j) numbers.push_back(static_cast<int64_t>(i + j));
    out.emplace(gk + "params", tensor<int64_t>(numbers));
    i += groups_[gi].params.size();
  }
  for (size_t p = 0; p < state_.size(); ++p) {
    const std::string pk = "state." + std::to_string(p) + ".";
    if (state_[p].step > 0) out.emplace(pk + "step", scalar_tensor(static_cast<double>(state_[p].step), kFloat32));
    for (const auto& [k, t] : state_[p].tensors) out.emplace(pk + k, t);
  }
  return out;
}

// Note [A loaded optimizer state is checked whole]
// A state comes from a file: everything in it is checked before anything
// changes, as the constructor checks its options. Each option must be a
// finite number (a flag 0 or 1) and pass the optimizer's own check_group;
// the parameter numbers must be the ones state_dict writes; a step must be a
// whole number >= 0; a state tensor must have its parameter's shape (only
// the per-parameter numbers of kScalarStates are scalars) and a name the
// optimizer holds, and a parameter that has taken steps must have every
// tensor its optimizer keeps for its group (Adam's exp_avg and exp_avg_sq,
// max_exp_avg_sq with amsgrad: detail::StateNames, registered with each
// optimizer), where a missing one would silently restart from zeros; and
// every key must be one of these, so a stray or misspelt entry is an error,
// not ignored.
namespace {
const std::set<std::string> kFlagOptions = {"amsgrad", "nesterov", "centered", "decoupled_weight_decay"};
const std::set<std::string> kScalarStates = {"mu_product"};  // NAdam's

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::map<std::string, detail::StateNames>& state_names_registry() {
  static std::map<std::string, detail::StateNames> registry;
  return registry;
}
}  // namespace

bool detail::register_state_names(const std::string& optimizer, StateNames names) {
  state_names_registry()[optimizer] = std::move(names);
  return true;
}

const detail::StateNames* detail::find_state_names(const std::string& optimizer) {
  const auto it = state_names_registry().find(optimizer);
  return it == state_names_registry().end() ? nullptr : &it->second;
}

void Optimizer::load_state_dict(const nn::StateDict& s) {
  const char* op = "load_state_dict";
  std::set<std::string> used;
  auto find = [&](const std::string& key) {
    auto it = s.find(key);
    check(it != s.end(), op, name_.c_str(), " state has no '", key, "'");
    used.insert(key);
    return it->second;
  };
  auto number = [&](const std::string& key, const Tensor& t) {
    check(t.numel() == 1, op, name_.c_str(), " state '", key, "' has shape ", shape_text(t.sizes()),
          " but is a number");
    const double v = t.to(kFloat64).item<double>();
    check(std::isfinite(v), op, name_.c_str(), " state '", key, "' is ", v, " (expected a finite number)");
    return v;
  };
  size_t saved_groups = 0;
  while (s.count("param_groups." + std::to_string(saved_groups) + ".params")) ++saved_groups;
  check(saved_groups == groups_.size(), op, name_, " state has ", saved_groups,
        " parameter group(s) but the optimizer has ", groups_.size());
  std::vector<ParamGroup> groups = groups_;
  std::vector<ParamState> state(state_.size());
  size_t i = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const std::string gk = "param_groups." + std::to_string(gi) + ".";
    const Tensor numbers = find(gk + "params");
    check(numbers.numel() == static_cast<int64_t>(groups[gi].params.size()), op, "parameter group ", gi, " has ",
          groups[gi].params.size(), " parameters but the state has ", numbers.numel());
    check(numbers.dtype() == kInt64 && numbers.dim() == 1, op, name_.c_str(), " state '", gk,
          "params' is not a list of parameter numbers (", numbers.dtype(), " of shape ", shape_text(numbers.sizes()),
          ")");
    const Tensor ids = numbers.contiguous();
    for (int64_t j = 0; j < ids.numel(); ++j)
      check(ids.data_ptr<int64_t>()[j] == static_cast<int64_t>(i) + j, op, name_.c_str(), " state '", gk,
            "params' has parameter number ", ids.data_ptr<int64_t>()[j], " at position ", j, " (expected ",
            static_cast<int64_t>(i) + j, ")");
    for (auto& [k, v] : groups[gi].options) {
      if (k == "initial_lr") continue;
      v = number(gk + k, find(gk + k));
      check(!kFlagOptions.count(k) || v == 0 || v == 1, op, name_.c_str(), " state '", gk, k, "' is ", v,
            " (a flag: 0 or 1)");
    }
    if (s.count(gk + "initial_lr"))
      groups[gi].options["initial_lr"] = number(gk + "initial_lr", find(gk + "initial_lr"));  // a scheduler's
    check(groups[gi]["lr"] >= 0, op, name_.c_str(), " state '", gk, "lr' is ", groups[gi]["lr"], " (expected >= 0)");
    try {
      check_group(groups[gi]);  // the constructor's checks of the options
    } catch (const Error& e) {
      fail(op, name_, " state 'param_groups.", gi, ".*': ", e.what());
    }
    for (const Tensor& p : groups[gi].params) {
      const std::string pk = "state." + std::to_string(i) + ".";
      for (const auto& [k, t] : s) {
        if (k.rfind(pk, 0) != 0) continue;
        used.insert(k);
        const std::string name = k.substr(pk.size());
        if (name == "step") {
          const double step = number(k, t);
          check(step >= 0 && step == std::floor(step), op, name_.c_str(), " state '", k, "' is ", step,
                " (expected a whole number >= 0)");
          state[i].step = static_cast<int64_t>(step);
          continue;
        }
        if (kScalarStates.count(name)) {  // a per-parameter number
          number(k, t);
          state[i].tensors[name] = t.clone();
          continue;
        }
        check(t.sizes() == p.sizes(), op, name_.c_str(), " state '", k, "' has shape ", shape_text(t.sizes()),
              " but its parameter has ", shape_text(p.sizes()));
        state[i].tensors[name] = t.to(p.dtype()).clone();
      }
      if (const detail::StateNames* names = detail::find_state_names(name_)) {
        for (const auto& [name, t] : state[i].tensors)
          check(std::find(names->allowed.begin(), names->allowed.end(), name) != names->allowed.end(), op,
                name_.c_str(), " state '", pk, name, "' is no state of ", name_, " (it keeps ", listed(names->allowed),
                ")");
        if (state[i].step > 0)
          for (const std::string& name : names->required(groups[gi]))
            check(state[i].tensors.count(name), op, name_.c_str(), " state of parameter ", i, " has taken ",
                  state[i].step, state[i].step == 1 ? " step" : " steps", " but has no '", pk, name, "'");
      }
      ++i;
    }
  }
  for (const auto& [k, t] : s)
    check(used.count(k), op, name_.c_str(), " state has an unknown entry '", k, "' (", name_, " has ", groups_.size(),
          " parameter group(s) and ", state_.size(), " parameters)");
  groups_ = std::move(groups);
  state_ = std::move(state);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  check(clip_value >= 0, "clip_grad_value_", "clip_value must be non-negative but got ", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& p : params)
    if (p.grad().defined()) p.grad().clamp_(-clip_value, clip_value);
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
