// The process group's collectives as dispatcher ops, named as PyTorch's
// c10d ops. Each writes its destination (input 0) in place and returns it;
// send and barrier return nothing. The group travels as its registry id
// (an attribute), the reduction by name. The kernels call the backend.
#include <map>
#include <mutex>

#include "autograd/graph.h"
#include "distributed/group_util.h"
#include "distributed/symmetric_memory.h"
#include "kiln/dispatch.h"

namespace kiln::distributed {

using namespace detail;

namespace {

std::mutex g_groups_mu;
std::map<int64_t, ProcessGroup*> g_groups;
int64_t g_next_id = 1;

std::vector<TensorMeta> written_in_place(std::span<const Tensor> in, const Attrs&) {
  return {TensorMeta(in[0].sizes(), in[0].dtype())};
}
std::vector<TensorMeta> nothing(std::span<const Tensor>, const Attrs&) { return {}; }

const OpDef& collective(const char* name, const char* schema, ShapeFn shape, KernelFn kernel) {
  OpDef def{name, schema, OpKind::Compute, shape};
  def.has_side_effects = true;
  const OpDef& op = register_op(std::move(def));
  register_kernel(name, kCPU, kernel);
  autograd::register_nondifferentiable(name);
  return op;
}

ProcessGroup& group_of(const OpCall& c, const char* op) { return process_group_by_id(c.attrs.get_int("group"), op); }
int64_t timeout_of(const OpCall& c) { return c.attrs.get_int("timeout_ms"); }
ReduceOp reduce_of(const OpCall& c) { return reduce_op_from_name(c.attrs.get_string("reduce_op")); }

// The kernels check the arguments once for every backend (the backends'
// *_impl take them as checked), under the name the user called.
const OpDef& kAllReduce = collective(
    "c10d::allreduce_", "c10d::allreduce_(Tensor(a!) self, str reduce_op, int group, int timeout_ms) -> Tensor(a!)",
    written_in_place, [](const OpCall& c) {
      const char* name = "distributed.all_reduce";
      Tensor& t = c.outputs[0];
      check_cpu(t, name);
      check_reduction(t.dtype(), reduce_of(c), name);
      group_of(c, "c10d::allreduce_").all_reduce_impl(t, reduce_of(c), timeout_of(c));
    });
const OpDef& kBroadcast = collective(
    "c10d::broadcast_", "c10d::broadcast_(Tensor(a!) self, int src, int group, int timeout_ms) -> Tensor(a!)",
    written_in_place, [](const OpCall& c) {
      const char* name = "distributed.broadcast";
      ProcessGroup& g = group_of(c, "c10d::broadcast_");
      const int src = static_cast<int>(c.attrs.get_int("src"));
      check_cpu(c.outputs[0], name);
      check_rank(src, g.size(), name);
      g.broadcast_impl(c.outputs[0], src, timeout_of(c));
    });
const OpDef& kAllGather = collective(
    "c10d::_allgather_base_",
    "c10d::_allgather_base_(Tensor(a!) out, Tensor input, int group, int timeout_ms) -> Tensor(a!)",
    written_in_place, [](const OpCall& c) {
      const char* name = "distributed.all_gather";
      ProcessGroup& g = group_of(c, "c10d::_allgather_base_");
      Tensor& out = c.outputs[0];
      const Tensor& input = c.inputs[1];
      check_cpu(out, name);
      check_cpu(input, name);
      check_rows(out, input, rows(input) * g.size(), name, "W times the input's");
      g.all_gather_impl(out, input, timeout_of(c));
    });
const OpDef& kReduceScatter = collective(
    "c10d::_reduce_scatter_base_",
    "c10d::_reduce_scatter_base_(Tensor(a!) out, Tensor input, str reduce_op, int group, int timeout_ms) -> Tensor(a!)",
    written_in_place, [](const OpCall& c) {
      const char* name = "distributed.reduce_scatter";
      ProcessGroup& g = group_of(c, "c10d::_reduce_scatter_base_");
      Tensor& out = c.outputs[0];
      const Tensor& input = c.inputs[1];
      check_cpu(out, name);
      check_cpu(input, name);
      check_reduction(input.dtype(), reduce_of(c), name);
      check_rows(input, out, rows(out) * g.size(), name, "W times the output's");
      g.reduce_scatter_impl(out, input, reduce_of(c), timeout_of(c));
    });
const OpDef& kAllToAll = collective(
    "c10d::alltoall_base_",
    "c10d::alltoall_base_(Tensor(a!) out, Tensor input, int[] output_split_sizes, int[] input_split_sizes, int group, "
    "int timeout_ms) -> Tensor(a!)",
    written_in_place, [](const OpCall& c) {
      ProcessGroup& g = group_of(c, "c10d::alltoall_base_");
      const Shape& output_splits = c.attrs.get_shape("output_split_sizes");
      const Shape& input_splits = c.attrs.get_shape("input_split_sizes");
      check_all_to_all_v(c.outputs[0], c.inputs[1], output_splits, input_splits, g.size(), "distributed.all_to_all_v");
      g.all_to_all_v_impl(c.outputs[0], c.inputs[1], output_splits, input_splits, timeout_of(c));
    });

// send and recv: a peer in the group other than this rank.
void check_peer(const Tensor& t, int peer, const ProcessGroup& g, const char* name, const char* to_or_from) {
  check_cpu(t, name);
  check_rank(peer, g.size(), name);
  check(peer != g.rank(), name, "rank ", g.rank(), " cannot ", to_or_from, " itself");
}

const OpDef& kSend = collective(
    "c10d::send", "c10d::send(Tensor self, int dst, int group, int timeout_ms) -> ()", nothing,
    [](const OpCall& c) {
      ProcessGroup& g = group_of(c, "c10d::send");
      const int dst = static_cast<int>(c.attrs.get_int("dst"));
      check_peer(c.inputs[0], dst, g, "distributed.send", "send to");
      g.send_impl(c.inputs[0], dst, timeout_of(c));
    });
const OpDef& kRecv = collective(
    "c10d::recv_", "c10d::recv_(Tensor(a!) self, int src, int group, int timeout_ms) -> Tensor(a!)",
    written_in_place, [](const OpCall& c) {
      ProcessGroup& g = group_of(c, "c10d::recv_");
      const int src = static_cast<int>(c.attrs.get_int("src"));
      check_peer(c.outputs[0], src, g, "distributed.recv", "receive from");
      g.recv_impl(c.outputs[0], src, timeout_of(c));
    });
const OpDef& kBarrier = collective("c10d::barrier", "c10d::barrier(int group, int timeout_ms) -> ()", nothing,
                                   [](const OpCall& c) { group_of(c, "c10d::barrier").barrier_impl(timeout_of(c)); });

// Runs a collective writing `dst` in place (the op's input 0 and its out=).
void run(const OpDef& op, Tensor& dst, std::vector<Tensor> inputs, Attrs attrs) {
  check(dst.defined(), op.name.c_str(), "expects defined CPU tensors");
  const Tensor out[] = {dst};
  dispatch(op, inputs, attrs, out);
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "sum";
}

ProcessGroup::ProcessGroup() {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  id_ = g_next_id++;
  g_groups[id_] = this;
}

ProcessGroup::~ProcessGroup() {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  g_groups.erase(id_);
}

ProcessGroup& process_group_by_id(int64_t id, const char* op) {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  auto it = g_groups.find(id);
  check(it != g_groups.end(), op, "process group ", id, " does not exist (destroyed, or never created)");
  return *it->second;
}

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op, int64_t timeout_ms) {
  run(kAllReduce, t, {t}, {{"reduce_op", std::string(reduce_op_name(op))}, {"group", id_}, {"timeout_ms", timeout_ms}});
}

void ProcessGroup::broadcast(Tensor& t, int src, int64_t timeout_ms) {
  run(kBroadcast, t, {t}, {{"src", int64_t{src}}, {"group", id_}, {"timeout_ms", timeout_ms}});
}

void ProcessGroup::all_gather(Tensor& out, const Tensor& input, int64_t timeout_ms) {
  check(input.defined(), "distributed.all_gather", "expects defined CPU tensors");
  run(kAllGather, out, {out, input}, {{"group", id_}, {"timeout_ms", timeout_ms}});
}

void ProcessGroup::reduce_scatter(Tensor& out, const Tensor& input, ReduceOp op, int64_t timeout_ms) {
  check(input.defined(), "distributed.reduce_scatter", "expects defined CPU tensors");
  run(kReduceScatter, out, {out, input},
      {{"reduce_op", std::string(reduce_op_name(op))}, {"group", id_}, {"timeout_ms", timeout_ms}});
}

void ProcessGroup::all_to_all_v(Tensor& out, const Tensor& input, const std::vector<int64_t>& output_splits,
                                const std::vector<int64_t>& input_splits, int64_t timeout_ms) {
  check(input.defined(), "distributed.all_to_all_v", "expects defined CPU tensors");
  run(kAllToAll, out, {out, input},
      {{"output_split_sizes", Shape(output_splits)},
       {"input_split_sizes", Shape(input_splits)},
       {"group", id_},
       {"timeout_ms", timeout_ms}});
}

void ProcessGroup::send(const Tensor& t, int dst, int64_t timeout_ms) {
  check(t.defined(), "distributed.send", "expects defined CPU tensors");
  const Tensor in[] = {t};
  dispatch(kSend, in, {{"dst", int64_t{dst}}, {"group", id_}, {"timeout_ms", timeout_ms}});
}

void ProcessGroup::recv(Tensor& t, int src, int64_t timeout_ms) {
  run(kRecv, t, {t}, {{"src", int64_t{src}}, {"group", id_}, {"timeout_ms", timeout_ms}});
}

void ProcessGroup::barrier(int64_t timeout_ms) {
  dispatch(kBarrier, {}, {{"group", id_}, {"timeout_ms", timeout_ms}});
}

}  // namespace kiln::distributed
