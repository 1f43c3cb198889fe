// The "cpp" backend: runs of float32 elementwise nodes over one shape become
// one generated C++ loop, so their intermediates are never written to
// memory. The source is compiled with the system compiler into a shared
// object cached on disk under $KILN_CACHE_DIR (default ~/.cache/kiln), keyed
// by a hash of source, compiler and flags, and loaded with dlopen; a second
// run or process compiles nothing. Writes go to a file unique to the process
// and are renamed into place, so processes compiling the same kernel at once
// never see a partial file. A failing compiler leaves the graph to the
// interpreter, with a warning. The loop runs over [lo, hi) so kiln's thread
// pool splits it.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>

#include "graph.h"
#include "kiln/runtime.h"

namespace kiln::compiler::detail {

using FusedFn = void (*)(const float* const* in, const float* scalars, float* const* out, int64_t lo, int64_t hi);

struct FusedKernel {
  std::vector<int> nodes;    // in order; run one by one when the loop cannot be used
  std::vector<int> inputs;   // tensor inputs, same shape as the loop
  std::vector<int> scalars;  // 0-dim inputs, read once per call
  std::vector<int> outputs;  // values needed after the loop
  // Per output: the index in inputs of the graph input it overwrites in
  // place (the loop writes a written-back value straight into its
  // destination, Note [Writes to real tensors]), or -1.
  std::vector<int> in_place;
  // A row kernel (a norm feeding the loop): its input, weight and bias
  // (-1 when absent), and the row length; the loop then runs per row.
  int row_x = -1, row_w = -1, row_b = -1;
  int64_t row_len = 0;
  std::string symbol;
  FusedFn fn = nullptr;
};

namespace {

// C++ for one elementwise op on operands a (and b); empty when not fusable.
std::string expression(const TracedNode& n, const std::string& a, const std::string& b) {
  const std::string& op = n.op->name;
  auto num = [](double x) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9ef", x);
    return std::string(buf);
  };
  if (op == "add") return a + " + " + num(n.attrs.get_double("alpha")) + " * " + b;
  if (op == "sub") return a + " - " + num(n.attrs.get_double("alpha")) + " * " + b;
  if (op == "mul") return a + " * " + b;
  if (op == "div") return a + " / " + b;
  if (op == "neg") return "-" + a;
  if (op == "abs") return "__builtin_fabsf(" + a + ")";
  if (op == "exp") return "expf(" + a + ")";
  if (op == "log") return "logf(" + a + ")";
  if (op == "sqrt") return "__builtin_sqrtf(" + a + ")";
  if (op == "rsqrt") return "1.0f / __builtin_sqrtf(" + a + ")";
  if (op == "reciprocal") return "1.0f / " + a;
  if (op == "sin") return "sinf(" + a + ")";
  if (op == "cos") return "cosf(" + a + ")";
  if (op == "tanh") return "tanhf(" + a + ")";
  if (op == "erf") return "erff(" + a + ")";
  if (op == "square") return a + " * " + a;
  if (op == "sigmoid") return "1.0f / (1.0f + expf(-" + a + "))";
  if (op == "silu") return a + " / (1.0f + expf(-" + a + "))";
  if (op == "relu") return a + " > 0.0f ? " + a + " : (" + a + " != " + a + " ? " + a + " : 0.0f)";
  if (op == "gelu") return "0.5f * " + a + " * (1.0f + erff(" + a + " * 0.70710678f))";
  if (op == "gelu_tanh")
    return "0.5f * " + a + " * (1.0f + tanhf(0.7978845608f * (" + a + " + 0.044715f * " + a + " * " + a + " * " + a +
           ")))";
  return "";
}

int arity(const std::string& op) {
  return op == "add" || op == "sub" || op == "mul" || op == "div" ? 2 : 1;
}

const Shape& sizes_of(const Trace& t, int v) {
  return t.value_ext[v] >= 0 ? t.externals[t.value_ext[v]].sizes() : t.values[v]->sizes;
}
DType dtype_of_value(const Trace& t, int v) {
  return t.value_ext[v] >= 0 ? t.externals[t.value_ext[v]].dtype() : t.values[v]->dtype;
}
bool contiguous_value(const Trace& t, int v) {
  if (t.value_ext[v] >= 0) return t.externals[t.value_ext[v]].is_contiguous();
  return t.values[v]->strides == contiguous_strides(t.values[v]->sizes);
}

// A node the loop can take: a known elementwise op producing float32 of the
// loop's shape from float32 operands of that shape (contiguous) or 0-dim.
bool fusable(const Trace& t, const Plan& p, const TracedNode& n, const Shape& shape) {
  if (n.op->kind != OpKind::Compute || n.outputs.size() != 1 || expression(n, "a", "b").empty()) return false;
  if (static_cast<int>(n.inputs.size()) != arity(n.op->name)) return false;
  const int out = n.outputs[0];
  if (dtype_of_value(t, out) != kFloat32 || sizes_of(t, out) != shape) return false;
  for (int in : n.inputs) {
    const int v = p.rep[in];
    if (sizes_of(t, v).empty()) continue;  // a scalar: any dtype, converted once
    if (dtype_of_value(t, v) != kFloat32 || sizes_of(t, v) != shape || !contiguous_value(t, v)) return false;
  }
  return true;
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

std::string cache_dir() {
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/kiln";
}

void make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0755);
}

std::atomic<int64_t> compiler_run_count{0};

// Loaded shared objects by cache file, kept open for the process's life.
std::mutex so_mu;
std::map<std::string, void*>& loaded() {
  static std::map<std::string, void*> m;
  return m;
}

// The shared object for `source`, from the disk cache or compiled now.
void* load_or_build(const std::string& source, std::string* warning) {
  const char* cxx_env = std::getenv("KILN_CXX");
  const std::string cxx = cxx_env && *cxx_env ? cxx_env : "c++";
  // libmvec (glibc) gives the vectorised expf/tanhf/... the loops call.
  const std::string flags = "-O3 -march=native -fno-math-errno -fno-trapping-math -fopenmp-simd -shared -fPIC";
  const std::string libs = "-lmvec -lm";
  char hash[32];
  std::snprintf(hash, sizeof hash, "%016zx", std::hash<std::string>{}(source + "\n" + cxx + "\n" + flags));
  const std::string dir = cache_dir(), so = dir + "/" + hash + ".so";
  std::lock_guard<std::mutex> lock(so_mu);
  if (auto it = loaded().find(so); it != loaded().end()) return it->second;
  if (::access(so.c_str(), R_OK) != 0) {
    make_dirs(dir);
    const std::string tmp = dir + "/" + hash + "." + std::to_string(::getpid()) + ".tmp";
    {
      std::ofstream f(tmp + ".cpp");
      f << source;
    }
    const std::string cmd = cxx + " " + flags + " -o " + tmp + ".so " + tmp + ".cpp " + libs + " 2>" + tmp + ".log";
    compiler_run_count++;
    const int rc = std::system(cmd.c_str());
    std::ifstream log(tmp + ".log");
    const std::string diag((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    std::remove((tmp + ".cpp").c_str());
    std::remove((tmp + ".log").c_str());
    if (rc != 0) {
      std::remove((tmp + ".so").c_str());
      *warning = "the C++ compiler failed (" + cmd + "): " + diag.substr(0, 300) + "; running the graph with the interpreter";
      return nullptr;
    }
    std::rename((tmp + ".so").c_str(), so.c_str());  // atomic: readers see all of it or nothing
  }
  void* h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    *warning = std::string("cannot load ") + so + ": " + ::dlerror() + "; running the graph with the interpreter";
    return nullptr;
  }
  loaded().emplace(so, h);
  return h;
}

}  // namespace

void generate_cpp(const Trace& t, Plan& plan, std::string* warning) {
  // Uses of each value outside its node, to know what a loop must write.
  std::vector<int> users_after(t.num_values(), 0);
  for (int n : plan.order)
    for (int in : t.nodes[n].inputs) users_after[plan.rep[in]]++;
  std::vector<bool> live_rep(t.num_values(), false);
  for (int v = 0; v < t.num_values(); ++v)
    if (t.live[v] || (!plan.saved.empty() && plan.saved[v])) live_rep[plan.rep[v]] = true;  // saved: read by the backward
  // Written-back values whose destination the graph read as an input (the
  // key says which, "write v over x"): value -> that input.
  std::map<int, int> overwrites;
  for (const Trace::Writeback& w : t.writebacks)
    if (w.over >= 0) overwrites.emplace(plan.rep[w.value], plan.rep[w.over]);

  // A group: loop nodes over one shape, plus the 0-dim nodes among them
  // (scalar conversions of C++ numbers), which run just before the loop.
  struct Group {
    std::vector<size_t> loop, prelude;  // positions in plan.order
    int head = -1;                      // position of a norm computed row by row inside the loop
  };
  auto scalar_node = [&](const TracedNode& n) {
    if (n.op->kind != OpKind::Compute) return false;
    for (int o : n.outputs)
      if (!sizes_of(t, o).empty()) return false;
    for (int in : n.inputs)
      if (!sizes_of(t, plan.rep[in]).empty()) return false;
    return true;
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < plan.order.size();) {
    const TracedNode& first = t.nodes[plan.order[i]];
    const Shape shape = first.outputs.size() == 1 ? sizes_of(t, first.outputs[0]) : Shape{};
    Group g;
    if (row_head(t, plan, first)) g.head = static_cast<int>(i);
    for (size_t j = g.head >= 0 ? i + 1 : i; j < plan.order.size(); ++j) {
      const TracedNode& n = t.nodes[plan.order[j]];
      if (!shape.empty() && fusable(t, plan, n, shape)) g.loop.push_back(j);
      else if (!g.loop.empty() && scalar_node(n)) g.prelude.push_back(j);
      else break;
    }
    if (g.loop.size() < (g.head >= 0 ? 1u : 2u)) {  // one op alone is already a tuned kernel
      ++i;
      continue;
    }
    while (!g.prelude.empty() && g.prelude.back() > g.loop.back()) g.prelude.pop_back();
    i = g.loop.back() + 1;
    groups.push_back(std::move(g));
  }
  if (groups.empty()) return;

  std::ostringstream src;
  src << "// kiln fused elementwise loops\n#include <cstdint>\n\n"
      << "// Vector variants from glibc's libmvec, so the loops vectorise through these calls.\nextern \"C\" {\n";
  for (const char* f : {"expf", "logf", "sinf", "cosf", "tanhf", "erff"})
    src << "#pragma omp declare simd notinbranch\nfloat " << f << "(float);\n";
  src << "}\n\n";
  std::vector<std::shared_ptr<FusedKernel>> kernels;
  for (size_t g = 0; g < groups.size(); ++g) {
    auto k = std::make_shared<FusedKernel>();
    k->symbol = "kiln_fused_" + std::to_string(g);
    std::map<int, std::string> name;  // value -> C++ expression holding it
    std::vector<int> produced;
    std::ostringstream body, row_prologue;
    if (groups[g].head >= 0) {
      const TracedNode& n = t.nodes[plan.order[groups[g].head]];
      k->nodes.push_back(plan.order[groups[g].head]);
      const bool has_w = n.attrs.get_bool("has_weight"), has_b = n.attrs.get_bool("has_bias");
      const bool rms = n.attrs.get_bool("rms");
      k->row_len = n.attrs.get_int("n");
      k->row_x = plan.rep[n.inputs[0]];
      if (has_w) k->row_w = plan.rep[n.inputs[1]];
      if (has_b) k->row_b = plan.rep[n.inputs[has_w ? 2 : 1]];
      for (int in : n.inputs) users_after[plan.rep[in]]--;
      char eps[40];
      std::snprintf(eps, sizeof eps, "%.9ef", n.attrs.get_double("eps"));
      row_prologue << "    const float* xr = rx + r * n;\n    float mean = 0.0f, var = 0.0f;\n";
      if (!rms) row_prologue << "#pragma omp simd reduction(+ : mean)\n    for (int64_t c = 0; c < n; ++c) mean += xr[c];\n"
                             << "    mean /= static_cast<float>(n);\n";
      row_prologue << "#pragma omp simd reduction(+ : var)\n    for (int64_t c = 0; c < n; ++c) var += (xr[c] - mean) * (xr[c] - mean);\n"
                   << "    const float rstd = 1.0f / __builtin_sqrtf(var / static_cast<float>(n) + " << eps << ");\n";
      const int out = n.outputs[0];
      body << "    const float v" << out << " = (xr[c] - mean) * rstd" << (has_w ? " * rw[c]" : "") << (has_b ? " + rb[c]" : "")
           << ";\n";
      name[out] = std::string("v").append(std::to_string(out));
      produced.push_back(out);
    }
    for (size_t i : groups[g].loop) {
      const TracedNode& n = t.nodes[plan.order[i]];
      k->nodes.push_back(plan.order[i]);
      std::string operand[2];
      for (size_t a = 0; a < n.inputs.size(); ++a) {
        const int v = plan.rep[n.inputs[a]];
        if (!name.count(v)) {
          if (sizes_of(t, v).empty()) {
            name[v] = std::string("s").append(std::to_string(k->scalars.size()));
            k->scalars.push_back(v);
          } else {
            name[v] = std::string("in").append(std::to_string(k->inputs.size())).append("[j]");
            k->inputs.push_back(v);
          }
        }
        operand[a] = name[v];
      }
      const int out = n.outputs[0];
      body << "    const float v" << out << " = " << expression(n, operand[0], operand[1]) << ";\n";
      name[out] = std::string("v").append(std::to_string(out));  // (operator+ trips GCC 12's -Wrestrict)
      produced.push_back(out);
      for (int in : n.inputs) users_after[plan.rep[in]]--;
    }
    // Every input is loaded before any output is stored, in each iteration
    // j, so an output may overwrite the input it replaces at the same j
    // (that pointer is then declared without __restrict).
    auto overwritten_input = [&](int v) {
      const auto it = overwrites.find(v);
      if (k->row_len > 0 || it == overwrites.end()) return -1;
      const auto in = std::find(k->inputs.begin(), k->inputs.end(), it->second);
      const int i = in == k->inputs.end() ? -1 : static_cast<int>(in - k->inputs.begin());
      return std::find(k->in_place.begin(), k->in_place.end(), i) == k->in_place.end() ? i : -1;
    };
    for (int v : produced)
      if (users_after[v] > 0 || live_rep[v]) {
        const int over = overwritten_input(v);
        body << "    " << (over >= 0 ? "in" + std::to_string(over) : "out" + std::to_string(k->outputs.size())) << "[j] = v"
             << v << ";\n";
        k->outputs.push_back(v);
        k->in_place.push_back(over);
      }
    // Row kernels take rows [lo, hi) and the norm's x / weight / bias after
    // the loop's inputs; element c of row r is at j = r * n + c.
    const bool rows = k->row_len > 0;
    src << "extern \"C\" void " << k->symbol
        << "(const float* const* in, const float* s, float* const* out, int64_t lo, int64_t hi) {\n";
    for (size_t i = 0; i < k->inputs.size(); ++i) {
      if (std::find(k->in_place.begin(), k->in_place.end(), static_cast<int>(i)) != k->in_place.end())
        src << "  float* in" << i << " = const_cast<float*>(in[" << i << "]);\n";
      else
        src << "  const float* __restrict in" << i << " = in[" << i << "];\n";
    }
    for (size_t i = 0; i < k->outputs.size(); ++i)
      if (k->in_place[i] < 0) src << "  float* __restrict out" << i << " = out[" << i << "];\n";
    for (size_t i = 0; i < k->scalars.size(); ++i) src << "  const float s" << i << " = s[" << i << "];\n";
    src << "  (void)in; (void)s; (void)out;\n";
    if (rows) {
      const size_t base = k->inputs.size();
      src << "  const int64_t n = " << k->row_len << ";\n  const float* __restrict rx = in[" << base << "];\n";
      if (k->row_w >= 0) src << "  const float* __restrict rw = in[" << base + 1 << "];\n";
      if (k->row_b >= 0) src << "  const float* __restrict rb = in[" << base + (k->row_w >= 0 ? 2 : 1) << "];\n";
      src << "  for (int64_t r = lo; r < hi; ++r) {\n" << row_prologue.str()
          << "#pragma omp simd\n    for (int64_t c = 0; c < n; ++c) {\n      const int64_t j = r * n + c;\n"
          << body.str() << "    }\n  }\n}\n\n";
    } else {
      src << "#pragma omp simd\n  for (int64_t j = lo; j < hi; ++j) {\n" << body.str() << "  }\n}\n\n";
    }
    kernels.push_back(k);
  }
  plan.source = src.str();
  void* so = load_or_build(plan.source, warning);
  if (!so) return;
  for (auto& k : kernels) {
    k->fn = reinterpret_cast<FusedFn>(::dlsym(so, k->symbol.c_str()));
    if (!k->fn) {
      *warning = "generated code lacks " + k->symbol + "; running the graph with the interpreter";
      return;
    }
  }
  // Each group becomes its scalar nodes, then one entry for the loop.
  std::vector<int> order;
  std::vector<std::shared_ptr<FusedKernel>> fused;
  std::vector<int> group_at(plan.order.size(), -1);  // position -> group it belongs to
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i : groups[g].loop) group_at[i] = static_cast<int>(g);
    if (groups[g].head >= 0) group_at[groups[g].head] = static_cast<int>(g);
    for (size_t i : groups[g].prelude) group_at[i] = static_cast<int>(g);
  }
  for (size_t i = 0; i < plan.order.size(); ++i) {
    const int g = group_at[i];
    if (g < 0) {
      order.push_back(plan.order[i]);
      fused.push_back(nullptr);
    } else if (i == (groups[g].head >= 0 ? static_cast<size_t>(groups[g].head) : groups[g].loop.front())) {
      for (size_t p : groups[g].prelude) order.push_back(plan.order[p]), fused.push_back(nullptr);
      order.push_back(plan.order[i]);
      fused.push_back(kernels[g]);
    }
  }
  plan.order = std::move(order);
  plan.fused = std::move(fused);
}

const std::vector<int>& fused_nodes(const FusedKernel& k) { return k.nodes; }
int64_t compiler_runs() { return compiler_run_count.load(); }

bool run_fused(const FusedKernel& k, std::vector<Tensor>& vals, const Trace& t) {
  const Shape& shape = t.values[t.nodes[k.nodes.front()].outputs[0]]->sizes;
  const int64_t n = shape_numel(shape);
  std::vector<const float*> in;
  for (int v : k.inputs) {
    const Tensor& x = vals[v];
    // The structure key fixes dtypes and layouts, but not every size under
    // dynamic shapes: check before trusting the loop.
    if (x.dtype() != kFloat32 || x.numel() != n || !x.is_contiguous()) return false;
    in.push_back(x.data_ptr<float>());
  }
  if (k.row_len > 0) {
    for (int v : {k.row_x, k.row_w, k.row_b}) {
      if (v < 0) continue;
      const Tensor& x = vals[v];
      const int64_t want = v == k.row_x ? n : k.row_len;
      if (x.dtype() != kFloat32 || x.numel() != want || !x.is_contiguous()) return false;
      in.push_back(x.data_ptr<float>());
    }
  }
  std::vector<float> scalars;
  for (int v : k.scalars) {
    if (vals[v].numel() != 1) return false;
    scalars.push_back(vals[v].item<float>());
  }
  // An input overwritten in place must not overlap the others (the loop
  // declares them __restrict).
  for (int over : k.in_place) {
    if (over < 0) continue;
    const float* a = in[static_cast<size_t>(over)];
    for (size_t i = 0; i < k.inputs.size(); ++i)
      if (static_cast<int>(i) != over && in[i] < a + n && a < in[i] + n) return false;
  }
  std::vector<float*> out;
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    const int v = k.outputs[o];
    vals[v] = k.in_place[o] >= 0 ? vals[k.inputs[static_cast<size_t>(k.in_place[o])]] : empty(shape, kFloat32);
    out.push_back(vals[v].data_ptr<float>());
  }
  const FusedFn fn = k.fn;
  const int64_t work = k.row_len > 0 ? n / k.row_len : n;  // rows, or elements
  const int64_t grain = k.row_len > 0 ? std::max<int64_t>(1, 32768 / k.row_len) : 32768;
  parallel_for(0, work, grain, [&](int64_t lo, int64_t hi) { fn(in.data(), scalars.data(), out.data(), lo, hi); });
  return true;
}

}  // namespace kiln::compiler::detail
