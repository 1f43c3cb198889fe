// Kernels that write values without reading tensors (fill, arange,
// linspace, eye, random); the converting copy is copy_kernel.cpp.
#include "core/philox.h"
#include "core/convert.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"

namespace kiln::cpu {
namespace {

// Calls fn(T*, int64_t index) for every element of a contiguous output,
// in parallel.
template <class F>
void fill_indexed(const Tensor& out, F fn) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data_ptr<T>();
    parallel_for(0, out.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = fn(T{}, i);
    });
  });
}

}  // namespace

void fill_kernel(const OpCall& c) {
  const double v = c.attrs.get_double("value");
  const Tensor& out = c.outputs[0];
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T tv = convert<T>(v);
    map_elementwise<T>(out, {}, [=]() { return tv; });
  });
}

void arange_kernel(const OpCall& c) {
  const double start = c.attrs.get_double("start"), step = c.attrs.get_double("step");
  fill_indexed(c.outputs[0], [=](auto tag, int64_t i) {
    return convert<decltype(tag)>(start + step * static_cast<double>(i));
  });
}

void linspace_kernel(const OpCall& c) {
  const double start = c.attrs.get_double("start"), end = c.attrs.get_double("end");
  const int64_t n = c.outputs[0].numel();
  const double step = n > 1 ? (end - start) / static_cast<double>(n - 1) : 0.0;
  // Like PyTorch, the second half counts back from `end` so both ends are exact.
  fill_indexed(c.outputs[0], [=](auto tag, int64_t i) {
    const double v = i < n / 2 ? start + step * static_cast<double>(i) : end - step * static_cast<double>(n - 1 - i);
    return convert<decltype(tag)>(v);
  });
}

void eye_kernel(const OpCall& c) {
  const int64_t cols = c.outputs[0].size(1);
  fill_indexed(c.outputs[0], [=](auto tag, int64_t i) { return convert<decltype(tag)>(i / cols == i % cols ? 1 : 0); });
}

void rand_kernel(const OpCall& c) {
  const uint64_t seed = static_cast<uint64_t>(c.attrs.get_int("seed"));
  const uint64_t offset = static_cast<uint64_t>(c.attrs.get_int("offset"));
  const bool normal = c.attrs.get_bool("normal");
  // One Philox call per element: 4 words give a 53-bit uniform pair for Box-Muller.
  fill_indexed(c.outputs[0], [=](auto tag, int64_t i) {
    using T = decltype(tag);
    const auto r = philox4x32(offset + static_cast<uint64_t>(i), seed);
    if (normal) {
      const double u1 = 1.0 - uniform53(r[0], r[1]);  // (0, 1]: log is finite
      const double u2 = uniform53(r[2], r[3]);
      return convert<T>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
    }
    if constexpr (std::is_same_v<T, double>) return uniform53(r[0], r[1]);
    else {
      T v = convert<T>(uniform_from_bits(r[0]));
      // Rounding to a 16-bit float can reach 1.0; keep the interval half-open.
      if (static_cast<float>(v) >= 1.0f) v = convert<T>(0.0f);
      return v;
    }
  });
}

void randint_kernel(const OpCall& c) {
  const int64_t low = c.attrs.get_int("low"), high = c.attrs.get_int("high");
  const uint64_t seed = static_cast<uint64_t>(c.attrs.get_int("seed"));
  const uint64_t offset = static_cast<uint64_t>(c.attrs.get_int("offset"));
  const uint64_t range = static_cast<uint64_t>(high - low);
  fill_indexed(c.outputs[0], [=](auto tag, int64_t i) {
    const auto r = philox4x32(offset + static_cast<uint64_t>(i), seed);
    const uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    return convert<decltype(tag)>(low + static_cast<int64_t>(bits % range));
  });
}

}  // namespace kiln::cpu
