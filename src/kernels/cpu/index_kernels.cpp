// Indexing and joining kernels. Every index is bounds-checked here, where it
// is read: an out-of-range index is a kiln::Error, never a stray read.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "kernels/cpu/kernel_tensors.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"

namespace kiln::cpu {
namespace {

// `t` seen with index's sizes on every dim but `dim`, where it keeps its own:
// lines along `dim` of the result are the lines of t at index's positions.
Tensor lines_like(const Tensor& t, const Tensor& index, int64_t dim) {
  Shape s = index.sizes();
  s[dim] = t.size(dim);
  return view_of(t, s, t.strides(), t.storage_offset());
}

// As in PyTorch, gather, scatter, index_select and embedding take indices
// in [0, size): a negative index is an error, not counted from the end.
int64_t checked_index(int64_t i, int64_t size, const char* op) {
  if (i < 0 || i >= size)
    fail(op, "index ", i, " is out of bounds for dimension with size ", size, " (expected an index in [0, ", size, "))");
  return i;
}

// Reads an integer index tensor's element as int64.
template <class F>
void visit_index(const Tensor& idx, const char* op, F&& f) {
  if (idx.dtype() == kInt64) f(int64_t{});
  else if (idx.dtype() == kInt32) f(int32_t{});
  else fail(op, "expected an int64 or int32 index tensor but got ", idx.dtype());
}

}  // namespace

void cat_kernel(const OpCall& c) {
  const Tensor& out = c.outputs[0];
  const int64_t dim = c.attrs.get_int("dim");
  int64_t offset = 0;
  for (const Tensor& in : c.inputs) {
    if (in.numel() == 0 && in.dim() == 1 && out.dim() != 1) continue;  // legacy empty inputs
    Tensor dst = narrowed(out, dim, offset, in.size(dim));
    Tensor ins[] = {in};
    Tensor outs[] = {dst};
    copy_kernel(OpCall{ins, c.attrs, outs});
    offset += in.size(dim);
  }
}

// out[i][j][k] = x[index[i][j][k]][j][k] (for dim 0), and likewise.
void gather_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& index = c.inputs[1];
  const Tensor& out = c.outputs[0];
  const int64_t dim = c.attrs.get_int("dim");
  const int64_t L = index.size(dim), xs = x.stride(dim), is = index.stride(dim), os = out.stride(dim);
  const int64_t size = x.size(dim);
  visit_index(index, "gather", [&](auto itag) {
    using I = decltype(itag);
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      // Lines along dim: x's line is taken at the same outer position.
      Tensor xl = lines_like(x, index, dim);
      for_each_line<3>({&out, &index, &xl}, dim, L, [&](const std::array<char*, 3>& b, int64_t) {
        for (int64_t l = 0; l < L; ++l) {
          const int64_t i = checked_index(static_cast<int64_t>(reinterpret_cast<const I*>(b[1])[l * is]), size, "gather");
          reinterpret_cast<T*>(b[0])[l * os] = reinterpret_cast<const T*>(b[2])[i * xs];
        }
      });
    });
  });
}

// out = x.clone(); out[index[i][j]][j] = src[i][j] (or +=), for dim 0.
// Along a line (fixed coordinates off `dim`) two positions of index may name
// the same output element, so each line runs in order; different lines
// write different output lines, so groups of lines run in parallel, and
// inside a group the positions are the outer loop: for dim 0 of a row-major
// tensor the lines of a group are neighbouring columns, read and written
// contiguously (the GPT's embedding backward, 2048 rows of 128 into 256:
// a column-by-column serial walk before).
void scatter_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& index = c.inputs[1];
  const Tensor& src = c.inputs[2];
  const Tensor& out = c.outputs[0];
  const int64_t dim = c.attrs.get_int("dim");
  const bool add = c.attrs.get_bool("add");
  {
    Tensor ins[] = {x};
    Tensor outs[] = {out};
    copy_kernel(OpCall{ins, c.attrs, outs});
  }
  const int64_t L = index.size(dim), os = out.stride(dim), is = index.stride(dim), ss = src.stride(dim);
  const int64_t size = out.size(dim);
  const int64_t lines = L ? index.numel() / L : 0;
  if (lines == 0) return;
  visit_index(index, "scatter", [&](auto itag) {
    using I = decltype(itag);
    visit_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      Tensor ol = lines_like(out, index, dim);
      Tensor sl = lines_like(src, index, dim);
      Shape outer;
      for (int64_t d = 0; d < index.dim(); ++d)
        if (d != dim) outer.push_back(index.size(d));
      // Element offsets of each line's start in out, index and src.
      std::vector<int64_t> oo(static_cast<size_t>(lines)), io(oo.size()), so(oo.size());
      for (int64_t line = 0; line < lines; ++line) {
        int64_t rem = line;
        for (int64_t d = index.dim() - 1, k = static_cast<int64_t>(outer.size()) - 1; d >= 0; --d) {
          if (d == dim) continue;
          const int64_t i = rem % outer[k];
          rem /= outer[k--];
          oo[line] += i * ol.stride(d), io[line] += i * index.stride(d), so[line] += i * sl.stride(d);
        }
      }
      T* const op = ol.data_ptr<T>();
      const I* const ip = index.data_ptr<I>();
      const T* const sp = sl.data_ptr<T>();
      const int64_t* const oo_p = oo.data();
      const int64_t* const io_p = io.data();
      const int64_t* const so_p = so.data();
      // o = v, or o += v (|| for bool; floats add in their type, as rounded
      // as through double).
      auto put = [](T& o, T v, auto accumulate) {
        if constexpr (!decltype(accumulate)::value) o = v;
        else if constexpr (std::is_same_v<T, bool>) o = o || v;
        else if constexpr (std::is_floating_point_v<T>) o += v;
        else o = convert<T>(static_cast<double>(o) + static_cast<double>(v));
      };
      auto run = [=](int64_t lo, int64_t hi, auto accumulate) {
        for (int64_t l = 0; l < L; ++l)
          for (int64_t line = lo; line < hi; ++line) {
            const int64_t i = checked_index(static_cast<int64_t>(ip[io_p[line] + l * is]), size, "scatter");
            put(op[oo_p[line] + i * os], sp[so_p[line] + l * ss], accumulate);
          }
      };
      // Rows: the group's lines are neighbouring elements of out and src and
      // share their index (an index expanded along them, as the embedding
      // backward's): one index per position and a vectorisable row update.
      auto rows = [=](int64_t lo, int64_t hi, auto accumulate) {
        const int64_t n = hi - lo;
        for (int64_t l = 0; l < L; ++l) {
          const int64_t i = checked_index(static_cast<int64_t>(ip[io_p[lo] + l * is]), size, "scatter");
          T* o = op + oo_p[lo] + i * os;
          const T* v = sp + so_p[lo] + l * ss;
          for (int64_t j = 0; j < n; ++j) put(o[j], v[j], accumulate);
        }
      };
      // At least 64 lines a task: rows of a cache line or more per thread.
      parallel_for(0, lines, std::max<int64_t>(64, kGrain / L), [&](int64_t lo, int64_t hi) {
        bool as_rows = true;
        for (int64_t line = lo; line < hi && as_rows; ++line)
          as_rows = oo_p[line] - oo_p[lo] == line - lo && so_p[line] - so_p[lo] == line - lo && io_p[line] == io_p[lo];
        if (as_rows) add ? rows(lo, hi, std::true_type{}) : rows(lo, hi, std::false_type{});
        else add ? run(lo, hi, std::true_type{}) : run(lo, hi, std::false_type{});
      });
    });
  });
}

// out = x with src's elements reduced into the positions index sends them
// to (attr reduce: 0 sum, 1 prod, 2 mean, 3 amax, 4 amin); without
// include_self a position some element reaches starts from the reduction's
// identity. A NaN wins amax and amin, as in PyTorch; mean divides by the
// count (plus one for self), flooring for integers. Serial, in index order:
// repeated indices would make parallel updates race.
void scatter_reduce_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& index = c.inputs[1];
  const Tensor& src = c.inputs[2];
  const Tensor& out = c.outputs[0];
  const int64_t dim = c.attrs.get_int("dim");
  const int64_t reduce = c.attrs.get_int("reduce");
  const bool include_self = c.attrs.get_bool("include_self");
  {
    Tensor ins[] = {x};
    Tensor outs[] = {out};
    copy_kernel(OpCall{ins, c.attrs, outs});
  }
  const int64_t n = index.numel(), nd = index.dim(), size = out.size(dim);
  if (n == 0) return;
  // The out offset of every index element, in index's row-major order, and
  // the matching src offsets; counts of arrivals per out position.
  std::vector<int64_t> out_off(static_cast<size_t>(n)), src_off(static_cast<size_t>(n));
  std::vector<int64_t> arrivals(static_cast<size_t>(out.numel()));
  const Shape out_steps = contiguous_strides(out.sizes());
  std::vector<int64_t> slot(static_cast<size_t>(n));  // logical out position
  visit_index(index, "scatter_reduce", [&](auto itag) {
    using I = decltype(itag);
    const I* ip = static_cast<const I*>(index.raw_data());
    Shape at(static_cast<size_t>(nd), 0);
    for (int64_t e = 0; e < n; ++e) {
      int64_t io = 0, so = 0, oo = 0, lo = 0;
      for (int64_t d = 0; d < nd; ++d) io += at[d] * index.stride(d), so += at[d] * src.stride(d);
      const int64_t i = checked_index(static_cast<int64_t>(ip[io]), size, "scatter_reduce");
      for (int64_t d = 0; d < nd; ++d) {
        const int64_t k = d == dim ? i : at[d];
        oo += k * out.stride(d), lo += k * out_steps[d];
      }
      out_off[e] = oo, src_off[e] = so, slot[e] = lo;
      ++arrivals[lo];
      for (int64_t d = nd - 1; d >= 0 && ++at[d] == index.size(d); --d) at[d] = 0;
    }
  });
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      fail("scatter_reduce", "bool tensors are not supported");
    } else {
      using C = std::conditional_t<is_16bit_float<T>, float, T>;
      T* op = static_cast<T*>(out.raw_data());
      const T* sp = static_cast<const T*>(src.raw_data());
      if (!include_self) {
        C identity = 0;
        if (reduce == 1) identity = 1;
        if (reduce == 3) identity = std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
        if (reduce == 4) identity = std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
        for (int64_t e = 0; e < n; ++e) op[out_off[e]] = convert<T>(identity);
      }
      for (int64_t e = 0; e < n; ++e) {
        const C a = convert<C>(op[out_off[e]]), b = convert<C>(sp[src_off[e]]);
        C r;
        if (reduce == 1) r = a * b;
        else if (reduce == 3) r = b != b ? b : (a != a || a >= b ? a : b);
        else if (reduce == 4) r = b != b ? b : (a != a || a <= b ? a : b);
        else r = a + b;
        op[out_off[e]] = convert<T>(r);
      }
      if (reduce == 2)
        for (int64_t e = 0; e < n; ++e) {
          int64_t& count = arrivals[slot[e]];
          if (count == 0) continue;  // this position is done
          const C total = convert<C>(op[out_off[e]]);
          const C divisor = static_cast<C>(count + (include_self ? 1 : 0));
          C mean;
          if constexpr (std::is_integral_v<C>) mean = total / divisor - ((total % divisor != 0) && ((total < 0) != (divisor < 0)) ? 1 : 0);
          else mean = total / divisor;
          op[out_off[e]] = convert<T>(mean);
          count = 0;
        }
    }
  });
}

// out = x.index_select(dim, index). x is viewed as (outer, size, inner):
// each selected slice of `inner` elements is one memcpy when x and out are
// contiguous, a strided loop otherwise.
void index_select_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& index = c.inputs[1];
  const Tensor& out = c.outputs[0];
  const int64_t dim = c.attrs.get_int("dim");
  const char* op = c.attrs.has("op") ? "embedding" : "index_select";
  const int64_t size = x.size(dim), n = index.numel();
  std::vector<int64_t> idx(static_cast<size_t>(n));
  visit_index(index, op, [&](auto itag) {
    using I = decltype(itag);
    const Tensor flat = reshaped_contiguous(contiguous(index), {n});
    const I* ip = flat.data_ptr<I>();
    const int64_t st = flat.stride(0);
    for (int64_t i = 0; i < n; ++i) idx[i] = checked_index(static_cast<int64_t>(ip[i * st]), size, op);
  });
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const size_t es = x.element_size();
  const bool fast = x.is_contiguous() && out.is_contiguous();
  const char* xp = static_cast<const char*>(x.raw_data());
  char* outp = static_cast<char*>(out.raw_data());
  parallel_for(0, outer * n, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / n, i = r % n;
      if (fast) {
        std::memcpy(outp + static_cast<size_t>(r * inner) * es, xp + static_cast<size_t>((o * size + idx[i]) * inner) * es,
                    static_cast<size_t>(inner) * es);
        continue;
      }
      // Strided: walk the inner multi-index of both tensors.
      for (int64_t k = 0; k < inner; ++k) {
        int64_t xo = 0, oo = 0, rem_o = o, rem_k = k;
        for (int64_t d = x.dim() - 1; d >= 0; --d) {
          if (d == dim) {
            xo += idx[i] * x.stride(d);
            oo += i * out.stride(d);
          } else if (d > dim) {
            const int64_t v = rem_k % x.size(d);
            rem_k /= x.size(d);
            xo += v * x.stride(d), oo += v * out.stride(d);
          } else {
            const int64_t v = rem_o % x.size(d);
            rem_o /= x.size(d);
            xo += v * x.stride(d), oo += v * out.stride(d);
          }
        }
        std::memcpy(outp + static_cast<size_t>(oo) * es, xp + static_cast<size_t>(xo) * es, es);
      }
    }
  });
}

void embedding_kernel(const OpCall& c) {
  // weight (V, D), indices (...) -> (..., D): rows of weight by index.
  const Tensor& w = c.inputs[0];
  const Tensor& out = c.outputs[0];
  Tensor flat = reshaped_contiguous(out, {c.inputs[1].numel(), w.size(1)});
  Tensor ins[] = {w, c.inputs[1]};
  Tensor outs[] = {flat};
  Attrs a{{"dim", int64_t{0}}, {"op", std::string("embedding")}};
  index_select_kernel(OpCall{ins, a, outs});
}

void one_hot_kernel(const OpCall& c) {
  const Tensor idx = contiguous(c.inputs[0]);
  const Tensor& out = c.outputs[0];
  const int64_t classes = out.size(out.dim() - 1);
  int64_t* o = out.data_ptr<int64_t>();
  std::memset(o, 0, static_cast<size_t>(out.numel()) * sizeof(int64_t));
  const int64_t* ip = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (ip[i] < 0 || ip[i] >= classes) fail("one_hot", "class value ", ip[i], " is outside [0, ", classes, ")");
    o[i * classes + ip[i]] = 1;
  }
}

// tril / triu over the last two dims: keep (i, j) when j - i <= k (tril) or >= k (triu).
static void triangle(const OpCall& c, bool upper) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const int64_t k = c.attrs.get_int("diagonal");
  const int64_t R = x.size(x.dim() - 2), C = x.size(x.dim() - 1);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor xc = contiguous(x);
    const T* xp = xc.data_ptr<T>();
    T* op = out.data_ptr<T>();
    parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t col = i % C, row = (i / C) % R;
        const bool keep = upper ? col - row >= k : col - row <= k;
        op[i] = keep ? xp[i] : T(0);
      }
    });
  });
}
void tril_kernel(const OpCall& c) { triangle(c, false); }
void triu_kernel(const OpCall& c) { triangle(c, true); }

}  // namespace kiln::cpu
