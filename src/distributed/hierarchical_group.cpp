// The "auto" process group of a job on several machines (backend name
// "symm+gloo"): shared memory inside each node, gloo across them.
//
// all_reduce, the collective of data-parallel training, runs in three
// steps: the node's ranks all-reduce over symmetric memory; local rank i
// all-reduces the i-th of L chunks with local rank i of every other node
// (gloo, one group per local rank), so each node sends its data across the
// network once, not L times; then each local rank broadcasts its chunk to
// its node over shared memory. The other collectives go to a gloo group of
// every rank.
#include <algorithm>

#include "distributed/group_util.h"

namespace kiln::distributed::detail {

namespace {

class HierarchicalGroup final : public ProcessGroup {
 public:
  explicit HierarchicalGroup(const JobEnv& env) : rank_(env.rank), size_(env.world_size) {
    const int L = env.local_world_size;
    node_ = make_symm_group();
    all_ = make_gloo_group(env);
    std::vector<int> peers;  // this local rank on every node
    for (int r = env.local_rank; r < env.world_size; r += L) peers.push_back(r);
    across_ = make_gloo_group(env, peers);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "symm+gloo"; }
  // The node's all_reduce algorithm threshold.
  size_t one_shot_max_bytes() const override { return node_->one_shot_max_bytes(); }
  void set_one_shot_max_bytes(size_t bytes) override { node_->set_one_shot_max_bytes(bytes); }

  void all_reduce_impl(Tensor& t, ReduceOp op, int64_t timeout_ms) override {
    Contiguous c(t);
    Tensor flat = c.work.reshape({c.work.numel()});
    // Every node holds as many ranks, so the mean of the nodes' means is
    // the mean.
    node_->all_reduce(flat, op, timeout_ms);
    const int L = node_->size(), me = node_->rank();
    const int64_t n = flat.numel(), chunk = (n + L - 1) / L;
    auto piece = [&](int i) { return flat.slice(0, std::min(n, i * chunk), std::min(n, (i + 1) * chunk)); };
    Tensor mine = piece(me);
    across_->all_reduce(mine, op, timeout_ms);
    for (int i = 0; i < L; ++i) {
      Tensor p = piece(i);
      node_->broadcast(p, i, timeout_ms);
    }
    c.finish();
  }

  void broadcast_impl(Tensor& t, int src, int64_t timeout_ms) override { all_->broadcast(t, src, timeout_ms); }
  void all_gather_impl(Tensor& out, const Tensor& input, int64_t timeout_ms) override {
    all_->all_gather(out, input, timeout_ms);
  }
  void reduce_scatter_impl(Tensor& out, const Tensor& input, ReduceOp op, int64_t timeout_ms) override {
    all_->reduce_scatter(out, input, op, timeout_ms);
  }
  void all_to_all_v_impl(Tensor& out, const Tensor& input, const std::vector<int64_t>& output_splits,
                         const std::vector<int64_t>& input_splits, int64_t timeout_ms) override {
    all_->all_to_all_v(out, input, output_splits, input_splits, timeout_ms);
  }
  void send_impl(const Tensor& t, int dst, int64_t timeout_ms) override { all_->send(t, dst, timeout_ms); }
  void recv_impl(Tensor& t, int src, int64_t timeout_ms) override { all_->recv(t, src, timeout_ms); }
  void barrier_impl(int64_t timeout_ms) override { all_->barrier(timeout_ms); }

 private:
  int rank_, size_;
  std::unique_ptr<ProcessGroup> node_, all_, across_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_hierarchical_group(const JobEnv& env) {
  return std::make_unique<HierarchicalGroup>(env);
}

}  // namespace kiln::distributed::detail
