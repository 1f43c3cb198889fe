// Graph passes of kiln::compile: common-subexpression elimination and
// dead-code elimination, decided from the graph's structure only (so a plan
// is valid for every trace with the same structure key).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "graph.h"

namespace kiln::compiler::detail {

void append_attrs(std::string& key, const Attrs& attrs) {
  for (const auto& [name, v] : attrs.items()) {
    // Random ops carry the generator's seed and offset: values of this
    // call, not structure (each call reads its own from the trace).
    if (name == "seed" || name == "offset") continue;
    key += name;
    key += '=';
    std::visit(
        [&](const auto& x) {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, Shape>) {
            for (int64_t d : x) key.append(1, kNumberMark).append(std::to_string(d)).append(",");
          } else if constexpr (std::is_same_v<X, int64_t>) {
            key.append(1, kNumberMark).append(std::to_string(x));
          } else if constexpr (std::is_same_v<X, DType>) {
            key += dtype_name(x);
          } else if constexpr (std::is_same_v<X, std::string>) {
            key += x;
          } else if constexpr (std::is_same_v<X, Device>) {
            key += x.str();
          } else if constexpr (std::is_same_v<X, OpaqueAttr>) {
            key += x.key;
          } else if constexpr (std::is_same_v<X, double>) {
            // The bit pattern in hex: exact, and no printf on every traced op.
            uint64_t bits;
            std::memcpy(&bits, &x, sizeof bits);
            char buf[16];
            for (int i = 15; i >= 0; --i, bits >>= 4) buf[i] = "0123456789abcdef"[bits & 15];
            key.append(buf, sizeof buf);
          } else {
            key += std::to_string(x);
          }
        },
        v);
    key += ';';
  }
}

std::string graph_string(const Trace& t) {
  std::string s;
  for (const TracedNode& n : t.nodes) {
    // Appends, not operator+: GCC 12 reports a false -Wrestrict on the latter.
    for (int o : n.outputs) s.append("v").append(std::to_string(o)).append(" ");
    s.append("= ").append(n.op->name).append("(");
    for (int in : n.inputs) s.append(t.value_ext[in] >= 0 ? "in" : "v").append(std::to_string(in)).append(" ");
    s.append(")\n");
  }
  return s;
}

Plan optimize(const Trace& t) {
  Plan plan;
  const int nv = t.num_values();
  plan.rep.resize(nv);
  for (int v = 0; v < nv; ++v) plan.rep[v] = v;
  // CSE: a node with the op, attributes, grad mode and (merged) inputs of an
  // earlier one computes the same values. Random ops are never merged, and
  // neither are computed values the program gets: eager gives each its own
  // tensor, so an in-place write to one after the graph (at a break) must not
  // reach the other, nor bump the version of a tensor a backward saved. Nor
  // are computed values a gradient flows through: the merged node's backward
  // would take the sum of both gradients, 2x (g1 + g2) for two squares where
  // eager computes 2x g1 + 2x g2, which differ at inf (inf * 0 against
  // inf - inf) and in rounding. (Views' backwards are sums and copies.)
  std::unordered_map<std::string, int> seen;
  std::vector<bool> grad_flows(nv, false);
  for (int v = 0; v < nv; ++v) grad_flows[v] = t.value_ext[v] >= 0 && t.externals[t.value_ext[v]].requires_grad();
  auto mergeable = [&](const TracedNode& node) {
    bool grad = false;
    for (int in : node.inputs) grad = grad || (node.grad_enabled && grad_flows[in]);
    for (int o : node.outputs) grad_flows[o] = grad;
    if (node.attrs.has("seed")) return false;
    if (node.op->kind == OpKind::View) return true;  // equal views share their base in eager too
    for (int o : node.outputs)
      if (t.live[o]) return false;
    return !grad;
  };
  for (int n = 0; n < static_cast<int>(t.nodes.size()); ++n) {
    const TracedNode& node = t.nodes[n];
    if (!mergeable(node)) continue;
    std::string key = node.op->name + (node.grad_enabled ? "g(" : "(");
    for (int in : node.inputs) key += std::to_string(plan.rep[in]) + ",";
    key += ")";
    append_attrs(key, node.attrs);
    auto [it, fresh] = seen.emplace(key, n);
    if (fresh) continue;
    const TracedNode& first = t.nodes[it->second];
    for (size_t o = 0; o < node.outputs.size(); ++o) plan.rep[node.outputs[o]] = first.outputs[o];
  }
  // DCE: keep the nodes whose outputs a live value (or a kept node) needs.
  std::vector<bool> needed(nv, false);
  for (int v = 0; v < nv; ++v)
    if (t.live[v]) needed[plan.rep[v]] = true;
  std::vector<bool> keep(t.nodes.size(), false);
  for (int n = static_cast<int>(t.nodes.size()) - 1; n >= 0; --n) {
    const TracedNode& node = t.nodes[n];
    for (int o : node.outputs) keep[n] = keep[n] || (plan.rep[o] == o && needed[o]);
    if (!keep[n]) continue;
    for (int in : node.inputs) needed[plan.rep[in]] = true;
  }
  for (int n = 0; n < static_cast<int>(t.nodes.size()); ++n)
    if (keep[n]) plan.order.push_back(n);
  plan.fused.assign(plan.order.size(), nullptr);
  return plan;
}

void fold_constants(const Trace& t, Plan& plan, const std::vector<bool>& constant_inputs) {
  std::vector<Tensor> value(t.num_values());
  std::vector<int> order;
  for (int n : plan.order) {
    const TracedNode& node = t.nodes[n];
    bool constant = !node.attrs.has("seed");
    for (int in : node.inputs) {
      const int v = plan.rep[in];
      constant = constant && (value[v].defined() || (t.value_ext[v] >= 0 && constant_inputs[v]));
    }
    if (!constant) {
      order.push_back(n);
      continue;
    }
    std::vector<Tensor> ins;
    for (int in : node.inputs) {
      const int v = plan.rep[in];
      ins.push_back(value[v].defined() ? value[v] : t.externals[t.value_ext[v]]);
    }
    const std::vector<Tensor> outs = run_kernel(*node.op, ins, node.attrs);
    for (size_t o = 0; o < outs.size(); ++o) {
      value[node.outputs[o]] = outs[o];
      plan.constants.emplace_back(node.outputs[o], outs[o]);
    }
  }
  plan.order = std::move(order);
  plan.fused.assign(plan.order.size(), nullptr);
}

bool is_constant(const Plan& plan, int v) {
  for (const auto& [c, x] : plan.constants)
    if (c == v) return true;
  return false;
}

// A bias add on a GEMM's result that nothing else reads (a linear layer's
// bias, where no loop takes it: the QKV projection feeding attention) runs
// inside the GEMM as bmm_bias (Note [Bias in the GEMM]): the add leaves the
// order and its value becomes the GEMM's (reshaped) result. Not when the
// sum without bias is wanted (handed out, saved for the backward, written
// back).
void fold_bias_adds(const Trace& t, Plan& plan) {
  const int nv = t.num_values();
  std::vector<int> producer(nv, -1), pos(t.nodes.size(), -1), uses(nv, 0);
  for (size_t i = 0; i < plan.order.size(); ++i) {
    const int n = plan.order[i];
    pos[n] = static_cast<int>(i);
    for (int o : t.nodes[n].outputs) producer[o] = n;
    for (int in : t.nodes[n].inputs) uses[plan.rep[in]]++;
  }
  std::vector<bool> kept(nv, false);
  for (int v = 0; v < nv; ++v)
    if (t.live[v] || (!plan.saved.empty() && plan.saved[v])) kept[v] = kept[plan.rep[v]] = true;
  for (const Trace::Writeback& w : t.writebacks) kept[w.value] = kept[plan.rep[w.value]] = true;
  std::vector<int> folded;  // the add nodes
  for (int n : plan.order) {
    const TracedNode& add = t.nodes[n];
    if (add.op->name != "add" || add.inputs.size() != 2 || add.attrs.get_double("alpha") != 1.0) continue;
    const int out = add.outputs[0];
    if (kept[out]) continue;
    for (int side = 0; side < 2; ++side) {
      const int x = plan.rep[add.inputs[side]], bias = plan.rep[add.inputs[1 - side]];
      const Shape& xs = sizes_of(t, x);
      const Shape& bs = sizes_of(t, bias);
      if (xs.empty() || bs.size() != 1 || bs[0] != xs.back() || sizes_of(t, out) != xs || !plain_f32(t, bias))
        continue;
      // x is the GEMM's result, or a reshape of it; each read only here.
      int m = x;
      if (producer[x] >= 0 && t.nodes[producer[x]].op->name == "view") m = plan.rep[t.nodes[producer[x]].inputs[0]];
      const int g = producer[m];
      if (g < 0 || t.nodes[g].op->name != "matmul" || !plain_f32(t, m) || sizes_of(t, m).back() != xs.back())
        continue;
      if (uses[x] != 1 || kept[x] || (m != x && (uses[m] != 1 || kept[m]))) continue;
      // One bias per GEMM: a second add of the folded sum (b + (x @ w + b)) stays an add.
      if (!plan.bias_of.empty() && plan.bias_of[g] >= 0) continue;
      if (producer[bias] >= 0 && pos[producer[bias]] > pos[g]) continue;  // the bias must exist when the GEMM runs
      if (plan.bias_of.empty()) {
        plan.bias_of.assign(t.nodes.size(), -1);
        plan.gemm_with_bias = find_op("bmm_bias");
      }
      plan.bias_of[g] = bias;
      for (int v = 0; v < nv; ++v)
        if (plan.rep[v] == out) plan.rep[v] = x;
      folded.push_back(n);
      break;
    }
  }
  for (int n : folded) {
    const auto it = std::find(plan.order.begin(), plan.order.end(), n);
    plan.fused.erase(plan.fused.begin() + (it - plan.order.begin()));
    plan.order.erase(it);
  }
}

void schedule_frees(const Trace& t, Plan& plan, const std::vector<bool>& keep) {
  std::vector<int> last_use(t.num_values(), -1);
  auto reads = [&](size_t i, auto&& fn) {
    if (plan.fused[i]) {
      for (int n : plan.fused[i]->nodes()) for_each_read(t, plan, n, fn);
    } else {
      for_each_read(t, plan, plan.order[i], fn);
    }
  };
  for (size_t i = 0; i < plan.order.size(); ++i) reads(i, [&](int v) { last_use[v] = static_cast<int>(i); });
  plan.frees.assign(plan.order.size(), {});
  for (int v = 0; v < t.num_values(); ++v)
    if (last_use[v] >= 0 && !keep[v] && t.value_ext[v] < 0) plan.frees[last_use[v]].push_back(v);  // inputs stay
}

}  // namespace kiln::compiler::detail
