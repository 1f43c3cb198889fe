// Test helpers: read any tensor as float64 values without going through
// kiln's kernels, build inputs in several memory layouts, and compare.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::test {

// Element at a multi-index, read through sizes/strides directly.
inline double read_at(const Tensor& t, int64_t offset_elems) {
  const char* base = static_cast<const char*>(t.raw_data());
  return visit_dtype(t.dtype(), [&](auto tag) -> double {
    using T = decltype(tag);
    const T v = reinterpret_cast<const T*>(base)[offset_elems];
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return static_cast<double>(static_cast<float>(v));
    else return static_cast<double>(v);
  });
}

// All elements in row-major logical order, as doubles.
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  const int64_t n = t.numel();
  out.reserve(static_cast<size_t>(n));
  std::vector<int64_t> idx(t.dim(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < t.dim(); ++d) off += idx[d] * t.stride(d);
    out.push_back(read_at(t, off));
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Multi-index of flat position i in `shape`.
inline std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

// Value of broadcast operand `t` at the multi-index `idx` of the output shape.
inline double at_broadcast(const Tensor& t, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  const int64_t lead = static_cast<int64_t>(idx.size()) - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) off += (t.size(d) == 1 ? 0 : idx[lead + d]) * t.stride(d);
  return read_at(t, off);
}

// ChannelsLast: dim 1 stored innermost (torch.channels_last for 4 dims,
// channels_last_3d for 5, the same order for 3).
enum class Layout { Contiguous, Transposed, Strided, Broadcast, ChannelsLast };
inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Strided: return "strided";
    case Layout::ChannelsLast: return "channels-last";
    default: return "broadcast";
  }
}
inline std::vector<Layout> all_layouts() {
  return {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Broadcast, Layout::ChannelsLast};
}

// Random normal values (scaled) of `shape` laid out as asked, in dtype dt.
inline Tensor make_input(const Shape& shape, Layout layout, DType dt, double scale = 1.0) {
  auto gen = [&](const Shape& s) { return (randn(s, kFloat64) * scale).to(dt); };
  const int64_t nd = static_cast<int64_t>(shape.size());
  switch (layout) {
    case Layout::Contiguous: return gen(shape);
    case Layout::Transposed: {
      if (nd < 2) return gen(shape);
      Shape s = shape;
      std::swap(s[nd - 1], s[nd - 2]);
      return gen(s).transpose(-1, -2);
    }
    case Layout::Strided: {
      if (nd == 0) return gen(shape);
      Shape s = shape;
      s[nd - 1] = s[nd - 1] * 2 + 1;
      return gen(s).slice(-1, 1, std::nullopt, 2).narrow(-1, 0, shape[nd - 1]);
    }
    case Layout::ChannelsLast: {
      if (nd < 3) return gen(shape);
      Shape stored = {shape[0]}, back = {0, nd - 1};
      for (int64_t d = 2; d < nd; ++d) stored.push_back(shape[static_cast<size_t>(d)]), back.push_back(d - 1);
      stored.push_back(shape[1]);
      return gen(stored).permute(back);
    }
    case Layout::Broadcast: {
      if (nd == 0) return gen(shape);
      Shape s = shape;
      s[0] = 1;
      return gen(s).expand(shape);
    }
  }
  return gen(shape);
}

inline bool close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// Checks every element of `got` against `want` (row-major), reporting the first few misses.
inline void expect_close(const Tensor& got, const std::vector<double>& want, double rtol, double atol,
                         const std::string& what) {
  const auto g = values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < g.size() && misses < 5; ++i)
    if (!close(g[i], want[i], rtol, atol)) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << want[i];
      ++misses;
    }
}

// A float64 reference value as the 16-bit dtype would store it (so overflow
// to inf in float16 is expected, not an error); other dtypes unchanged.
inline double round_to(DType dt, double v) {
  if (dt == kFloat16) return static_cast<float>(Half(static_cast<float>(v)));
  if (dt == kBFloat16) return static_cast<float>(BFloat16(static_cast<float>(v)));
  return v;
}

struct Tol {
  double rtol, atol;
};
inline Tol tol_for(DType dt) {
  switch (dt) {
    case kFloat64: return {1e-12, 1e-12};
    case kFloat32: return {2e-5, 2e-6};
    case kFloat16: return {2e-3, 2e-3};
    case kBFloat16: return {1.6e-2, 1e-2};
    default: return {0, 0};
  }
}

// Runs fn and checks it throws kiln::Error whose message contains every needle.
// An environment variable set for a scope, then restored to what it was
// (unset if it was): a test must not undo what the run was started with
// (KILN_CXX naming a cross compiler under qemu).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error containing '" << (needles.empty() ? "" : needles[0]) << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "message: " << msg << "\nmissing: " << n;
  }
}

}  // namespace kiln::test
