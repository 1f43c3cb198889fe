// The "cpp" backend's code generation: float32 elementwise nodes over one
// iteration space, with the row sums and norms between them, become one
// generated C++ loop nest, so their intermediates are never written to
// memory (Note [Loop groups]). The op math is the eager kernels' own
// (the functors of pointwise_math.h, called by cpp_expressions.cpp); the
// source is built and cached by the toolchain (cpp_toolchain.cpp: a failing
// compiler leaves the graph to the interpreter, with a warning), and each
// loop run over [lo, hi) chunks of kiln's thread pool by the runtime
// (cpp_runtime.cpp).
#include <dlfcn.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "cpp_expressions.h"
#include "cpp_kernel.h"
#include "kiln/compile.h"

namespace kiln::compiler::detail {
namespace {


// Note [Loop groups]
// A loop runs over an iteration space of `rows` rows of `cols` contiguous
// elements (the last dim), and takes, in graph order:
// - Elem: an elementwise op (or a reshape) producing rows * cols elements
//   whose operands broadcast to its output per element, per row (last dim
//   1), per column (all leading dims 1) or are 0-dim;
// - RowElem: an elementwise op (or reshape) on per-row values;
// - RowSum: a sum over the last dim, giving a per-row value;
// - ColSum: a sum over all dims but the last (a bias or norm weight
//   gradient): each fixed chunk of rows sums into its own partial row, and
//   the partial rows are added in chunk order after the loop, so the result
//   does not depend on the thread count. It is known only after the loop;
// - Head: a layer_norm / rms_norm over the last dim as the first node,
//   reading its input row from memory before the passes;
// - Norm: the same later in the loop (a residual add then the next block's
//   norm): its mean and variance are row sums in the passes, like RowSum's;
// slice_backward over the last dim (the gradient of a slice of columns, as
// in a fused QKV projection) is an Elem that reads its input in a column
// range and is 0 elsewhere.
// Per row, the loop makes one pass over the columns per "phase": a value
// that needs a row sum is computed in a pass after the one that sums.
// Elementwise values are recomputed in each pass that needs them (the C++
// compiler drops the rest), and only values needed after the loop are
// stored, in the last pass. Nodes that do not fit are moved before the loop
// when they do not depend on it, after it otherwise; fusable nodes that
// depend on such a moved-after node stay out. Without per-row or per-column
// operands the loop is one flat pass over all elements.
enum class Role : uint8_t { Elem, RowElem, RowSum, ColSum, Head, Norm };

struct Space {
  int64_t rows = 0, cols = 0;
};

// How an elementwise node with output shape `out` reads an operand of shape
// `in` under broadcasting: 'j' per element, 'r' per row, 'c' per column,
// 's' 0-dim, 0 not in a loop over out's rows.
char access_of(const Shape& in, const Shape& out) {
  if (in.empty()) return 's';
  if (in.size() > out.size()) return 0;
  Shape padded(out.size() - in.size(), 1);
  padded.insert(padded.end(), in.begin(), in.end());
  if (padded == out) return 'j';
  if (out.size() < 2) return 0;
  Shape row = out;
  row.back() = 1;
  if (padded == row) return 'r';
  Shape col(out.size(), 1);
  col.back() = out.back();
  return padded == col ? 'c' : 0;
}

// For a slice_backward over the last dim with step 1: the column range
// [start, end) its input fills.
std::optional<std::pair<int64_t, int64_t>> slice_columns(const Trace& t, const Plan& p, const TracedNode& n) {
  const int in = p.rep[n.inputs[0]];
  const Shape& is = sizes_of(t, in);
  const Shape& os = sizes_of(t, n.outputs[0]);
  const int64_t rank = static_cast<int64_t>(os.size());
  if (rank == 0 || is.size() != os.size() || !plain_f32(t, in) || n.attrs.get_int("step") != 1) return std::nullopt;
  const int64_t dim = n.attrs.get_int("dim");
  if (dim != rank - 1 && dim != -1) return std::nullopt;
  const int64_t cols = os.back();
  auto clampi = [cols](int64_t v) { return std::clamp(v < 0 ? v + cols : v, int64_t{0}, cols); };
  const int64_t start = clampi(n.attrs.get_int("start")), end = std::max(clampi(n.attrs.get_int("end")), start);
  for (int64_t d = 0; d + 1 < rank; ++d)
    if (is[d] != os[d]) return std::nullopt;
  if (is.back() != end - start || end == start) return std::nullopt;
  return std::make_pair(start, end);
}

// A layer_norm / rms_norm over float32 rows whose output can be computed
// inside the loop that consumes it (reduction fusion: the normalised tensor
// is never written).
bool row_head(const Trace& t, const Plan& p, const TracedNode& n) {
  if (n.op->name != "layer_norm" || n.outputs.size() != 1) return false;
  if (dtype_of_value(t, n.outputs[0]) != kFloat32 || n.attrs.get_int("n") <= 0) return false;
  for (int in : n.inputs)
    if (dtype_of_value(t, p.rep[in]) != kFloat32 || !contiguous_value(t, p.rep[in])) return false;
  return true;
}

// A norm's eps as a float literal of the generated code.
std::string eps_literal(const TracedNode& n) {
  char eps[40];
  std::snprintf(eps, sizeof eps, "%.9ef", n.attrs.get_double("eps"));
  return eps;
}

// The role node n can take in a loop over sp, if any.
std::optional<Role> role_in(const Trace& t, const Plan& p, const TracedNode& n, Space sp) {
  if (n.outputs.size() != 1 || n.inputs.empty()) return std::nullopt;
  const int out = n.outputs[0];
  const Shape& os = sizes_of(t, out);
  if (os.empty() || !plain_f32(t, out)) return std::nullopt;
  const int64_t numel = shape_numel(os);
  const int in0 = p.rep[n.inputs[0]];
  if (n.op->name == "sum" && n.op->kind == OpKind::Compute) {
    const Shape& is = sizes_of(t, in0);
    const int64_t rank = static_cast<int64_t>(is.size());
    if (rank < 2 || !plain_f32(t, in0) || is.back() != sp.cols || shape_numel(is) != sp.rows * sp.cols) return std::nullopt;
    std::vector<bool> reduced(static_cast<size_t>(rank), false);
    for (int64_t d : n.attrs.get_shape("dims")) {
      if (d < -rank || d >= rank) return std::nullopt;
      reduced[static_cast<size_t>(d < 0 ? d + rank : d)] = true;
    }
    const int64_t count = std::count(reduced.begin(), reduced.end(), true);
    if (sp.cols > 1 && numel == sp.rows && count == 1 && reduced.back()) return Role::RowSum;
    if (sp.rows > 1 && numel == sp.cols && count == rank - 1 && !reduced.back()) return Role::ColSum;
    return std::nullopt;
  }
  const bool elem = numel == sp.rows * sp.cols && os.back() == sp.cols;
  const bool per_row = sp.cols > 1 && numel == sp.rows;
  if (!elem && !per_row) return std::nullopt;
  if (n.op->kind == OpKind::View) {  // a reshape: the same elements in the same order
    if (n.inputs.size() != 1 || !plain_f32(t, in0) || shape_numel(sizes_of(t, in0)) != numel) return std::nullopt;
    return elem ? Role::Elem : Role::RowElem;
  }
  if (n.op->kind != OpKind::Compute) return std::nullopt;
  if (n.op->name == "layer_norm") {
    if (!elem || !row_head(t, p, n) || n.attrs.get_int("n") != sp.cols || access_of(sizes_of(t, in0), os) != 'j')
      return std::nullopt;
    for (size_t i = 1; i < n.inputs.size(); ++i) {  // weight and bias: one value per column
      const Shape& ws = sizes_of(t, p.rep[n.inputs[i]]);
      if (ws.size() != 1 || ws[0] != sp.cols) return std::nullopt;
    }
    return Role::Norm;
  }
  if (n.op->name == "slice_backward") return elem && slice_columns(t, p, n) ? std::optional<Role>(Role::Elem) : std::nullopt;
  if (!fusable_pointwise(n)) return std::nullopt;
  for (int i : n.inputs) {
    const int v = p.rep[i];
    const char a = access_of(sizes_of(t, v), os);
    if (a == 's') continue;
    if (!plain_f32(t, v) || a == 0 || (per_row && a != 'j')) return std::nullopt;
  }
  return elem ? Role::Elem : Role::RowElem;
}

}  // namespace

namespace {

// The iteration space a loop starting at node n would have.
std::optional<Space> space_from(const Trace& t, const Plan& p, const TracedNode& n) {
  if (n.outputs.size() != 1 || n.inputs.empty()) return std::nullopt;
  const bool head = row_head(t, p, n);
  const Shape& s = n.op->name == "sum" ? sizes_of(t, p.rep[n.inputs[0]]) : sizes_of(t, n.outputs[0]);
  if (s.size() >= 2 && n.op->name == "sum" && shape_numel(s) > 0) {  // a row or column sum starts a loop over its input
    const Space sp{shape_numel(s) / s.back(), s.back()};
    const std::optional<Role> r = role_in(t, p, n, sp);
    return r ? std::optional<Space>(sp) : std::nullopt;
  }
  if (s.empty() || s.back() <= 0 || shape_numel(s) == 0) return std::nullopt;
  const Space sp{shape_numel(s) / s.back(), s.back()};
  if (head) return n.attrs.get_int("n") == sp.cols ? std::optional<Space>(sp) : std::nullopt;
  const std::optional<Role> r = n.op->kind == OpKind::View ? std::nullopt : role_in(t, p, n, sp);
  if (r == Role::Elem) return sp;
  return std::nullopt;
}

struct Member {
  int node;
  Role role;
};
struct Group {
  std::vector<Member> members;
  Space space;
  bool flat = true;  // no per-row or per-column reads: one flat pass
};

// An entry of the schedule being built: a node (>= 0) or group g (-1 - g).
struct Schedule {
  const Trace& t;
  const Plan& p;
  std::vector<Group>& groups;
  template <class Fn>
  void reads(int item, Fn&& fn) const {
    if (item >= 0) {
      for_each_read(t, p, item, fn);
    } else {
      for (const Member& m : groups[-1 - item].members) for_each_read(t, p, m.node, fn);
    }
  }
  template <class Fn>
  void writes(int item, Fn&& fn) const {
    if (item >= 0) {
      for (int o : t.nodes[item].outputs) fn(o);
    } else {
      for (const Member& m : groups[-1 - item].members)
        for (int o : t.nodes[m.node].outputs) fn(o);
    }
  }
};

// Tries to grow a group from seq[i]; on success replaces its members in seq
// by the group's entry, with the nodes it skipped before or after it.
bool form_group(const Trace& t, const Plan& p, std::vector<Group>& groups, std::vector<int>& seq, size_t i) {
  if (seq[i] < 0) return false;
  const TracedNode& first = t.nodes[seq[i]];
  const std::optional<Space> sp = space_from(t, p, first);
  if (!sp) return false;
  Group g;
  g.space = *sp;
  const Schedule sched{t, p, groups};
  std::vector<bool> in_group(t.num_values(), false), after(t.num_values(), false);
  // How the loop holds each of its values: per element ('j') or per row ('r').
  std::vector<char> held(t.num_values(), 0);
  auto take = [&](int node, Role role) {
    g.members.push_back({node, role});
    for (int o : t.nodes[node].outputs) {
      in_group[o] = true;
      held[o] = role == Role::RowSum || role == Role::RowElem ? 'r' : 'j';
    }
    if (role == Role::ColSum)  // known after the loop only
      for (int o : t.nodes[node].outputs) after[o] = true;
  };
  // Whether node n, taking `role`, reads the loop's own values as the loop
  // holds them: a per-element value at the same element, a per-row value
  // once per row. A row sum without keepdim broadcast along the last dim
  // is read per column, and a norm's weight per column: the loop holds
  // neither, so such a node stays out (it reads the stored value).
  auto reads_fit = [&](const TracedNode& n, Role role) {
    for (size_t a = 0; a < n.inputs.size(); ++a) {
      const int v = p.rep[n.inputs[a]];
      if (!in_group[v]) continue;
      char want = 'j';
      if (role == Role::Norm && a > 0) return false;
      if (role == Role::RowElem) want = 'r';
      if (role == Role::Elem && n.op->kind != OpKind::View) {
        const char access = access_of(sizes_of(t, v), sizes_of(t, n.outputs[0]));
        if (access != held[v]) return false;
        continue;
      }
      if (held[v] != want) return false;
    }
    return true;
  };
  take(seq[i], row_head(t, p, first) ? Role::Head : *role_in(t, p, first, g.space));
  std::vector<int> before, later;
  size_t last = i, j = i + 1;
  for (; j < seq.size() && j - last <= 64; ++j) {
    bool reads_group = false, reads_later = false;
    sched.reads(seq[j], [&](int v) {
      reads_group = reads_group || in_group[v];
      reads_later = reads_later || after[v];
    });
    std::optional<Role> role;
    // A reshape joins only to pass a value of the loop on inside it.
    if (seq[j] >= 0 && !reads_later && (t.nodes[seq[j]].op->kind != OpKind::View || reads_group))
      role = role_in(t, p, t.nodes[seq[j]], g.space);
    // A per-row op joins only to work on the loop's own values (a tensor that
    // merely has `rows` elements is not one). slice_backward reads its input
    // at other columns than the one computed: that input must come from memory.
    if (role == Role::RowElem && !reads_group) role.reset();
    if (role && !reads_fit(t.nodes[seq[j]], *role)) role.reset();
    if (role && t.nodes[seq[j]].op->name == "slice_backward" && in_group[p.rep[t.nodes[seq[j]].inputs[0]]]) role.reset();
    if (role) {
      take(seq[j], *role);
      last = j;
    } else if (!reads_group && !reads_later) {
      before.push_back(seq[j]);
    } else {
      later.push_back(seq[j]);
      sched.writes(seq[j], [&](int v) { after[v] = true; });
    }
  }
  // Worth a loop: two real ops (not reshapes) or a norm and one.
  int real = 0;
  for (const Member& m : g.members) real += t.nodes[m.node].op->kind != OpKind::View;
  if (real < 2) return false;
  // Drop what was scanned past the last member.
  while (!before.empty() && std::find(seq.begin() + last + 1, seq.begin() + j, before.back()) != seq.begin() + j)
    before.pop_back();
  while (!later.empty() && std::find(seq.begin() + last + 1, seq.begin() + j, later.back()) != seq.begin() + j)
    later.pop_back();
  for (const Member& m : g.members) {
    if (m.role != Role::Elem) g.flat = false;
    if (t.nodes[m.node].op->name == "slice_backward") g.flat = false;  // reads by column
    if (m.role != Role::Elem || t.nodes[m.node].op->kind == OpKind::View) continue;
    for (int in : t.nodes[m.node].inputs) {
      const char a = access_of(sizes_of(t, p.rep[in]), sizes_of(t, t.nodes[m.node].outputs[0]));
      if (a == 'r' || a == 'c') g.flat = false;
    }
  }
  std::vector<int> out(seq.begin(), seq.begin() + i);
  out.insert(out.end(), before.begin(), before.end());
  out.push_back(-1 - static_cast<int>(groups.size()));
  out.insert(out.end(), later.begin(), later.end());
  out.insert(out.end(), seq.begin() + last + 1, seq.end());
  seq = std::move(out);
  groups.push_back(std::move(g));
  return true;
}

// Stage "fuse": the loop groups, each replacing its members in seq by its
// entry (-1 - g) where the schedule puts it.
std::vector<Group> fuse(const Trace& t, const Plan& plan, std::vector<int>& seq) {
  std::vector<Group> groups;
  for (size_t i = 0; i < seq.size(); ++i)
    while (form_group(t, plan, groups, seq, i)) {
    }
  return groups;
}

// What code generation gives: the source and, per group, the loop's
// description (its function still to be bound once the source is built).
struct Generated {
  std::string source;
  std::vector<std::shared_ptr<FusedKernel>> kernels;
};

// Stage "generate": one C++ function per group.
Generated generate(const Trace& t, const Plan& plan, std::vector<Group>& groups, const std::vector<int>& seq) {
  // Uses of each value outside its node, to know what a loop must write.
  std::vector<int> users_after(t.num_values(), 0);
  for (int n : plan.order) for_each_read(t, plan, n, [&](int v) { users_after[v]++; });
  std::vector<bool> live_rep(t.num_values(), false);
  for (int v = 0; v < t.num_values(); ++v)
    if (t.live[v] || (!plan.saved.empty() && plan.saved[v])) live_rep[plan.rep[v]] = true;  // saved: read by the backward
  // Written-back values whose destination the graph read as an input (the
  // key says which, "write v over x"): value -> that input.
  std::map<int, int> overwrites;
  for (const Trace::Writeback& w : t.writebacks)
    if (w.over >= 0) overwrites.emplace(plan.rep[w.value], plan.rep[w.over]);

  std::ostringstream src;
  src << "// kiln fused loops\n#include <cstdint>\n\n" << kPointwiseMathSource << "\n";
  // Whether something after group g in the schedule reads value v.
  const Schedule sched{t, plan, groups};
  auto read_after_group = [&](size_t g, int v) {
    const auto at = std::find(seq.begin(), seq.end(), -1 - static_cast<int>(g));
    bool read = false;
    for (auto it = at + 1; it != seq.end() && !read; ++it) sched.reads(*it, [&](int x) { read = read || x == v; });
    return read;
  };
  std::vector<std::shared_ptr<FusedKernel>> kernels;
  for (size_t g = 0; g < groups.size(); ++g) {
    const Group& grp = groups[g];
    auto k = std::make_shared<FusedKernel>();
    k->symbol = "kiln_fused_" + std::to_string(g);
    k->cols = grp.flat ? 0 : grp.space.cols;
    std::map<int, std::string> name;  // value -> C++ name holding it
    std::map<int, int> phase;         // produced value -> first pass it is known in
    auto phase_of = [&](int v) { return phase.count(v) ? phase[v] : 0; };
    struct Line {
      int phase;
      std::string text;
      std::string fast_text = {};  // through a fast form (fast_expression), where it differs
    };
    std::vector<Line> elem_lines, row_lines;  // per element (inside passes) / per row
    std::set<int64_t> col_breaks;             // slice_backward column ranges' ends
    std::vector<std::pair<int, int>> sums;    // (pass, value summed) per RowSum, by accumulator
    std::set<std::string> double_sums;        // accumulators kept in double
    std::vector<int> produced;
    std::vector<std::pair<int, int>> col_sums;  // (value summed, result) per ColSum
    std::string head_prologue;
    // An operand as the node reads it: per element, row, column or scalar.
    auto operand = [&](int v, char access) -> std::string {
      if (name.count(v)) return name[v];
      if (access == 's') {
        k->scalars.push_back(v);
        return name[v] = std::string("s").append(std::to_string(k->scalars.size() - 1));
      }
      const auto it = std::find(k->inputs.begin(), k->inputs.end(), v);
      size_t idx = static_cast<size_t>(it - k->inputs.begin());
      if (it == k->inputs.end()) {
        k->inputs.push_back(v);
        k->index.push_back(access);
        k->width.push_back(access == 'q' ? sizes_of(t, v).back() : 0);
      }
      if (access == 'q') return std::string("in").append(std::to_string(idx));  // the caller indexes it
      return std::string("in").append(std::to_string(idx)).append("[").append(1, access).append("]");
    };
    for (const Member& m : grp.members) {
      const TracedNode& n = t.nodes[m.node];
      k->node_list.push_back(m.node);
      for (int in : n.inputs)  // a value read inside the loop that makes it needs no store for this use
        if (name.count(plan.rep[in])) users_after[plan.rep[in]]--;
      const int out = n.outputs[0];
      const std::string v = std::string("v").append(std::to_string(out));  // (operator+ trips GCC 12's -Wrestrict)
      if (m.role == Role::Head) {
        if (k->space_value < 0) k->space_value = out;
        const bool has_w = n.attrs.get_bool("has_weight"), has_b = n.attrs.get_bool("has_bias");
        k->row_x = plan.rep[n.inputs[0]];
        if (has_w) k->row_w = plan.rep[n.inputs[1]];
        if (has_b) k->row_b = plan.rep[n.inputs[has_w ? 2 : 1]];
        const std::string eps = eps_literal(n);
        std::ostringstream pro;
        pro << "    const float* xr = rx + r * n;\n    float mean = 0.0f, var = 0.0f;\n";
        if (!n.attrs.get_bool("rms"))  // in double, as eager's (Note [A layer_norm's mean])
          pro << "    double sum = 0.0;\n#pragma omp simd reduction(+ : sum)\n    for (int64_t c = 0; c < n; ++c) sum += xr[c];\n"
              << "    mean = static_cast<float>(sum / static_cast<double>(n));\n";
        pro << "#pragma omp simd reduction(+ : var)\n    for (int64_t c = 0; c < n; ++c) var += (xr[c] - mean) * (xr[c] - mean);\n"
            << "    const float rstd = 1.0f / __builtin_sqrtf(var / static_cast<float>(n) + " << eps << ");\n";
        head_prologue = pro.str();
        elem_lines.push_back({0, "const float " + v + " = (xr[c] - mean) * rstd" + (has_w ? " * rw[c]" : "") +
                                     (has_b ? " + rb[c]" : "") + ";"});
        phase[out] = 0;
      } else if (m.role == Role::Norm) {
        // mean and rstd of the row as row sums of x (the second over x
        // centred by the first), then the normalised element.
        if (k->space_value < 0) k->space_value = out;
        const int x = plan.rep[n.inputs[0]];
        const bool has_w = n.attrs.get_bool("has_weight"), has_b = n.attrs.get_bool("has_bias");
        const std::string xs = operand(x, 'j');
        const std::string eps = eps_literal(n);
        auto row_sum = [&](int pass, const std::string& term) {
          sums.emplace_back(pass, static_cast<int>(elem_lines.size()));
          const std::string acc = "acc" + std::to_string(sums.size() - 1);
          elem_lines.push_back({pass, acc + " += " + term + ";"});
          return acc;
        };
        int pass = phase_of(x);
        std::string centred = xs;
        if (!n.attrs.get_bool("rms")) {
          const std::string acc = row_sum(pass, xs);
          double_sums.insert(acc);  // Note [A layer_norm's mean]
          row_lines.push_back({pass + 1, "const float " + v + "_mean = static_cast<float>(" + acc +
                                             " / static_cast<double>(n));"});
          centred = "(" + xs + " - " + v + "_mean)";
          ++pass;
        }
        const std::string acc = row_sum(pass, centred + " * " + centred);
        row_lines.push_back({pass + 1, "const float " + v + "_rstd = 1.0f / __builtin_sqrtf(" + acc +
                                           " / static_cast<float>(n) + " + eps + ");"});
        std::string e = centred + " * " + v + "_rstd";
        if (has_w) e += " * " + operand(plan.rep[n.inputs[1]], 'c');
        if (has_b) e += " + " + operand(plan.rep[n.inputs[has_w ? 2 : 1]], 'c');
        elem_lines.push_back({pass + 1, "const float " + v + " = " + e + ";"});
        phase[out] = pass + 1;
      } else if (m.role == Role::ColSum) {
        const int x = plan.rep[n.inputs[0]];
        if (k->space_value < 0) k->space_value = x;
        col_sums.emplace_back(x, out);
        continue;  // not a value of the loop
      } else if (m.role == Role::RowSum) {
        const int x = plan.rep[n.inputs[0]];
        if (k->space_value < 0) k->space_value = x;
        sums.emplace_back(phase_of(x), -1);
        const std::string acc = "acc" + std::to_string(sums.size() - 1);
        sums.back().second = static_cast<int>(elem_lines.size());
        elem_lines.push_back({phase_of(x), acc + " += " + operand(x, 'j') + ";"});
        row_lines.push_back({phase_of(x) + 1, "const float " + v + " = " + acc + ";"});
        phase[out] = phase_of(x) + 1;
      } else {
        const bool elem = m.role == Role::Elem;
        if (elem && k->space_value < 0) k->space_value = out;
        std::vector<std::string> opnd(n.inputs.size());
        int ph = 0;
        for (size_t a = 0; a < n.inputs.size(); ++a) {
          const int x = plan.rep[n.inputs[a]];
          // A reshape reads its input in element order.
          const char access = n.op->kind == OpKind::View ? 'j' : access_of(sizes_of(t, x), sizes_of(t, out));
          if (n.op->name != "slice_backward") opnd[a] = operand(x, access == 's' ? 's' : elem ? access : 'r');
          ph = std::max(ph, phase_of(x));
        }
        std::string e = n.op->kind == OpKind::View || n.op->name == "slice_backward" ? opnd[0] : expression(n, opnd);
        if (n.op->name == "slice_backward") {
          const auto [start, end] = *slice_columns(t, plan, n);
          col_breaks.insert(start), col_breaks.insert(end);
          const int x = plan.rep[n.inputs[0]];
          const std::string w = std::to_string(end - start), a = std::to_string(start), b = std::to_string(end);
          e = "(c >= " + a + " && c < " + b + " ? " + operand(x, 'q') + "[r * " + w + " + c - " + a + "] : 0.0f)";
        }
        const std::string fast = n.op->kind == OpKind::View || n.op->name == "slice_backward" ? "" : fast_expression(n, opnd);
        (elem ? elem_lines : row_lines)
            .push_back({ph, "const float " + v + " = " + e + ";", fast.empty() ? "" : "const float " + v + " = " + fast + ";"});
        phase[out] = ph;
      }
      name[out] = v;
      produced.push_back(out);
    }
    // What the loop writes, and in which pass: per-element values in the
    // last pass (after every load of the iteration, so an output may
    // overwrite the input it replaces at the same j: that pointer is then
    // declared without __restrict), per-row values once the row is done.
    auto overwritten_input = [&](int v) {
      const auto it = overwrites.find(v);
      // Not while a node after the loop still reads the old value.
      if (!grp.flat || it == overwrites.end() || read_after_group(g, it->second)) return -1;
      const auto in = std::find(k->inputs.begin(), k->inputs.end(), it->second);
      const int i = in == k->inputs.end() ? -1 : static_cast<int>(in - k->inputs.begin());
      return std::find(k->in_place.begin(), k->in_place.end(), i) == k->in_place.end() ? i : -1;
    };
    std::vector<std::string> elem_stores, row_stores;
    int store_pass = -1;
    std::vector<bool> view_after(t.num_values(), false);
    for (auto m = grp.members.rbegin(); m != grp.members.rend(); ++m) {
      const TracedNode& n = t.nodes[m->node];
      if (n.op->kind != OpKind::View || (users_after[n.outputs[0]] == 0 && !live_rep[n.outputs[0]])) continue;
      view_after[n.outputs[0]] = true;
      k->views_after.insert(k->views_after.begin(), {m->node, plan.rep[n.inputs[0]]});
      users_after[plan.rep[n.inputs[0]]]++;
    }
    for (int v : produced)
      if (!view_after[v] && (users_after[v] > 0 || live_rep[v])) {
        const int over = overwritten_input(v);
        const bool per_row = shape_numel(sizes_of(t, v)) != grp.space.rows * grp.space.cols;
        const std::string dst = over >= 0 ? "in" + std::to_string(over) : "out" + std::to_string(k->outputs.size());
        (per_row ? row_stores : elem_stores).push_back(dst + (per_row ? "[r] = " : "[j] = ") + name[v] + ";");
        if (!per_row) store_pass = std::max(store_pass, phase_of(v));
        k->outputs.push_back(v);
        k->in_place.push_back(over);
      }
    for (const auto& [x, result] : col_sums) {  // added into the chunk's partial row, in the last pass
      const std::string summed = name.count(x) ? name[x] : operand(x, 'j');
      store_pass = std::max(store_pass, phase_of(x));
      elem_stores.push_back(std::string("p").append(std::to_string(k->outputs.size())).append("[c] += ").append(summed) + ";");
      k->col_sums.push_back(static_cast<int>(k->outputs.size()));
      k->outputs.push_back(result);
      k->in_place.push_back(-1);
    }
    auto is_col_sum = [&](size_t o) { return std::count(k->col_sums.begin(), k->col_sums.end(), static_cast<int>(o)) > 0; };
    src << "extern \"C\" void " << k->symbol
        << "(const float* const* in, const float* s, float* const* out, int64_t lo, int64_t hi) {\n";
    for (size_t i = 0; i < k->inputs.size(); ++i) {
      if (std::find(k->in_place.begin(), k->in_place.end(), static_cast<int>(i)) != k->in_place.end())
        src << "  float* in" << i << " = const_cast<float*>(in[" << i << "]);\n";
      else
        src << "  const float* __restrict in" << i << " = in[" << i << "];\n";
    }
    for (size_t i = 0; i < k->outputs.size(); ++i)
      if (k->in_place[i] < 0 && !is_col_sum(i)) src << "  float* __restrict out" << i << " = out[" << i << "];\n";
    for (size_t i = 0; i < k->scalars.size(); ++i) src << "  const float s" << i << " = s[" << i << "];\n";
    src << "  (void)in; (void)s; (void)out;\n";
    const bool fast_forms = std::any_of(elem_lines.begin(), elem_lines.end(), [](const Line& l) { return !l.fast_text.empty(); });
    const bool overwrites_input = std::any_of(k->in_place.begin(), k->in_place.end(), [](int i) { return i >= 0; });
    if (grp.flat && fast_forms && !overwrites_input) {
      // Blocks of 64 through the fast forms (sin, cos), again through the
      // full functions when an argument was beyond a fast form's range: the
      // same results (the functions' selects are their definition), as the
      // eager kernel computes them. Not where an output overwrites an input
      // (the second run would read it).
      auto body = [&](bool fast) {
        for (const Line& l : elem_lines) src << "      " << (fast && !l.fast_text.empty() ? l.fast_text : l.text) << "\n";
        for (const std::string& st : elem_stores) src << "      " << st << "\n";
      };
      src << "  for (int64_t b0 = lo; b0 < hi; b0 += 64) {\n    const int64_t b1 = b0 + 64 < hi ? b0 + 64 : hi;\n"
          << "    kiln::pointwise::u32 beyond = 0;\n#pragma omp simd reduction(| : beyond)\n"
          << "    for (int64_t j = b0; j < b1; ++j) {\n";
      body(true);
      src << "    }\n    if (beyond) {\n#pragma omp simd\n    for (int64_t j = b0; j < b1; ++j) {\n";
      body(false);
      src << "    }\n    }\n  }\n}\n\n";
      kernels.push_back(k);
      continue;
    }
    if (grp.flat) {
      src << "#pragma omp simd\n  for (int64_t j = lo; j < hi; ++j) {\n";
      for (const Line& l : elem_lines) src << "    " << l.text << "\n";
      for (const std::string& st : elem_stores) src << "    " << st << "\n";
      src << "  }\n}\n\n";
      kernels.push_back(k);
      continue;
    }
    // Rows [lo, hi); the norm's x / weight / bias come after the loop's inputs.
    const size_t base = k->inputs.size();
    src << "  const int64_t n = " << k->cols << ";\n";
    for (int o : k->col_sums)  // this call's chunk of rows sums into its own partial row
      src << "  float* __restrict p" << o << " = out[" << o << "] + (lo / " << chunk_rows(k->cols) << ") * n;\n"
          << "  for (int64_t c = 0; c < n; ++c) p" << o << "[c] = 0.0f;\n";
    if (k->row_x >= 0) src << "  const float* __restrict rx = in[" << base << "];\n";
    if (k->row_w >= 0) src << "  const float* __restrict rw = in[" << base + 1 << "];\n";
    if (k->row_b >= 0) src << "  const float* __restrict rb = in[" << base + (k->row_w >= 0 ? 2 : 1) << "];\n";
    src << "  for (int64_t r = lo; r < hi; ++r) {\n" << head_prologue;
    int last_pass = store_pass;
    for (const auto& [pass, line] : sums) last_pass = std::max(last_pass, pass);
    auto emit_row_lines = [&](int pass) {
      for (const Line& l : row_lines)
        if (l.phase == pass) src << "    " << l.text << "\n";
    };
    // One column loop per stretch between slice_backward range ends: in each,
    // the range tests are constant and the compiler folds them, where over
    // the whole row each slice cost a masked load per element (the GPT's QKV
    // gradient loop ~2x the time of its memory traffic).
    std::vector<int64_t> col_ends = {0};
    for (int64_t c : col_breaks)
      if (c > 0 && c < k->cols) col_ends.push_back(c);
    col_ends.push_back(k->cols);
    for (int pass = 0; pass <= last_pass; ++pass) {
      emit_row_lines(pass);
      std::string accs;
      for (size_t a = 0; a < sums.size(); ++a)
        if (sums[a].first == pass) {
          src << "    " << (double_sums.count("acc" + std::to_string(a)) ? "double" : "float") << " acc" << a << " = 0.0f;\n";
          accs += (accs.empty() ? "" : ", ") + std::string("acc") + std::to_string(a);
        }
      if (accs.empty() && pass != store_pass) continue;
      for (size_t seg = 0; seg + 1 < col_ends.size(); ++seg) {
        const int64_t hi = col_ends[seg + 1];
        src << "#pragma omp simd" << (accs.empty() ? "" : " reduction(+ : " + accs + ")") << "\n    for (int64_t c = "
            << col_ends[seg] << "; c < " << (hi == k->cols ? "n" : std::to_string(hi))
            << "; ++c) {\n      const int64_t j = r * n + c;\n      (void)j;\n";
        for (size_t l = 0; l < elem_lines.size(); ++l) {
          const bool sum_line =
              std::any_of(sums.begin(), sums.end(), [&](auto& s) { return s.second == static_cast<int>(l); });
          if (sum_line ? elem_lines[l].phase == pass : elem_lines[l].phase <= pass)
            src << "      " << elem_lines[l].text << "\n";
        }
        if (pass == store_pass)
          for (const std::string& st : elem_stores) src << "      " << st << "\n";
        src << "    }\n";
      }
    }
    emit_row_lines(last_pass + 1);
    for (const std::string& st : row_stores) src << "    " << st << "\n";
    src << "  }\n}\n\n";
    kernels.push_back(k);
  }
  return Generated{src.str(), std::move(kernels)};
}

// Stage "build": the source compiled (or found in the disk cache) and each
// loop's function bound; false (and *warning) when that fails.
bool build(Generated& code, std::string* warning) {
  const std::shared_ptr<SharedObject> so = load_or_build(code.source, warning);
  if (!so) return false;
  for (auto& k : code.kernels) {
    k->library = so;
    k->fn = reinterpret_cast<FusedFn>(::dlsym(so->handle, k->symbol.c_str()));
    if (!k->fn) {
      *warning = "generated code lacks " + k->symbol + "; running the graph with the interpreter";
      return false;
    }
  }
  return true;
}

// The backend: the pipeline's stages after "simplify" (passes.cpp), in
// order: fold bias adds, fuse, generate, build; then each group runs as one
// entry of the plan, where the schedule put it ("run": the interpreter).
void generate_cpp(const Trace& t, Plan& plan, std::string* warning) {
  fold_bias_adds(t, plan);
  std::vector<int> seq = plan.order;
  std::vector<Group> groups = fuse(t, plan, seq);
  if (groups.empty()) return;
  Generated code = generate(t, plan, groups, seq);
  plan.source = code.source;
  if (!build(code, warning)) return;
  std::vector<int> order;
  std::vector<std::shared_ptr<const FusedEntry>> fused;
  for (int item : seq) {
    order.push_back(item >= 0 ? item : code.kernels[-1 - item]->nodes().front());
    fused.push_back(item >= 0 ? nullptr : code.kernels[-1 - item]);
  }
  plan.order = std::move(order);
  plan.fused = std::move(fused);
}

const bool cpp_registered = (register_compile_backend("cpp", generate_cpp), true);

}  // namespace

}  // namespace kiln::compiler::detail

namespace kiln::compiler {

// What role_in can place in a loop: the ops it names, views (when they keep
// the element order) and the elementwise ops with a functor.
bool fuses(std::string_view op_name) {
  const OpDef* op = find_op(op_name);
  if (!op) return false;
  if (op->kind == OpKind::View || op->pointwise) return true;
  return op_name == "sum" || op_name == "layer_norm" || op_name == "slice_backward";
}

}  // namespace kiln::compiler
