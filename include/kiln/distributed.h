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
  std::string secret;  // names the job's shared-memory segments
};
JobEnv job_env();

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

// Channels the collectives use for their own barriers; user barriers and
// signals on them while a collective runs would consume its signals.
inline constexpr int kCollectiveChannels = 2;
inline constexpr int kNumChannels = 16;

}  // namespace symm_mem
}  // namespace kiln::distributed
