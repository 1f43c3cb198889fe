// See include/kiln/data_parallel.h.
#include <string>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/data_parallel.h"
#include "kiln/ops.h"

namespace kiln::nn {

struct DistributedDataParallel::State {
  struct Bucket {
    std::vector<size_t> params;  // indices into State::params
    int64_t numel = 0;
    DType dtype = kFloat32;
    size_t ready = 0;
  };
  distributed::ProcessGroup& group;
  std::vector<std::pair<std::string, Tensor>> params;
  std::vector<bool> has_grad;  // in this backward, not yet reduced
  std::vector<size_t> bucket_of;
  std::vector<Bucket> buckets;

  explicit State(distributed::ProcessGroup& g) : group(g) {}

  // A parameter's gradient was accumulated: reduce its bucket once full.
  void on_grad(size_t p) {
    check(!has_grad[p], "DistributedDataParallel", "parameter '", params[p].first,
          "' got a second gradient before its bucket was reduced: a parameter that got no gradient in an earlier "
          "backward leaves its bucket incomplete (every parameter that requires grad must be used)");
    has_grad[p] = true;
    Bucket& b = buckets[bucket_of[p]];
    if (++b.ready == b.params.size()) reduce(b);
  }

  // Flattens the bucket's gradients, averages them across ranks, writes back.
  void reduce(Bucket& b) {
    NoGradGuard no_grad;
    Tensor flat = empty({b.numel}, b.dtype);
    int64_t at = 0;
    for (size_t p : b.params) {
      const Tensor g = params[p].second.grad();
      flat.slice(0, at, at + g.numel()).copy_(g.reshape({-1}));
      at += g.numel();
    }
    group.all_reduce(flat, distributed::ReduceOp::Avg);
    at = 0;
    for (size_t p : b.params) {
      Tensor g = params[p].second.grad();
      g.copy_(flat.slice(0, at, at + g.numel()).view(g.sizes()));
      at += g.numel();
      has_grad[p] = false;
    }
    b.ready = 0;
  }
};

DistributedDataParallel::DistributedDataParallel(Module& module, distributed::ProcessGroup& group, double bucket_cap_mb,
                                                 std::function<bool(const std::string&)> local_parameters)
    : module_(module), state_(std::make_shared<State>(group)) {
  auto is_local = [&](const std::string& name) { return local_parameters && local_parameters(name); };
  check(bucket_cap_mb > 0, "DistributedDataParallel", "bucket_cap_mb must be positive, got ", bucket_cap_mb);
  {
    NoGradGuard no_grad;  // rank 0's values everywhere
    for (auto& [name, p] : module.named_parameters()) {
      if (is_local(name)) continue;
      Tensor t = p;
      group.broadcast(t, 0);
    }
    for (auto& [name, b] : module.named_buffers()) {
      Tensor t = b;
      group.broadcast(t, 0);
    }
  }
  State& s = *state_;
  // The hooks hold the state weakly: a parameter outliving this object
  // keeps no reducer alive (and no cycle parameter -> hook -> parameter),
  // and its hooks do nothing once this object is gone.
  std::weak_ptr<State> weak = state_;
  const double inv_world = 1.0 / group.size();
  for (auto& np : module.named_parameters()) {
    if (!np.second.requires_grad()) continue;
    if (!is_local(np.first)) {
      s.params.push_back(np);
      continue;
    }
    // On each incoming gradient (not the accumulated .grad, which may hold
    // earlier, already scaled backwards).
    np.second.register_hook([weak, inv_world](const Tensor& g) { return weak.expired() ? Tensor() : g * inv_world; });
  }
  s.has_grad.assign(s.params.size(), false);
  s.bucket_of.assign(s.params.size(), 0);
  // Buckets in reverse parameter order (the order a backward reaches them),
  // one dtype each, up to bucket_cap_mb.
  const double cap = bucket_cap_mb * (1 << 20);
  for (size_t i = s.params.size(); i-- > 0;) {
    const Tensor& p = s.params[i].second;
    const double bytes = static_cast<double>(p.numel() * static_cast<int64_t>(element_size(p.dtype())));
    const bool fits = !s.buckets.empty() && s.buckets.back().dtype == p.dtype() &&
                      static_cast<double>(s.buckets.back().numel * static_cast<int64_t>(element_size(p.dtype()))) + bytes <= cap;
    if (!fits) {
      s.buckets.emplace_back();
      s.buckets.back().dtype = p.dtype();
    }
    s.buckets.back().params.push_back(i);
    s.buckets.back().numel += p.numel();
    s.bucket_of[i] = s.buckets.size() - 1;
  }
  for (size_t i = 0; i < s.params.size(); ++i)
    s.params[i].second.register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto st = weak.lock()) st->on_grad(i);
    });
}

DistributedDataParallel::~DistributedDataParallel() = default;

size_t DistributedDataParallel::num_buckets() const { return state_->buckets.size(); }

}  // namespace kiln::nn
