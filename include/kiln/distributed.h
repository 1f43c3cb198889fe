// Ranks as processes on one machine, with PyTorch's symmetric-memory model
// (torch.distributed._symmetric_memory) on CPU shared memory: every rank's
// symmetric buffers live in a shared-memory heap every peer maps, so a rank
// reads and writes a peer's buffer directly, and signal pads order them.
//
// A job is started by `kiln run --nproc N PROGRAM ...`, which gives each
// rank RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and the job's secret
// (KILN_JOB_SECRET, naming its segments). Every wait has a finite timeout:
// a dead or hung peer raises DistributedError naming the rank and the
// operation, never a hang.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::distributed {

// A peer that did not answer in time (dead or hung), or a job set up wrong.
class DistributedError : public Error {
 public:
  explicit DistributedError(const std::string& what) : Error(what) {}
};

// This process's place in the job, from the launcher's environment (a
// single rank of a world of one when started without it).
struct JobEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string secret;  // names this node's shared-memory segments
  // Where rank 0 serves the job's store (the gloo backend meets there).
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};
JobEnv job_env();
// A fresh random job secret (32 hex digits), as `kiln run` gives its ranks.
std::string new_job_secret();

// The default timeout of every wait, in milliseconds (30 s unless
// KILN_DIST_TIMEOUT_MS says otherwise); a call's own timeout overrides it.
int64_t default_timeout_ms();
void set_default_timeout_ms(int64_t ms);

// Reductions of the collectives: "sum", "avg", "max", "min".
enum class ReduceOp { Sum, Avg, Max, Min };
ReduceOp reduce_op_from_name(const std::string& name);

namespace symm_mem {

// A tensor in this rank's symmetric heap. Every rank must allocate (and
// free) its symmetric tensors in the same order with the same sizes, so each
// buffer sits at the same offset on every rank (rendezvous checks it).
Tensor empty(Shape sizes, DType dtype = kFloat32);

// The handle of a symmetric buffer, as PyTorch's _SymmetricMemory.
class SymmetricMemory {
 public:
  virtual ~SymmetricMemory() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Where the buffer (and each rank's signal pad) is mapped in this process.
  virtual std::vector<void*> buffer_ptrs() const = 0;
  virtual std::vector<void*> signal_pad_ptrs() const = 0;
  virtual size_t buffer_size() const = 0;  // bytes
  // A tensor aliasing `rank`'s buffer, from `storage_offset` elements on;
  // it must lie inside that buffer.
  virtual Tensor get_buffer(int rank, Shape sizes, DType dtype, int64_t storage_offset = 0) const = 0;
  // Every rank reaches it before any leaves. timeout_ms <= 0: the default.
  virtual void barrier(int channel = 0, int64_t timeout_ms = 0) = 0;
  // Raises the (channel, this rank) slot of dst_rank's pad, after this
  // rank's earlier writes (release); waits while a previous signal there is
  // still unconsumed. wait_signal consumes the slot src_rank raised here
  // (acquire), so the pads reset themselves.
  virtual void put_signal(int dst_rank, int channel = 0, int64_t timeout_ms = 0) = 0;
  virtual void wait_signal(int src_rank, int channel = 0, int64_t timeout_ms = 0) = 0;
  // One-sided copies between this rank's tensor and dst/src rank's buffer
  // (byte offset into it), needing nothing from the peer.
  virtual void put(const Tensor& src, int dst_rank, size_t offset_bytes = 0) = 0;
  virtual void get(Tensor& dst, int src_rank, size_t offset_bytes = 0) = 0;
};

// Maps every peer's copy of t's buffer (t from symm_mem::empty); collective:
// every rank calls it for the same buffer.
std::shared_ptr<SymmetricMemory> rendezvous(const Tensor& t);

// Each rank reads every peer's buffer and reduces (one round: the lowest
// latency). Returns a new tensor; `input` stays as it was.
Tensor one_shot_all_reduce(const Tensor& input, const std::string& reduce_op = "sum");
// Reduce-scatter then all-gather through the peers' buffers, in place:
// every rank moves 2 (W-1)/W of the data (bandwidth-optimal).
Tensor& two_shot_all_reduce_(Tensor& input, const std::string& reduce_op = "sum");

// Reduce-scatter through the peers' buffers (PyTorch's reduce_scatter_out):
// input (symmetric, contiguous, W * n rows along dim 0) is reduced over the
// ranks and this rank's n rows (rows [rank * n, (rank + 1) * n)) written
// to out (any tensor of that shape and dtype). Returns out.
Tensor& reduce_scatter_out(const Tensor& input, Tensor& out, const std::string& reduce_op = "sum");
// All-gather through the peers' buffers: out (any tensor, W times input's
// rows along dim 0) gets every rank's input (symmetric, contiguous), in
// rank order. Returns out.
Tensor& all_gather_out(const Tensor& input, Tensor& out);

// Mixture-of-experts token exchange on symmetric buffers (PyTorch's
// all_to_all_vdev): input, out and the split tensors all come from
// symm_mem::empty; input_splits (int64 [W]) says how many rows of input go
// to each rank, in rank order. Fills out with the rows every rank sends
// here, in rank order, and out_splits_offsets (int64 [2, W]) with how many
// came from each rank and where in out they start.
void all_to_all_vdev(const Tensor& input, Tensor& out, const Tensor& input_splits, Tensor& out_splits_offsets);
// The 2-D form: input_splits (int64 [W * E], E experts per rank) is
// rank-major (the rows for rank r's expert e at r * E + e); out is
// expert-major: for each local expert e, the rows from rank 0, 1, ..., W-1,
// each expert's block starting at a multiple of major_align rows (padding
// rows between are left as they were). out_splits_offsets (int64
// [2, E * W]) gets the rows and start of each (expert e, source r) at
// e * W + r.
void all_to_all_vdev_2d(const Tensor& input, Tensor& out, const Tensor& input_splits, Tensor& out_splits_offsets,
                        int64_t major_align = 1);

// Channels kiln's collectives and point-to-point use for their own
// signals (0 to 3); user barriers and signals on them while those run would
// consume their signals.
inline constexpr int kCollectiveChannels = 4;
inline constexpr int kNumChannels = 16;

}  // namespace symm_mem

// torch.distributed's process group. Backends: "symm" (the ranks of one
// machine, on symmetric memory: each rank stages its tensors in a scratch
// buffer of its symmetric heap that every peer reads), "gloo" (Debian's
// libgloo over TCP, any machines) and "symm+gloo" (what "auto" gives a job
// on several machines: symm inside each node, gloo across). Tensors may be
// any CPU tensors (non-contiguous ones are copied); every rank must call
// every collective in the same order. timeout_ms <= 0: the default timeout.
//
// Each collective is a dispatcher op, as in PyTorch (c10d::allreduce_,
// ...): the profiler times it, modes see it, and kiln::compile ends its
// graph at it and runs it eagerly (it talks to other processes). The op's
// kernel calls the backend's *_impl.
class ProcessGroup {
 public:
  ProcessGroup();  // registers the group, under id(), for the ops' kernels
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  int64_t id() const { return id_; }
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  // In place: t becomes the reduction of every rank's t (symm: below
  // one_shot_max_bytes() each rank reduces everything itself, one round;
  // above, each reduces a 1/W slice and gathers the others, two rounds,
  // 2 (W-1)/W of the data moved per rank).
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum, int64_t timeout_ms = 0);
  // out = the concatenation along dim 0 of every rank's input (out has W
  // times input's rows).
  void all_gather(Tensor& out, const Tensor& input, int64_t timeout_ms = 0);
  // out = this rank's slice (rows [rank*n, (rank+1)*n)) of the reduction of
  // every rank's input (input has W times out's rows).
  void reduce_scatter(Tensor& out, const Tensor& input, ReduceOp op = ReduceOp::Sum, int64_t timeout_ms = 0);
  void broadcast(Tensor& t, int src, int64_t timeout_ms = 0);
  void barrier(int64_t timeout_ms = 0);
  // Rows of input go to the ranks in order, input_splits[r] of them to rank
  // r; out receives output_splits[r] rows from rank r, in rank order (as
  // all_to_all_single). Each rank's input_splits[me] must equal my
  // output_splits[its rank].
  void all_to_all_v(Tensor& out, const Tensor& input, const std::vector<int64_t>& output_splits,
                    const std::vector<int64_t>& input_splits, int64_t timeout_ms = 0);
  // Blocking point-to-point: send returns when dst has the data.
  void send(const Tensor& t, int dst, int64_t timeout_ms = 0);
  void recv(Tensor& t, int src, int64_t timeout_ms = 0);

  // symm's all_reduce size (bytes) up to which one-shot is used; measured on
  // this machine per world size (BENCHMARKS.md), settable
  // (KILN_SYMM_ONE_SHOT_MAX_BYTES). gloo has one algorithm (a ring): 0, and
  // setting it is an error.
  virtual size_t one_shot_max_bytes() const = 0;
  virtual void set_one_shot_max_bytes(size_t bytes) = 0;

  // The backend's collectives, as the ops' kernels call them with their
  // arguments checked (collective_ops.cpp).
  virtual void all_reduce_impl(Tensor& t, ReduceOp op, int64_t timeout_ms) = 0;
  virtual void all_gather_impl(Tensor& out, const Tensor& input, int64_t timeout_ms) = 0;
  virtual void reduce_scatter_impl(Tensor& out, const Tensor& input, ReduceOp op, int64_t timeout_ms) = 0;
  virtual void broadcast_impl(Tensor& t, int src, int64_t timeout_ms) = 0;
  virtual void barrier_impl(int64_t timeout_ms) = 0;
  virtual void all_to_all_v_impl(Tensor& out, const Tensor& input, const std::vector<int64_t>& output_splits,
                                 const std::vector<int64_t>& input_splits, int64_t timeout_ms) = 0;
  virtual void send_impl(const Tensor& t, int dst, int64_t timeout_ms) = 0;
  virtual void recv_impl(Tensor& t, int src, int64_t timeout_ms) = 0;

 private:
  int64_t id_;
};

// The live group registered under `id` (a ProcessGroup's id()); an error
// naming the op when none is.
ProcessGroup& process_group_by_id(int64_t id, const char* op);
// "sum", "avg", "max", "min".
const char* reduce_op_name(ReduceOp op);

// The default group, as torch.distributed.init_process_group: backend
// "symm" (or "auto", the same on one machine). Collective: every rank calls
// it. Calling it twice is an error; destroy_process_group() ends it.
ProcessGroup& init_process_group(const std::string& backend = "auto");
bool is_initialized();
ProcessGroup& default_group();  // an error before init_process_group
void destroy_process_group();
int get_rank();
int get_world_size();

// all_to_all_v as a differentiable function (tokens of a mixture of
// experts): returns the rows this rank receives (output_splits[r] from rank
// r, in rank order); its backward sends the gradients back the same way
// (splits swapped). Every rank's backward must reach it in the same order,
// as every rank's forward did.
Tensor all_to_all_v(const Tensor& input, const std::vector<int64_t>& output_splits,
                    const std::vector<int64_t>& input_splits, ProcessGroup& group);

}  // namespace kiln::distributed

KILN_API_END
