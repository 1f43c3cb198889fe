// Adam and AdamW (PyTorch's rules; AdamW's weight decay decoupled).
#include <cmath>

#include "kiln/dispatch.h"
#include "kiln/error.h"
#include "kiln/optim.h"
#include "optim/state_slot.h"

namespace kiln::optim {
namespace {

std::map<std::string, double> defaults_of(const AdamOptions& o) {
  return {{"lr", o.lr},   {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions o) : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, o) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam("Adam", std::move(groups), o, false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions o, bool decoupled)
    : Optimizer(std::move(name), std::move(groups), defaults_of(o)), decoupled_(decoupled) {
  for (const ParamGroup& g : groups_) check_group(g);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, o) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
    : Adam("AdamW", std::move(groups), AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad}, true) {}

void Adam::check_group(const ParamGroup& g) const { detail::check_adam_like(name_.c_str(), g); }

int64_t Adam::steps() const { return state_.empty() ? 0 : state_[0].step; }

namespace {

// Note [The fused Adam step]
// On eager float32 CPU tensors, dense and alike, without amsgrad, the update
// is one op (_fused_adam_, src/ops/optimizer_steps.cpp) that runs the same
// float32 operations per element as the ops below, in their order: the same
// bits in one pass over memory instead of about twelve (the Fashion-MNIST
// CNN's step spent ~1 ms of ~15 in them). Under a dispatch mode
// (kiln::compile traces the step) the ops below run, as they always did.

// Whether the fused step applies: p dense (row-major, or channels-last like
// a CNN's weights) and its moments laid out as p, so that one pass over the
// memories pairs their elements.
bool fusable(const Tensor& p, const std::map<std::string, Tensor>& state, bool amsgrad) {
  if (amsgrad || thread_modes_active()) return false;
  if (p.dtype() != kFloat32 || !p.device().is_cpu() ||
      !(p.is_contiguous() || p.is_contiguous(p.suggest_memory_format())))
    return false;
  // The moments exist after the first step (made below, laid out like p).
  const auto first = state.find("exp_avg"), second = state.find("exp_avg_sq");
  if (first == state.end() || second == state.end()) return false;
  for (const Tensor* t : {&first->second, &second->second})
    if (t->dtype() != kFloat32 || !t->device().is_cpu() || t->sizes() != p.sizes() || t->strides() != p.strides())
      return false;
  // The gradient in any layout (the kernel reads it in p's): a channels-last
  // convolution weight's comes row-major.
  const Tensor g = p.grad();
  return g.dtype() == kFloat32 && g.device().is_cpu() && g.sizes() == p.sizes();
}

}  // namespace

void Adam::step() {
  for_each_param_with_grad([&](const ParamGroup& grp, const Tensor& p, ParamState& s) {
    const double lr = grp["lr"], beta1 = grp["beta1"], beta2 = grp["beta2"];
    const double t = static_cast<double>(++s.step);
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    if (fusable(p, s.tensors, grp["amsgrad"] != 0)) {
      static const OpDef& fused = *find_op("_fused_adam_");
      const Tensor in[] = {p, p.grad(), s.tensors.at("exp_avg"), s.tensors.at("exp_avg_sq")};
      const Tensor out[] = {p, s.tensors.at("exp_avg"), s.tensors.at("exp_avg_sq")};
      dispatch(fused, in,
               Attrs{{"lr", lr}, {"beta1", beta1}, {"beta2", beta2}, {"eps", grp["eps"]},
                     {"weight_decay", grp["weight_decay"]}, {"decoupled", decoupled_},
                     {"bias_correction1", bc1}, {"bias_correction2", bc2}},
               out);
      return;
    }
    const Tensor g = detail::decayed_grad(grp, p, decoupled_);
    const auto [exp_avg, exp_avg_sq] = detail::update_moments(s.tensors, p, g, beta1, beta2);
    Tensor second = exp_avg_sq;
    if (grp["amsgrad"] != 0) {
      Tensor& max_sq = detail::state_slot(s.tensors, "max_exp_avg_sq", p);
      max_sq.copy_(maximum(max_sq, exp_avg_sq));
      second = max_sq;
    }
    const Tensor denom = sqrt(second) / std::sqrt(bc2) + grp["eps"];
    // The step size as a number operand, not an alpha attribute: it changes
    // every step, and kiln::compile reads numbers per call but keys on attributes.
    p.sub_(exp_avg / denom * (lr / bc1));
  });
}

namespace {
std::vector<std::string> adam_state(const ParamGroup& g) {
  if (g["amsgrad"] != 0) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}
const bool adam_names = detail::register_state_names("Adam", {{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, adam_state});
const bool adamw_names =
    detail::register_state_names("AdamW", {{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, adam_state});
}  // namespace

}  // namespace kiln::optim
