// The fused optimizer updates (ops: src/ops/optimizer_steps.cpp), float32:
// the elements split over the thread pool, each chunk one pass of
// optimizer_simd.cpp's loop.
#include <cmath>

#include "kernels/cpu/kernel_tensors.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd.h"

namespace kiln::cpu {

void fused_adam_kernel(const OpCall& c) {
  const Tensor &param = c.outputs[0], &exp_avg = c.outputs[1], &exp_avg_sq = c.outputs[2];
  for (const Tensor* t : {&c.inputs[0], &c.inputs[1], &c.inputs[2], &c.inputs[3]})
    check(t->dtype() == kFloat32 && t->numel() == param.numel(), "_fused_adam_",
          "expected float32 tensors of the parameter's ", param.numel(), " elements but got ", t->dtype(), " ",
          shape_text(t->sizes()));
  // In place (the optimizer's call: the outputs are the inputs, dense and
  // laid out alike, row-major or channels-last), or into fresh outputs.
  const Tensor* sources[] = {&c.inputs[0], &c.inputs[2], &c.inputs[3]};
  const Tensor* targets[] = {&param, &exp_avg, &exp_avg_sq};
  const MemoryFormat f = param.is_contiguous() ? MemoryFormat::Contiguous : param.suggest_memory_format();
  for (int i = 0; i < 3; ++i) {
    check(targets[i]->is_contiguous(f) && targets[i]->strides() == param.strides(), "_fused_adam_",
          "expected dense outputs laid out alike");
    if (targets[i]->data_ptr<float>() != sources[i]->data_ptr<float>() || sources[i]->strides() != param.strides())
      copy_into(*targets[i], *sources[i]);
  }
  const Tensor grad = contiguous(c.inputs[1], f);
  const Attrs& a = c.attrs;
  const double lr = a.get_double("lr"), wd = a.get_double("weight_decay"), beta1 = a.get_double("beta1"),
               beta2 = a.get_double("beta2");
  const bool decoupled = a.get_bool("decoupled");
  // The numbers as the op-by-op update converts them (double, then float).
  simd::AdamScalars s{};
  s.decay = decoupled && wd != 0 ? static_cast<float>(1 - lr * wd) : 1.0f;
  s.l2_decay = !decoupled && wd != 0;
  s.l2 = static_cast<float>(wd);
  s.beta1 = static_cast<float>(beta1), s.one_minus_beta1 = static_cast<float>(1 - beta1);
  s.beta2 = static_cast<float>(beta2), s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(a.get_double("bias_correction2")));
  s.eps = static_cast<float>(a.get_double("eps"));
  s.step_size = static_cast<float>(lr / a.get_double("bias_correction1"));
  float *p = param.data_ptr<float>(), *m = exp_avg.data_ptr<float>(), *v = exp_avg_sq.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  parallel_for(0, param.numel(), kGrain, [&](int64_t b, int64_t e) {
    simd::adam_step_f32(p + b, g + b, m + b, v + b, static_cast<size_t>(e - b), s);
  });
}

}  // namespace kiln::cpu
