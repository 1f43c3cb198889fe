// See include/kiln/moe.h.
#include "kiln/moe.h"

#include <numeric>

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::nn {

namespace {

// Holds the local experts under their global indices ("experts.<e>").
struct ExpertList : Module {
  void add(const std::string& name, Module* m) { register_module(name, m); }
};

std::vector<int64_t> to_vector(const Tensor& t) {
  const Tensor c = t.to(kInt64).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

Tensor index_tensor(const std::vector<int64_t>& v) {
  return tensor(v, {static_cast<int64_t>(v.size())});
}

}  // namespace

Expert::Expert(int64_t n_embd, int64_t hidden) : up(n_embd, hidden), down(hidden, n_embd) {
  register_module("up", &up);
  register_module("down", &down);
}

Tensor Expert::forward(const Tensor& x) { return down(gelu(up(x), "tanh")); }

MoE::MoE(int64_t n_embd, int64_t num_experts, int64_t top_k, int64_t hidden, distributed::ProcessGroup* group,
         const std::function<void(Expert&)>& init)
    : router(n_embd, num_experts, /*bias=*/false), num_experts_(num_experts), top_k_(top_k), group_(group) {
  const int64_t W = group ? group->size() : 1;
  check(num_experts >= 1 && num_experts % W == 0, "MoE", "num_experts ", num_experts,
        " must be a positive multiple of the group's ", W, " ranks");
  check(top_k >= 1 && top_k <= num_experts, "MoE", "top_k ", top_k, " must be in [1, num_experts = ", num_experts, "]");
  register_module("router", &router);
  const int64_t per_rank = num_experts / W;
  first_local_ = (group ? group->rank() : 0) * per_rank;
  auto* list = new ExpertList();
  register_module("experts", list);
  list_.reset(list);
  for (int64_t e = 0; e < num_experts; ++e) {
    auto expert = std::make_unique<Expert>(n_embd, hidden);  // drawn on every rank, in order
    if (init) init(*expert);
    if (e < first_local_ || e >= first_local_ + per_rank) continue;
    list->add(std::to_string(e), expert.get());
    experts.push_back(std::move(expert));
  }
}

MoE::~MoE() = default;

bool MoE::is_expert_parameter(const std::string& name) {
  return name.rfind("experts.", 0) == 0 || name.find(".experts.") != std::string::npos;
}

Tensor MoE::forward(const Tensor& x) {
  const int64_t C = x.size(-1), E = num_experts_, k = top_k_;
  const int W = group_ ? group_->size() : 1;
  const int64_t per_rank = E / W;
  const Tensor tokens = x.reshape({-1, C});
  const int64_t N = tokens.size(0);

  // Routing: each token's top-k experts and their renormalised weights.
  const Tensor probs = softmax(router(tokens), -1);
  auto [top_p, top_e] = topk(probs, k, -1);
  const Tensor weights = top_p / top_p.sum({-1}, /*keepdim=*/true);

  // The N*k (token, expert) pairs sorted by expert (stable), so each rank's
  // share and each expert's rows are contiguous.
  const std::vector<int64_t> expert_of = to_vector(top_e.reshape({-1}));
  std::vector<int64_t> counts(E, 0), order(N * k);
  for (int64_t e : expert_of) ++counts[e];
  std::vector<int64_t> next(E, 0);
  std::partial_sum(counts.begin(), counts.end() - 1, next.begin() + 1);
  for (int64_t i = 0; i < N * k; ++i) order[next[expert_of[i]]++] = i;
  std::vector<int64_t> token_of_sorted(N * k);
  for (int64_t i = 0; i < N * k; ++i) token_of_sorted[i] = order[i] / k;
  const Tensor token_index = index_tensor(token_of_sorted);
  const Tensor sent = index_select(tokens, 0, token_index);                        // [N*k, C]
  const Tensor sent_w = index_select(weights.reshape({-1}), 0, index_tensor(order));  // [N*k]

  // To the experts' ranks: rows for rank r are those of its experts.
  std::vector<int64_t> in_splits(W, 0);
  for (int64_t e = 0; e < E; ++e) in_splits[e / per_rank] += counts[e];
  // [W][per_rank]: rows from rank s for local expert j (one "rank": every
  // expert's rows, in order).
  std::vector<int64_t> recv_counts = counts;
  std::vector<int64_t> out_splits = in_splits;
  Tensor received = sent;
  if (group_) {
    Tensor c = index_tensor(counts).view({W, per_rank}), got = empty({W, per_rank}, kInt64);
    group_->all_to_all_v(got, c, std::vector<int64_t>(W, 1), std::vector<int64_t>(W, 1));
    recv_counts = to_vector(got);
    for (int s = 0; s < W; ++s)
      out_splits[s] = std::accumulate(recv_counts.begin() + s * per_rank, recv_counts.begin() + (s + 1) * per_rank, int64_t{0});
    received = distributed::all_to_all_v(sent, out_splits, in_splits, *group_);
  }

  // Each local expert on its rows (from every source rank), the results
  // put back in the received order.
  std::vector<int64_t> perm;
  std::vector<Tensor> outs;
  std::vector<int64_t> source_start(W, 0);
  for (int s = 1; s < W; ++s) source_start[s] = source_start[s - 1] + out_splits[s - 1];
  for (int64_t j = 0; j < per_rank; ++j) {
    std::vector<int64_t> rows;
    for (int s = 0; s < W; ++s) {
      int64_t at = source_start[s];
      for (int64_t jj = 0; jj < j; ++jj) at += recv_counts[s * per_rank + jj];
      for (int64_t r = 0; r < recv_counts[s * per_rank + j]; ++r) rows.push_back(at + r);
    }
    if (rows.empty()) continue;
    outs.push_back((*experts[j])(index_select(received, 0, index_tensor(rows))));
    perm.insert(perm.end(), rows.begin(), rows.end());
  }
  Tensor expert_out;
  if (perm.empty()) {
    expert_out = received * 0.0;  // no rows here; keeps the graph (and the backward exchange) connected
  } else {
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
    expert_out = index_select(cat(outs, 0), 0, index_tensor(inverse));
  }
  const Tensor back = group_ ? distributed::all_to_all_v(expert_out, in_splits, out_splits, *group_) : expert_out;

  // Weighted sum of each token's k expert outputs.
  const Tensor contrib = back * sent_w.unsqueeze(1);
  const Tensor out = scatter_add(zeros({N, C}, x.dtype()), 0, token_index.unsqueeze(1).expand({N * k, C}), contrib);
  return out.reshape(x.sizes());
}

}  // namespace kiln::nn
