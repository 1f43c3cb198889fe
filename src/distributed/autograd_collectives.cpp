// Collectives that autograd differentiates through (include/kiln/distributed.h).
#include "kiln/autograd_function.h"
#include "kiln/distributed.h"

namespace kiln::distributed {

namespace {

struct AllToAllV : autograd::Function<AllToAllV> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& input, std::vector<int64_t> output_splits,
                        std::vector<int64_t> input_splits, ProcessGroup* group) {
    int64_t rows = 0;
    for (int64_t s : output_splits) rows += s;
    Shape sizes = input.sizes();
    check(!sizes.empty(), "distributed.all_to_all_v", "expects rows along dim 0, got a 0-dim tensor");
    sizes[0] = rows;
    Tensor out = empty(sizes, input.dtype());
    group->all_to_all_v(out, input, output_splits, input_splits);
    ctx->saved_data["output_splits"] = std::move(output_splits);
    ctx->saved_data["input_splits"] = std::move(input_splits);
    ctx->saved_data["group"] = group;
    ctx->saved_data["input_rows"] = input.size(0);
    return out;
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    auto out_splits = std::any_cast<std::vector<int64_t>>(ctx->saved_data["output_splits"]);
    auto in_splits = std::any_cast<std::vector<int64_t>>(ctx->saved_data["input_splits"]);
    auto* group = std::any_cast<ProcessGroup*>(ctx->saved_data["group"]);
    Shape sizes = grads[0].sizes();
    sizes[0] = std::any_cast<int64_t>(ctx->saved_data["input_rows"]);
    Tensor g = empty(sizes, grads[0].dtype());
    group->all_to_all_v(g, grads[0], in_splits, out_splits);  // the rows go back where they came from
    return {g};
  }
};

}  // namespace

Tensor all_to_all_v(const Tensor& input, const std::vector<int64_t>& output_splits,
                    const std::vector<int64_t>& input_splits, ProcessGroup& group) {
  return AllToAllV::apply(input, output_splits, input_splits, &group);
}

}  // namespace kiln::distributed
