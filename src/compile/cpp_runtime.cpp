// The cpp backend's runtime: runs a generated loop (cpp_kernel.h) over a
// graph's values, split over the thread pool, after checking that the
// values fit the loop; false lets the interpreter run its nodes instead.
#include <algorithm>
#include <atomic>
#include <chrono>

#include "cpp_kernel.h"
#include "kiln/compile.h"
#include "kiln/profiler.h"
#include "kiln/runtime.h"

namespace kiln::compiler::detail {
namespace {

std::atomic<int64_t> fused_run_count{0};

}  // namespace

int64_t fused_loop_runs() { return fused_run_count.load(); }

bool FusedKernel::run(std::vector<Tensor>& vals, const Trace& t) const {
  const FusedKernel& k = *this;
  // The structure key fixes dtypes and layouts, but not every size under
  // dynamic shapes: check before trusting the loop.
  const Shape& shape = sizes_of(t, k.space_value);
  const int64_t n = shape_numel(shape);
  const int64_t cols = k.cols > 0 ? shape.back() : n;
  if (k.cols > 0 && cols != k.cols) return false;
  const int64_t rows = cols > 0 ? n / cols : 0;
  std::vector<const float*> in;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const Tensor& x = vals[k.inputs[i]];
    const int64_t want = k.index[i] == 'j' ? n : k.index[i] == 'r' ? rows : k.index[i] == 'q' ? rows * k.width[i] : cols;
    if (x.dtype() != kFloat32 || x.numel() != want || !x.is_contiguous()) return false;
    in.push_back(x.data_ptr<float>());
  }
  for (int v : {k.row_x, k.row_w, k.row_b}) {
    if (v < 0) continue;
    const Tensor& x = vals[v];
    if (x.dtype() != kFloat32 || x.numel() != (v == k.row_x ? n : cols) || !x.is_contiguous()) return false;
    in.push_back(x.data_ptr<float>());
  }
  std::vector<float> scalars;
  for (int v : k.scalars) {
    if (vals[v].numel() != 1) return false;
    scalars.push_back(vals[v].item<float>());
  }
  // An input overwritten in place must not overlap the others (the loop
  // declares them __restrict); only flat loops write in place.
  for (int over : k.in_place) {
    if (over < 0) continue;
    const float* a = in[static_cast<size_t>(over)];
    for (size_t i = 0; i < k.inputs.size(); ++i)
      if (static_cast<int>(i) != over && in[i] < a + n && a < in[i] + n) return false;
  }
  const FusedFn fn = k.fn;
  fused_run_count++;
  const int64_t chunk = k.cols > 0 ? chunk_rows(k.cols) : 0, chunks = k.cols > 0 ? (rows + chunk - 1) / chunk : 0;
  std::vector<float*> out;
  std::vector<Tensor> partial(k.outputs.size());
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    const int v = k.outputs[o];
    if (std::count(k.col_sums.begin(), k.col_sums.end(), static_cast<int>(o))) {
      partial[o] = empty({std::max<int64_t>(chunks, 1), cols}, kFloat32);
      out.push_back(partial[o].data_ptr<float>());
      continue;
    }
    vals[v] = k.in_place[o] >= 0 ? vals[k.inputs[static_cast<size_t>(k.in_place[o])]] : empty(sizes_of(t, v), kFloat32);
    out.push_back(vals[v].data_ptr<float>());
  }
  const bool timed = profiler::enabled();
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (k.cols == 0) {
    parallel_for(0, n, 32768, [&](int64_t lo, int64_t hi) { fn(in.data(), scalars.data(), out.data(), lo, hi); });
  } else {
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t ch = b; ch < e; ++ch)
        fn(in.data(), scalars.data(), out.data(), ch * chunk, std::min(rows, (ch + 1) * chunk));
    });
  }
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    if (!partial[o].defined()) continue;
    // The chunks' partial rows, added in chunk order.
    Tensor result = zeros(sizes_of(t, k.outputs[o]), kFloat32);
    float* r = result.data_ptr<float>();
    const float* p = partial[o].data_ptr<float>();
    for (int64_t ch = 0; ch < chunks; ++ch)
      for (int64_t c = 0; c < cols; ++c) r[c] += p[ch * cols + c];
    vals[k.outputs[o]] = result;
  }
  if (timed) {  // "loop(add,mul,sum,...) [shape]"
    std::string key = "loop(";
    for (size_t i = 0; i < k.node_list.size() && i < 8; ++i) key.append(i ? "," : "").append(t.nodes[k.node_list[i]].op->name);
    key.append(k.node_list.size() > 8 ? ",...) " : ") ").append(shape_str(shape));
    profiler::detail::record(std::move(key), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (const auto& [node, source] : k.views_after) {
    const TracedNode& n = t.nodes[node];
    const Tensor src[] = {vals[source]};
    vals[n.outputs[0]] = run_kernel(*n.op, src, n.attrs)[0];
  }
  return true;
}

}  // namespace kiln::compiler::detail
