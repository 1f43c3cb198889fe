// Printing in PyTorch's format: `tensor([[1.0000, 2.5000], ...])`, integer
// valued floats as `1.`, scientific notation for wide ranges, and at most
// three items per edge when the tensor has more than 1000 elements.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kiln/ops.h"
#include "kiln/tensor.h"

namespace kiln {
namespace {

constexpr int64_t kThreshold = 1000, kEdgeItems = 3;

struct Formatter {
  enum class Mode { Int, IntFloat, Fixed, Sci, Bool } mode;
  int width = 1;

  std::string format(double v) const {
    char buf[64];
    if (mode == Mode::Bool) return v != 0 ? "True" : "False";
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (mode) {
      case Mode::Int: std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v)); break;
      case Mode::IntFloat: std::snprintf(buf, sizeof buf, "%.0f.", v); break;
      case Mode::Fixed: std::snprintf(buf, sizeof buf, "%.4f", v); break;
      default: std::snprintf(buf, sizeof buf, "%.4e", v); break;
    }
    return buf;
  }
};

// The values that will be shown (edges only when summarising).
void collect(const Tensor& t, bool summarize, std::vector<double>& out) {
  if (t.dim() == 0) {
    out.push_back(t.item<double>());
    return;
  }
  const int64_t n = t.size(0);
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    collect(t.select(0, i), summarize, out);
  }
}

Formatter make_formatter(const Tensor& t, const std::vector<double>& vals) {
  Formatter f;
  if (t.dtype() == kBool) f.mode = Formatter::Mode::Bool;
  else if (!is_floating(t.dtype())) f.mode = Formatter::Mode::Int;
  else {
    double mx = 0, mn = INFINITY;
    bool all_int = true;
    for (double v : vals) {
      if (!std::isfinite(v)) continue;
      all_int = all_int && v == std::nearbyint(v);
      mx = std::max(mx, std::fabs(v));
      if (v != 0) mn = std::min(mn, std::fabs(v));
    }
    if (all_int) f.mode = mx > 1e8 ? Formatter::Mode::Sci : Formatter::Mode::IntFloat;
    else f.mode = (mx / mn > 1000.0 || mx > 1e8 || mn < 1e-4) ? Formatter::Mode::Sci : Formatter::Mode::Fixed;
  }
  for (double v : vals) f.width = std::max<int>(f.width, static_cast<int>(f.format(v).size()));
  return f;
}

void print_rec(std::ostream& os, const Tensor& t, const Formatter& f, bool summarize, int indent) {
  if (t.dim() == 0) {
    std::string s = f.format(t.item<double>());
    os << std::string(f.width - s.size(), ' ') << s;
    return;
  }
  os << "[";
  const int64_t n = t.size(0);
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (t.dim() == 1 ? " ..., " : "...,\n" + std::string(t.dim() > 2 ? 1 : 0, '\n') + std::string(indent + 1, ' '));
      i = n - kEdgeItems;
    }
    print_rec(os, t.select(0, i), f, summarize, indent + 1);
    if (i + 1 < n) {
      if (t.dim() == 1) os << ", ";
      else os << "," << std::string(t.dim() - 1, '\n') << std::string(indent + 1, ' ');
    }
  }
  os << "]";
}

}  // namespace

std::string Tensor::to_string() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "[ undefined tensor ]";
  // operator<< cannot take the caller's location: the break reports none.
  detail::on_concrete_value(t.impl(), "printing a tensor", SourceLocation());
  const bool summarize = t.numel() > kThreshold;
  os << "tensor(";
  if (t.is_meta()) {  // no values: the size, as PyTorch prints it
    os << "..., device='meta', size=(";
    for (int64_t i = 0; i < t.dim(); ++i) os << (i ? ", " : "") << t.size(i);
    os << (t.dim() == 1 ? ",)" : ")");
  } else if (t.numel() == 0) {
    os << "[]";
    if (t.dim() != 1) {
      os << ", size=(";
      for (int64_t i = 0; i < t.dim(); ++i) os << (i ? ", " : "") << t.size(i);
      os << (t.dim() == 1 ? ",)" : ")");
    }
  } else {
    std::vector<double> vals;
    collect(t, summarize, vals);
    print_rec(os, t, make_formatter(t, vals), summarize, 7);
  }
  if (t.dtype() != kFloat32 && t.dtype() != kInt64 && t.dtype() != kBool) os << ", dtype=" << t.dtype();
  return os << ")";
}

}  // namespace kiln
