// SGD with momentum, dampening, Nesterov and weight decay (PyTorch's rule).
#include "kiln/error.h"
#include "kiln/optim.h"
#include "optim/state_slot.h"

namespace kiln::optim {
namespace {

std::map<std::string, double> defaults_of(const SGDOptions& o) {
  return {{"lr", o.lr}, {"momentum", o.momentum}, {"dampening", o.dampening}, {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, o) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o) : Optimizer("SGD", std::move(groups), defaults_of(o)) {
  for (const ParamGroup& g : groups_) check_group(g);
}

void SGD::check_group(const ParamGroup& g) const {
  check(g["momentum"] >= 0, "SGD", "invalid momentum ", g["momentum"]);
  check(g["weight_decay"] >= 0, "SGD", "invalid weight_decay ", g["weight_decay"]);
  check(g["nesterov"] == 0 || (g["momentum"] > 0 && g["dampening"] == 0), "SGD",
        "nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  for_each_param_with_grad([](const ParamGroup& grp, const Tensor& p, ParamState& s) {
    const double momentum = grp["momentum"], weight_decay = grp["weight_decay"];
    Tensor g = p.grad();
    if (weight_decay != 0) g = g + p * weight_decay;
    if (momentum != 0) {
      auto it = s.tensors.find("momentum_buffer");
      if (it == s.tensors.end()) {
        it = s.tensors.emplace("momentum_buffer", g.clone()).first;
      } else {
        it->second.mul_(momentum).add_(g, 1 - grp["dampening"]);
      }
      g = grp["nesterov"] != 0 ? g + it->second * momentum : it->second;
    }
    p.sub_(g, grp["lr"]);
  });
}

namespace {
const bool sgd_names = detail::register_state_names(
    "SGD", {{"momentum_buffer"}, [](const ParamGroup& g) {
              return g["momentum"] != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
            }});
}  // namespace

}  // namespace kiln::optim
