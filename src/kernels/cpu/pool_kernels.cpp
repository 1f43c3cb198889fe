// Max pooling over 1 to 3 spatial dims, as 3 (missing leading dims of size
// 1): one pass over each output's window, planes (n, c) split over the
// thread pool. Indices are flat within the input plane, as PyTorch's.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/kernel_tensors.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd.h"

namespace kiln::cpu {
namespace {

struct Window {
  int64_t in[3], out[3], kernel[3], stride[3], padding[3], dilation[3];
  int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  int64_t out_plane() const { return out[0] * out[1] * out[2]; }
};

Window window(const Tensor& x, const Attrs& a) {
  Window w;
  const int64_t d = x.dim() - 2;
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t j = i - (3 - d);  // the attribute's dim, or < 0 for a missing leading one
    const auto at = [&](const char* name, int64_t none) { return j < 0 ? none : a.get_shape(name)[static_cast<size_t>(j)]; };
    w.in[i] = j < 0 ? 1 : x.size(2 + j);
    w.out[i] = at("out", 1), w.kernel[i] = at("kernel", 1), w.stride[i] = at("stride", 1);
    w.padding[i] = at("padding", 0), w.dilation[i] = at("dilation", 1);
  }
  return w;
}

// Where each output's window starts along one dim, and its taps [first,
// last) inside the input: the same for every plane, found once per call.
struct DimTaps {
  std::vector<int64_t> start, first, last;
};
DimTaps dim_taps(const Window& w, int i) {
  DimTaps t;
  for (int64_t o = 0; o < w.out[i]; ++o) {
    const int64_t start = o * w.stride[i] - w.padding[i], dil = w.dilation[i];
    const int64_t first = start < 0 ? (-start + dil - 1) / dil : 0;
    const int64_t last = std::min(w.kernel[i], (w.in[i] - start + dil - 1) / dil);
    t.start.push_back(start), t.first.push_back(first), t.last.push_back(std::max(first, last));
  }
  return t;
}

// One step of the search: v at `at` replaces the best when larger, or NaN
// (a NaN wins, the last one). Branch-free (masks, not jumps): on random
// data a branch on "v > best" mispredicts half the time.
template <class T>
inline void offer(T v, int64_t at, T& best, int64_t& where) {
  const int64_t take = -static_cast<int64_t>(static_cast<int>(v > best) | static_cast<int>(v != v));
  where = (at & take) | (where & ~take);
  best = v != v ? v : std::max(best, v);
}

// Each output row (od, oh) in two parts: the outputs whose windows lie
// wholly inside along W (interior) are searched tap by tap across the row,
// so each output's compare-select chain runs beside its neighbours'; the
// others (at the edges) one window at a time. Both visit the taps in the
// same order (kd, kh, kw), so ties resolve alike.
template <class T>
void max_pool_plane(const T* x, T* y, int64_t* arg, const Window& w, const DimTaps (&taps)[3], int64_t interior_lo,
                    int64_t interior_hi) {
  const int64_t dd = w.dilation[0], dh = w.dilation[1], dw = w.dilation[2], H = w.in[1], W = w.in[2], sw = w.stride[2];
  const int64_t OW = w.out[2];
  for (int64_t od = 0; od < w.out[0]; ++od)
    for (int64_t oh = 0; oh < w.out[1]; ++oh) {
      const int64_t d0 = taps[0].start[od], h0 = taps[1].start[oh];
      const int64_t kd0 = taps[0].first[od], kd1 = taps[0].last[od], kh0 = taps[1].first[oh], kh1 = taps[1].last[oh];
      const int64_t o_row = (od * w.out[1] + oh) * OW;
      T* best = y + o_row;
      int64_t* where = arg + o_row;
      auto search = [&](int64_t ow) {
        const int64_t w0 = taps[2].start[ow], kw0 = taps[2].first[ow], kw1 = taps[2].last[ow];
        // The first tap inside starts the search: PyTorch's index when no element is larger.
        where[ow] = ((d0 + kd0 * dd) * H + h0 + kh0 * dh) * W + w0 + kw0 * dw;
        best[ow] = x[where[ow]];
        for (int64_t kd = kd0; kd < kd1; ++kd)
          for (int64_t kh = kh0; kh < kh1; ++kh) {
            const int64_t row = ((d0 + kd * dd) * H + h0 + kh * dh) * W + w0;
            for (int64_t kw = kw0; kw < kw1; ++kw) offer(x[row + kw * dw], row + kw * dw, best[ow], where[ow]);
          }
      };
      for (int64_t ow = 0; ow < std::min(interior_lo, OW); ++ow) search(ow);
      for (int64_t ow = std::max(interior_hi, interior_lo); ow < OW; ++ow) search(ow);
      if (interior_lo >= interior_hi) continue;
      const int64_t first_row = ((d0 + kd0 * dd) * H + h0 + kh0 * dh) * W;
      for (int64_t ow = interior_lo; ow < interior_hi; ++ow) {
        where[ow] = first_row + taps[2].start[ow];
        best[ow] = x[where[ow]];
      }
      for (int64_t kd = kd0; kd < kd1; ++kd)
        for (int64_t kh = kh0; kh < kh1; ++kh) {
          const int64_t row = ((d0 + kd * dd) * H + h0 + kh * dh) * W;
          for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
            const int64_t base = row + taps[2].start[interior_lo] + kw * dw;
            for (int64_t ow = interior_lo; ow < interior_hi; ++ow) {
              const int64_t at = base + (ow - interior_lo) * sw;
              offer(x[at], at, best[ow], where[ow]);
            }
          }
        }
    }
}

// Channels-last: the C maxima of each output position at once, channels
// innermost (contiguous in x, y and the indices), taps in the planar
// search's order. Rows (n, od, oh) are split over the thread pool.
template <class T>
void max_pool_rows(const T* x, T* y, int64_t* arg, int64_t N, int64_t C, const Window& w, const DimTaps (&taps)[3]) {
  const int64_t dd = w.dilation[0], dh = w.dilation[1], dw = w.dilation[2], H = w.in[1], W = w.in[2];
  const int64_t OD = w.out[0], OH = w.out[1], OW = w.out[2];
  const int64_t window_taps = w.kernel[0] * w.kernel[1] * w.kernel[2];
  parallel_for(0, N * OD * OH, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, OW * C * window_taps)),
               [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t n = r / (OD * OH), od = r / OH % OD, oh = r % OH;
      const int64_t d0 = taps[0].start[od], h0 = taps[1].start[oh];
      const int64_t kd0 = taps[0].first[od], kd1 = taps[0].last[od], kh0 = taps[1].first[oh], kh1 = taps[1].last[oh];
      const T* image = x + n * w.in_plane() * C;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = taps[2].start[ow], kw0 = taps[2].first[ow], kw1 = taps[2].last[ow];
        T* best = y + (r * OW + ow) * C;
        int64_t* where = arg + (r * OW + ow) * C;
        const int64_t first = ((d0 + kd0 * dd) * H + h0 + kh0 * dh) * W + w0 + kw0 * dw;
        for (int64_t ch = 0; ch < C; ++ch) best[ch] = image[first * C + ch], where[ch] = first;
        for (int64_t kd = kd0; kd < kd1; ++kd)
          for (int64_t kh = kh0; kh < kh1; ++kh)
            for (int64_t kw = kw0; kw < kw1; ++kw) {
              const int64_t at = ((d0 + kd * dd) * H + h0 + kh * dh) * W + w0 + kw * dw;
              const T* v = image + at * C;
              for (int64_t ch = 0; ch < C; ++ch) offer(v[ch], at, best[ch], where[ch]);
            }
      }
    }
  });
}

// Planes per task: about kGrain elements of work.
int64_t plane_grain(int64_t work_per_plane) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, work_per_plane)); }

// 2-D pooling over 2x2 windows at stride 2 with every window inside (the
// downsampling of most CNNs): the SIMD kernel's case.
bool is_2x2_stride_2(const Window& w) {
  return w.in[0] == 1 && w.kernel[0] == 1 && w.kernel[1] == 2 && w.kernel[2] == 2 && w.stride[1] == 2 &&
         w.stride[2] == 2 && w.padding[1] == 0 && w.padding[2] == 0 && w.dilation[1] == 1 && w.dilation[2] == 1 &&
         2 * w.out[1] <= w.in[1] && 2 * w.out[2] <= w.in[2];
}

}  // namespace

void max_pool_kernel(const OpCall& c) {
  const bool rows = channels_last(c.outputs[0]) && channels_last(c.outputs[1]);
  const Tensor x = rows ? contiguous(c.inputs[0], c.outputs[0].suggest_memory_format()) : contiguous(c.inputs[0]);
  const Window w = window(x, c.attrs);
  const int64_t planes = x.size(0) * x.size(1);
  visit_f32_f64(x.dtype(), "max_pool", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data_ptr<T>();
    T* yp = c.outputs[0].data_ptr<T>();
    int64_t* ip = c.outputs[1].data_ptr<int64_t>();
    // Before the general kernel's per-call tables, which this case does not need.
    if constexpr (std::is_same_v<T, float>) {
      if (is_2x2_stride_2(w)) {
        const auto n = [](int64_t v) { return static_cast<size_t>(v); };
        if (rows) {  // rows (n, oh) of OW outputs of C channels
          const int64_t C = x.size(1), row_work = 4 * w.out[2] * C;
          return parallel_for(0, x.size(0) * w.out[1], std::max<int64_t>(1, kGrain / std::max<int64_t>(1, row_work)),
                              [&](int64_t begin, int64_t end) {
            simd::max_pool_2x2_rows_f32(xp, n(begin), n(end), n(w.in[1]), n(w.in[2]), n(C), n(w.out[1]), n(w.out[2]),
                                        yp, ip);
          });
        }
        return parallel_for(0, planes, plane_grain(w.in_plane()), [&](int64_t begin, int64_t end) {
          simd::max_pool_2x2_f32(xp + begin * w.in_plane(), n(end - begin), n(w.in[1]), n(w.in[2]), n(w.out[1]),
                                 n(w.out[2]), yp + begin * w.out_plane(), ip + begin * w.out_plane());
        });
      }
    }
    const int64_t taps = w.kernel[0] * w.kernel[1] * w.kernel[2];
    const DimTaps dims[3] = {dim_taps(w, 0), dim_taps(w, 1), dim_taps(w, 2)};
    // The outputs [lo, hi) along W whose windows have every tap inside.
    int64_t lo = 0, hi = w.out[2];
    while (lo < hi && (dims[2].first[lo] != 0 || dims[2].last[lo] != w.kernel[2])) ++lo;
    while (hi > lo && (dims[2].first[hi - 1] != 0 || dims[2].last[hi - 1] != w.kernel[2])) --hi;
    if (rows) return max_pool_rows(xp, yp, ip, x.size(0), x.size(1), w, dims);
    parallel_for(0, planes, plane_grain(w.out_plane() * taps), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p)
        max_pool_plane(xp + p * w.in_plane(), yp + p * w.out_plane(), ip + p * w.out_plane(), w, dims, lo, hi);
    });
  });
}

void max_pool_backward_kernel(const OpCall& c) {
  const Tensor& gx = c.outputs[0];
  if (channels_last(gx)) {
    // Each image's gradient is its own (indices are in-image): images in parallel.
    const MemoryFormat f = gx.suggest_memory_format();
    const Tensor g = contiguous(c.inputs[0], f), arg = contiguous(c.inputs[1], f);
    const int64_t N = gx.size(0), C = gx.size(1);
    const int64_t out_positions = g.numel() / (N * C), in_positions = gx.numel() / (N * C);
    return visit_f32_f64(g.dtype(), "max_pool", [&](auto tag) {
      using T = decltype(tag);
      const T* gp = g.data_ptr<T>();
      const int64_t* ap = arg.data_ptr<int64_t>();
      T* xp = gx.data_ptr<T>();
      parallel_for(0, N, plane_grain((out_positions + in_positions) * C), [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n) {
          T* image = xp + n * in_positions * C;
          std::fill(image, image + in_positions * C, T(0));
          for (int64_t o = n * out_positions * C; o < (n + 1) * out_positions * C; o += C)
            for (int64_t ch = 0; ch < C; ++ch) image[ap[o + ch] * C + ch] += gp[o + ch];
        }
      });
    });
  }
  const Tensor g = contiguous(c.inputs[0]), arg = contiguous(c.inputs[1]);
  const int64_t planes = arg.size(0) * arg.size(1);
  const int64_t out_plane = planes ? arg.numel() / planes : 0, in_plane = planes ? gx.numel() / planes : 0;
  visit_f32_f64(g.dtype(), "max_pool", [&](auto tag) {
    using T = decltype(tag);
    const T* gp = g.data_ptr<T>();
    const int64_t* ap = arg.data_ptr<int64_t>();
    T* xp = gx.data_ptr<T>();
    parallel_for(0, planes, plane_grain(out_plane + in_plane), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        T* plane = xp + p * in_plane;
        std::fill(plane, plane + in_plane, T(0));
        for (int64_t o = p * out_plane; o < (p + 1) * out_plane; ++o) plane[ap[o]] += gp[o];
      }
    });
  });
}

}  // namespace kiln::cpu
