// The job's node as this process sees it: one shared-memory segment per
// local rank, every peer's mapped here, holding a header, the rank's signal
// pad and its symmetric heap. Internal to src/distributed.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/distributed.h"

namespace kiln::distributed::detail {

// The start of every segment. Written by its owner, read by peers.
struct SegmentHeader {
  uint64_t magic;
  int32_t rank, world_size;
  int32_t pid;  // lets a waiter tell a dead peer from a slow one
  // rendezvous: the (serial, offset, bytes) of the buffer this rank is
  // exchanging, compared by every peer
  uint64_t rendezvous_serial, rendezvous_offset, rendezvous_bytes;
};

class World {
 public:
  // The process's world, set up on first use (collective: every rank of the
  // job must reach it).
  static World& get();

  const JobEnv& env() const { return env_; }
  // Symmetric memory spans the ranks of one machine: its ranks are the
  // job's local ranks (all of them on a job of one node).
  int rank() const { return env_.local_rank; }
  int world_size() const { return env_.local_world_size; }

  SegmentHeader& header(int r) const { return *reinterpret_cast<SegmentHeader*>(bases_[r]); }
  uint32_t* signal_pad(int r) const { return reinterpret_cast<uint32_t*>(bases_[r] + kPadOffset); }
  size_t signal_pad_bytes() const { return sizeof(uint32_t) * symm_mem::kNumChannels * world_size(); }
  uint8_t* heap(int r) const { return bases_[r] + kHeapOffset; }
  size_t heap_bytes() const { return segment_bytes_ - kHeapOffset; }

  // Signals (Note [Signal pads]). `op` names the caller in errors.
  void put_signal(int dst, int channel, int64_t timeout_ms, const char* op);
  void wait_signal(int src, int channel, int64_t timeout_ms, const char* op);
  void barrier(int channel, int64_t timeout_ms, const char* op);

  // The symmetric heap: first fit over this rank's heap, so the same
  // sequence of allocations gives the same offsets on every rank. Each block
  // gets a serial number, the same on every rank for the same allocation.
  struct Block {
    size_t offset, bytes;
    uint64_t serial;
  };
  Block allocate(size_t bytes);
  void release(size_t offset);
  // The live block holding byte `offset` of this rank's heap.
  Block block_at(size_t offset, const char* op) const;

 private:
  World();
  // put: raises the slot of (channel, this rank) in peer's pad; else takes
  // the slot of (channel, peer) in this rank's (Note [Signal pads]). Peer
  // and channel are checked first; a wait that gives up is a
  // DistributedError saying whether the peer exited or did not answer.
  void flip_slot(bool put, int peer, int channel, int64_t timeout_ms, const char* op);

  static constexpr size_t kPadOffset = 4096;
  static constexpr size_t kHeapOffset = 65536;

  JobEnv env_;
  size_t segment_bytes_ = 0;
  std::vector<uint8_t*> bases_;
  mutable std::mutex heap_mu_;
  std::map<size_t, size_t> free_;       // offset -> bytes
  std::map<size_t, Block> allocated_;   // offset -> block
  uint64_t next_serial_ = 1;
};

int64_t resolve_timeout(int64_t timeout_ms);

// A setting's whole number from the environment (fallback when unset); any
// other text, or a value outside [0, max], is a DistributedError naming it.
int64_t env_count(const char* name, int64_t fallback, int64_t max);

}  // namespace kiln::distributed::detail
