// RMSprop and Adagrad (PyTorch's rules): the two optimizers that scale each
// coordinate by a running sum of its squared gradients.
#include <cmath>

#include "kiln/error.h"
#include "kiln/optim.h"
#include "optim/state_slot.h"

namespace kiln::optim {
namespace {

std::map<std::string, double> defaults_of(const RMSpropOptions& o) {
  return {{"lr", o.lr}, {"alpha", o.alpha}, {"eps", o.eps}, {"weight_decay", o.weight_decay},
          {"momentum", o.momentum}, {"centered", o.centered ? 1.0 : 0.0}};
}

std::map<std::string, double> defaults_of(const AdagradOptions& o) {
  return {{"lr", o.lr}, {"lr_decay", o.lr_decay}, {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value}, {"eps", o.eps}};
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions o)
    : RMSprop(std::vector<ParamGroup>{ParamGroup(std::move(params))}, o) {}
RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions o)
    : Optimizer("RMSprop", std::move(groups), defaults_of(o)) {
  for (const ParamGroup& g : groups_) check_group(g);
}

void RMSprop::check_group(const ParamGroup& g) const {
  check(g["alpha"] >= 0, "RMSprop", "invalid alpha ", g["alpha"]);
  check(g["eps"] >= 0, "RMSprop", "invalid epsilon ", g["eps"]);
  check(g["momentum"] >= 0, "RMSprop", "invalid momentum ", g["momentum"]);
  check(g["weight_decay"] >= 0, "RMSprop", "invalid weight_decay ", g["weight_decay"]);
}

void RMSprop::step() {
  for_each_param_with_grad([](const ParamGroup& grp, const Tensor& p, ParamState& s) {
    const double alpha = grp["alpha"], momentum = grp["momentum"], wd = grp["weight_decay"];
    ++s.step;
    Tensor g = p.grad();
    if (wd != 0) g = g + p * wd;
    Tensor& square_avg = detail::state_slot(s.tensors, "square_avg", p);
    square_avg.mul_(alpha).add_(g * g, 1 - alpha);
    Tensor avg;
    if (grp["centered"] != 0) {
      Tensor& grad_avg = detail::state_slot(s.tensors, "grad_avg", p);
      grad_avg.mul_(alpha).add_(g, 1 - alpha);
      avg = sqrt(square_avg - grad_avg * grad_avg) + grp["eps"];
    } else {
      avg = sqrt(square_avg) + grp["eps"];
    }
    if (momentum > 0) {
      Tensor& buf = detail::state_slot(s.tensors, "momentum_buffer", p);
      buf.mul_(momentum).add_(g / avg);
      p.sub_(buf * grp["lr"]);
    } else {
      p.sub_(g / avg * grp["lr"]);
    }
  });
}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions o)
    : Adagrad(std::vector<ParamGroup>{ParamGroup(std::move(params))}, o) {}
Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions o)
    : Optimizer("Adagrad", std::move(groups), defaults_of(o)) {
  for (const ParamGroup& g : groups_) check_group(g);
}

void Adagrad::check_group(const ParamGroup& g) const {
  check(g["lr_decay"] >= 0, "Adagrad", "invalid lr_decay ", g["lr_decay"]);
  check(g["weight_decay"] >= 0, "Adagrad", "invalid weight_decay ", g["weight_decay"]);
  check(g["initial_accumulator_value"] >= 0, "Adagrad", "invalid initial_accumulator_value ",
        g["initial_accumulator_value"]);
  check(g["eps"] >= 0, "Adagrad", "invalid epsilon ", g["eps"]);
}

void Adagrad::step() {
  for_each_param_with_grad([](const ParamGroup& grp, const Tensor& p, ParamState& s) {
    const double wd = grp["weight_decay"];
    const double clr = grp["lr"] / (1 + static_cast<double>(s.step++) * grp["lr_decay"]);
    Tensor g = p.grad();
    if (wd != 0) g = g + p * wd;
    Tensor& sum = detail::state_slot(s.tensors, "sum", p, grp["initial_accumulator_value"]);
    sum.add_(g * g);
    p.sub_(g / (sqrt(sum) + grp["eps"]) * clr);
  });
}

namespace {
const bool rmsprop_names =
    detail::register_state_names("RMSprop", {{"square_avg", "grad_avg", "momentum_buffer"}, [](const ParamGroup& g) {
                                               std::vector<std::string> names = {"square_avg"};
                                               if (g["centered"] != 0) names.push_back("grad_avg");
                                               if (g["momentum"] > 0) names.push_back("momentum_buffer");
                                               return names;
                                             }});
const bool adagrad_names = detail::register_state_names(
    "Adagrad", {{"sum"}, [](const ParamGroup&) { return std::vector<std::string>{"sum"}; }});
}  // namespace

}  // namespace kiln::optim
