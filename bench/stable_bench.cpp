// kiln-bench-stable: the cost of calling an op through the stable C ABI by
// name (kiln_call_op: boxing, binding to the schema, a handle per result)
// and through call_op in C++, against the direct C++ call, on 1-element
// tensors so the op's own work is negligible (the goal: the C ABI adds at
// most 0.3 us per call); and the RoPE example extension against the same
// math in kiln ops (goal: 2x).
#include <cstring>

#include "baselines.h"
#include "bench_util.h"
#include "kiln/call_op.h"
#include "kiln/kiln.h"
#include "kiln/extension.h"
#include "kiln/stable/c/shim.h"
#include "rope_reference.h"

using namespace kiln;
using kiln::bench::time_pair;

int main(int argc, char** argv) {
  const kiln::bench::Reporter rep = kiln::bench::start_bench(argc, argv);
  constexpr int kCalls = 20000;
  Tensor a = randn({1}), b = randn({1}), c;
  // The same random values behind handles of the C ABI.
  KilnTensorHandle ha = nullptr, hb = nullptr;
  KilnValue stack[2];
  const int64_t one = 1;
  kiln_tensor_empty(&one, 1, kiln_dtype_float32(), kiln_device_type_cpu(), 0, &ha);
  kiln_tensor_empty(&one, 1, kiln_dtype_float32(), kiln_device_type_cpu(), 0, &hb);
  void* pa = nullptr;
  void* pb = nullptr;
  kiln_tensor_data_ptr(ha, &pa);
  kiln_tensor_data_ptr(hb, &pb);
  *static_cast<float*>(pa) = a.item<float>();
  *static_cast<float*>(pb) = b.item<float>();
  auto direct = [&] {
    for (int i = 0; i < kCalls; ++i) c = add(a, b);
  };
  auto by_shim = [&] {
    for (int i = 0; i < kCalls; ++i) {
      std::memset(stack, 0, sizeof stack);
      stack[0].kind = KILN_VALUE_TENSOR, stack[0].tensor = ha;
      stack[1].kind = KILN_VALUE_TENSOR, stack[1].tensor = hb;
      if (kiln_call_op("add.Tensor", stack, 2, 1) != KILN_OK) std::abort();
      kiln_tensor_delete(stack[0].tensor);
    }
  };
  auto by_call_op = [&] {
    for (int i = 0; i < kCalls; ++i) c = std::get<Tensor>(call_op("add.Tensor", {a, b})[0]);
  };
  const auto [t_shim, t_direct] = time_pair(by_shim, direct, 9);
  rep.report("stable", "add_1_element_by_name_c_abi", "us/call", t_shim / kCalls * 1e6, "direct_cpp_call",
             t_direct / kCalls * 1e6, false);
  const auto [t_call_op, t_direct2] = time_pair(by_call_op, direct, 9);
  rep.report("stable", "add_1_element_by_name_call_op", "us/call", t_call_op / kCalls * 1e6, "direct_cpp_call",
             t_direct2 / kCalls * 1e6, false);
  kiln_tensor_delete(ha);
  kiln_tensor_delete(hb);

  // The RoPE example extension against the same math in kiln ops, on a GPT
  // attention shape (B=8, H=8, T=512, D=64, float32).
  load_extension(KILN_ROPE_EXTENSION);
  const Tensor q = randn({8, 8, 512, 64});
  Tensor r1, r2;
  const auto [t_ext, t_ops] = time_pair([&] { r1 = std::get<Tensor>(call_op("rope::rope", {q})[0]); },
                                        [&] { r2 = rope_in_ops(q, 10000.0); }, 9);
  rep.report("stable", "rope_extension_8x8x512x64", "ms", t_ext * 1e3, "kiln_ops", t_ops * 1e3, false);
  return 0;
}
