// Convolution kernels through oneDNN (Debian's libdnnl 2.6, what PyTorch
// runs for CPU convolutions): forward, backward-data and backward-weights
// primitives, float32, 1 to 3 spatial dims. Each primitive picks its own
// memory layout (blocked nChw16c on AVX-512, where its JIT kernels are
// fastest); the tensors are reordered into it and the result back. Built
// primitives are kept per geometry, since building one (choosing and
// JIT-compiling an implementation) costs more than running a small one.
// The batch is split over kiln's thread pool (Note [One thread pool for
// oneDNN]).
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/kernel_tensors.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd.h"
#include "kiln/error.h"
#include "kiln/runtime.h"

extern "C" void omp_set_num_threads(int);  // libgomp, which libdnnl runs on

namespace kiln::cpu {
namespace {

using dnnl::memory;
using Dims = memory::dims;
using Args = std::unordered_map<int, memory>;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

struct Geometry {
  Dims src, weights, bias, dst, strides, dilates, padding;
  // The activations' layout in the primitives: channels-last tensors are
  // computed in that layout (no reorders); others in the one oneDNN picks.
  memory::format_tag activations = memory::format_tag::any;
  bool grouped = false;
  std::string key;
};

Geometry geometry(const Tensor& x, const Tensor& w, const Tensor& y, const Attrs& a, bool has_bias) {
  Geometry g;
  const int64_t groups = a.get_int("groups");
  g.src = Dims(x.sizes().begin(), x.sizes().end());
  g.dst = Dims(y.sizes().begin(), y.sizes().end());
  g.grouped = groups > 1;
  g.weights = Dims(w.sizes().begin(), w.sizes().end());
  if (g.grouped) {  // oneDNN's grouped weights: (groups, O / groups, C / groups, kernel...)
    g.weights[0] /= groups;
    g.weights.insert(g.weights.begin(), groups);
  }
  if (has_bias) g.bias = {w.size(0)};
  g.strides = Dims(a.get_shape("stride").begin(), a.get_shape("stride").end());
  g.padding = Dims(a.get_shape("padding").begin(), a.get_shape("padding").end());
  for (int64_t d : a.get_shape("dilation")) g.dilates.push_back(d - 1);  // oneDNN counts the skipped elements
  // The output's (or, backward, the gradient's) format decides: the op made it the input's or the weight's.
  if (channels_last(y))
    g.activations = y.dim() == 4 ? memory::format_tag::nhwc : memory::format_tag::ndhwc;
  g.key = std::to_string(static_cast<int>(g.activations)) + ";";
  for (const Dims* v : {&g.src, &g.weights, &g.bias, &g.dst, &g.strides, &g.dilates, &g.padding}) {
    for (auto e : *v) g.key += std::to_string(e) + ",";
    g.key += ";";
  }
  return g;
}

memory::desc any(const Dims& dims, memory::format_tag tag = memory::format_tag::any) {
  return memory::desc(dims, memory::data_type::f32, tag);
}

// t's memory as it is laid out (its strides; grouped weights split dim 0).
memory user_memory(const Tensor& t, const Dims& dims) {
  Dims strides(t.strides().begin(), t.strides().end());
  if (dims.size() == strides.size() + 1) strides.insert(strides.begin(), strides[0] * dims[1]);
  return memory(memory::desc(dims, memory::data_type::f32, strides), engine(),
                const_cast<float*>(t.data_ptr<float>()));
}

// A tensor oneDNN can describe: non-negative strides, no two elements at one address.
Tensor describable(const Tensor& t) {
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.size(i) > 1 && t.stride(i) <= 0) return contiguous(t);
  return t;
}

// `user` in the layout `want` (itself when they match).
memory in_layout(const memory& user, const memory::desc& want, dnnl::stream& s) {
  if (user.get_desc() == want) return user;
  memory m(want, engine());
  dnnl::reorder(user, m).execute(s, const_cast<memory&>(user), m);
  return m;
}

// A primitive's output in its layout `have`, written to `user` at the end.
struct OutputMemory {
  memory user, mem;
  OutputMemory(memory u, const memory::desc& have) : user(std::move(u)), mem(user.get_desc() == have ? user : memory(have, engine())) {}
  void finish(dnnl::stream& s) {
    if (mem.get_data_handle() != user.get_data_handle()) dnnl::reorder(mem, user).execute(s, mem, user);
  }
};

struct Primitives {
  dnnl::convolution_forward::primitive_desc forward_pd;
  dnnl::convolution_forward forward;
  std::optional<dnnl::convolution_backward_data::primitive_desc> data_pd;
  std::optional<dnnl::convolution_backward_data> data;
  std::optional<dnnl::convolution_backward_weights::primitive_desc> weights_pd;
  std::optional<dnnl::convolution_backward_weights> weights;
};

// The primitives of one geometry, built on first use (the backward ones
// when first asked for).
Primitives& primitives(const Geometry& g, bool backward_data, bool backward_weights) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::unique_ptr<Primitives>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Primitives>& p = cache[g.key];
  const memory::desc bias = g.bias.empty() ? memory::desc() : memory::desc(g.bias, memory::data_type::f32, memory::format_tag::a);
  // A scratchpad per execution (Args' DNNL_ARG_SCRATCHPAD), so that two
  // threads may run one primitive at once.
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (!p) {
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                      any(g.src, g.activations), any(g.weights), bias, any(g.dst, g.activations), g.strides, g.dilates, g.padding,
                                      g.padding);
    dnnl::convolution_forward::primitive_desc pd(d, attr, engine());
    p = std::make_unique<Primitives>(Primitives{pd, dnnl::convolution_forward(pd), {}, {}, {}, {}});
  }
  if (backward_data && !p->data) {
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, any(g.src, g.activations), any(g.weights),
                                            any(g.dst, g.activations), g.strides, g.dilates, g.padding, g.padding);
    p->data_pd.emplace(d, attr, engine(), p->forward_pd);
    p->data.emplace(*p->data_pd);
  }
  if (backward_weights && !p->weights) {
    dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, any(g.src, g.activations), any(g.weights), bias,
                                               any(g.dst, g.activations), g.strides, g.dilates, g.padding, g.padding);
    p->weights_pd.emplace(d, attr, engine(), p->forward_pd);
    p->weights.emplace(*p->weights_pd);
  }
  return *p;
}

void check_float32(const Tensor& t) {
  check(t.dtype() == kFloat32, "convolution", "the oneDNN kernel expects float32 tensors but got ", t.dtype());
}

// The memory a primitive works in, for one execution.
memory scratchpad(const memory::desc& d) { return memory(d, engine()); }

// oneDNN's errors as kiln's.
template <class Fn>
void run(const Fn& fn) {
  try {
    fn();
  } catch (const dnnl::error& e) {
    throw Error(std::string("convolution: oneDNN failed: ") + e.what());
  }
}

// Note [One thread pool for oneDNN]
// Debian's oneDNN runs on OpenMP threads, which spin for a while after each
// parallel region: beside kiln's own pool (the batch norms, poolings and
// activations between convolutions) they took a core from it, and a CNN's
// training step ran 1.5x slower than with OMP_WAIT_POLICY=passive. So the
// batch is split over kiln's pool instead, one chunk of images per thread,
// each running oneDNN on that one thread (an OpenMP region of one thread
// starts no team). With fewer images than threads, the whole batch runs on
// oneDNN's own threads.
// How many chunks over_batch splits a batch of N images into (at least 1).
int64_t batch_chunks(int64_t N) { return std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), N)); }

template <class Chunk>
void over_batch(int64_t N, const Chunk& chunk) {
  const int64_t chunks = batch_chunks(N);
  if (chunks == 1) {
    omp_set_num_threads(get_num_threads());
    return run([&] { chunk(int64_t{0}, N, int64_t{0}); });
  }
  parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    omp_set_num_threads(1);
    for (int64_t i = begin; i < end; ++i) run([&] { chunk(i * N / chunks, (i + 1) * N / chunks, i); });
  });
}

// Images [n0, n1) of an (N, ...) tensor.
Tensor images(const Tensor& t, int64_t n0, int64_t n1) { return narrowed(t, 0, n0, n1 - n0); }

// How many images a thread's chunk runs at a time: with activations
// reordered into oneDNN's blocked layout and back, a slice small enough
// for the core's cache is reordered, convolved and reordered back there,
// where a whole chunk streamed through memory three times (ResNet's
// 56x56x64 forward: 160 -> 220 GFLOP/s). KILN_CONV_SLICE_KB overrides the
// budget (the tests make every image a slice).
int64_t slice_images(const Tensor& a, const Tensor& b) {
  const char* env = std::getenv("KILN_CONV_SLICE_KB");
  const int64_t budget = (env ? std::atoll(env) : 1024) * 1024;
  const int64_t N = std::max<int64_t>(1, a.size(0));
  const int64_t per_image = static_cast<int64_t>(sizeof(float)) * (a.numel() + b.numel()) / N;
  return std::max<int64_t>(1, budget / std::max<int64_t>(1, per_image));
}

}  // namespace

void convolution_kernel(const OpCall& c) {
  const bool has_bias = c.attrs.get_bool("has_bias");
  const Tensor x = describable(c.inputs[0]), w = describable(c.inputs[1]);
  check_float32(x), check_float32(w);
  const int64_t slice = slice_images(x, c.outputs[0]);
  over_batch(x.size(0), [&](int64_t n0, int64_t n1, int64_t) {
    dnnl::stream s(engine());
    memory weights;  // in the primitive's layout, reordered once per chunk
    for (int64_t a = n0; a < n1; a += slice) {
      const int64_t b = std::min(n1, a + slice);
      const Tensor xs = images(x, a, b), ys = images(c.outputs[0], a, b);
      const Geometry g = geometry(xs, w, ys, c.attrs, has_bias);
      Primitives& p = primitives(g, false, false);
      if (!weights || weights.get_desc() != p.forward_pd.weights_desc())
        weights = in_layout(user_memory(w, g.weights), p.forward_pd.weights_desc(), s);
      Args args{{DNNL_ARG_SRC, in_layout(user_memory(xs, g.src), p.forward_pd.src_desc(), s)},
                {DNNL_ARG_WEIGHTS, weights},
                {DNNL_ARG_SCRATCHPAD, scratchpad(p.forward_pd.scratchpad_desc())}};
      if (has_bias) args[DNNL_ARG_BIAS] = user_memory(describable(c.inputs[2]), g.bias);
      OutputMemory out(user_memory(ys, g.dst), p.forward_pd.dst_desc());
      args[DNNL_ARG_DST] = out.mem;
      p.forward.execute(s, args);
      out.finish(s);
    }
    s.wait();
  });
}

void convolution_backward_kernel(const OpCall& c) {
  const bool want_input = c.attrs.get_bool("input_grad"), want_weight = c.attrs.get_bool("weight_grad"),
             want_bias = c.attrs.get_bool("bias_grad");
  const Tensor gy = describable(c.inputs[0]), x = describable(c.inputs[1]), w = describable(c.inputs[2]);
  check_float32(gy), check_float32(x), check_float32(w);
  const int64_t N = x.size(0), chunks = batch_chunks(N);
  // Each chunk's weight (and bias) gradient, summed after; the weight's is
  // computed with the bias's even when only one is wanted.
  std::vector<Tensor> gw(static_cast<size_t>(chunks)), gb(static_cast<size_t>(chunks));
  const int64_t slice = slice_images(x, gy);
  over_batch(N, [&](int64_t n0, int64_t n1, int64_t chunk) {
    dnnl::stream s(engine());
    memory weights;  // in the backward-data primitive's layout, reordered once per chunk
    const size_t k = static_cast<size_t>(chunk);
    // The chunk's weight (and bias) gradient: the first slice's, then each
    // later slice's added (oneDNN overwrites its output).
    Tensor slice_gw, slice_gb;
    if (want_weight || want_bias) {
      gw[k] = empty(w.sizes(), TensorOptions(kFloat32));
      if (want_bias) gb[k] = empty({w.size(0)}, TensorOptions(kFloat32));
    }
    for (int64_t a = n0; a < n1; a += slice) {
      const int64_t b = std::min(n1, a + slice);
      const Tensor xs = images(x, a, b), gys = images(gy, a, b);
      // The geometry of the forward (with a bias exactly when its gradient is wanted).
      const Geometry g = geometry(xs, w, gys, c.attrs, want_bias);
      Primitives& p = primitives(g, want_input, want_weight || want_bias);
      const memory user_gy = user_memory(gys, g.dst);
      // The output gradient in the backward-data primitive's layout, kept for
      // the backward-weights one when it wants the same (the usual case):
      // reordering it twice cost as much as LeNet's backward convolutions.
      memory gy_for_data;
      if (want_input) {
        OutputMemory gx(user_memory(images(c.outputs[0], a, b), g.src), p.data_pd->diff_src_desc());
        gy_for_data = in_layout(user_gy, p.data_pd->diff_dst_desc(), s);
        if (!weights || weights.get_desc() != p.data_pd->weights_desc())
          weights = in_layout(user_memory(w, g.weights), p.data_pd->weights_desc(), s);
        p.data->execute(s, {{DNNL_ARG_DIFF_DST, gy_for_data},
                            {DNNL_ARG_WEIGHTS, weights},
                            {DNNL_ARG_DIFF_SRC, gx.mem},
                            {DNNL_ARG_SCRATCHPAD, scratchpad(p.data_pd->scratchpad_desc())}});
        gx.finish(s);
      }
      if (want_weight || want_bias) {
        const bool first = a == n0;
        if (!first && !slice_gw.defined()) {
          slice_gw = empty(w.sizes(), TensorOptions(kFloat32));
          if (want_bias) slice_gb = empty({w.size(0)}, TensorOptions(kFloat32));
        }
        const Tensor& to_w = first ? gw[k] : slice_gw;
        OutputMemory gwm(user_memory(to_w, g.weights), p.weights_pd->diff_weights_desc());
        Args args{{DNNL_ARG_SRC, in_layout(user_memory(xs, g.src), p.weights_pd->src_desc(), s)},
                  {DNNL_ARG_DIFF_DST, gy_for_data && gy_for_data.get_desc() == p.weights_pd->diff_dst_desc()
                                          ? gy_for_data
                                          : in_layout(user_gy, p.weights_pd->diff_dst_desc(), s)},
                  {DNNL_ARG_DIFF_WEIGHTS, gwm.mem},
                  {DNNL_ARG_SCRATCHPAD, scratchpad(p.weights_pd->scratchpad_desc())}};
        if (want_bias) args[DNNL_ARG_DIFF_BIAS] = user_memory(first ? gb[k] : slice_gb, g.bias);
        p.weights->execute(s, args);
        gwm.finish(s);
        if (!first) {
          s.wait();  // the slice's gradient is written before it is added
          simd::accumulate_f32(gw[k].data_ptr<float>(), slice_gw.data_ptr<float>(), static_cast<size_t>(w.numel()));
          if (want_bias)
            simd::accumulate_f32(gb[k].data_ptr<float>(), slice_gb.data_ptr<float>(), static_cast<size_t>(w.size(0)));
        }
      }
    }
    s.wait();
  });
  // The chunks' sums, in chunk order (the same result for any thread timing).
  auto total = [&](const std::vector<Tensor>& parts, const Tensor& out) {
    float* o = out.data_ptr<float>();
    std::fill(o, o + out.numel(), 0.0f);
    for (const Tensor& part : parts)
      for (int64_t i = 0; i < out.numel(); ++i) o[i] += part.data_ptr<float>()[i];
  };
  if (want_weight) total(gw, c.outputs[1]);
  if (want_bias) total(gb, c.outputs[2]);
}

}  // namespace kiln::cpu
