// symm_mem::empty, rendezvous and the handle (include/kiln/distributed.h).
#include <cstring>
#include <unordered_map>

#include "distributed/symmetric_memory.h"

namespace kiln::distributed::symm_mem {

using detail::World;
using kiln::detail::concat;

namespace {

class Handle final : public SymmetricMemory {
 public:
  Handle(World& w, World::Block b) : w_(w), block_(b) {}
  int rank() const override { return w_.rank(); }
  int world_size() const override { return w_.world_size(); }
  std::vector<void*> buffer_ptrs() const override {
    std::vector<void*> p;
    for (int r = 0; r < w_.world_size(); ++r) p.push_back(w_.heap(r) + block_.offset);
    return p;
  }
  std::vector<void*> signal_pad_ptrs() const override {
    std::vector<void*> p;
    for (int r = 0; r < w_.world_size(); ++r) p.push_back(w_.signal_pad(r));
    return p;
  }
  size_t buffer_size() const override { return block_.bytes; }

  Tensor get_buffer(int r, Shape sizes, DType dtype, int64_t storage_offset) const override {
    const char* op = "symm_mem.get_buffer";
    check_rank(r, op);
    const int64_t n = shape_numel(sizes);
    const int64_t elem = static_cast<int64_t>(element_size(dtype));
    check(storage_offset >= 0 && (storage_offset + n) * elem <= static_cast<int64_t>(block_.bytes), op,
          "sizes ", shape_str(sizes), " of ", dtype_name(dtype), " from element ", storage_offset, " need ",
          (storage_offset + n) * elem, " bytes; the buffer has ", block_.bytes);
    return from_blob(w_.heap(r) + block_.offset + storage_offset * elem, std::move(sizes), dtype);
  }

  void barrier(int channel, int64_t timeout_ms) override { w_.barrier(channel, timeout_ms, "symm_mem.barrier"); }
  void put_signal(int dst, int channel, int64_t timeout_ms) override {
    w_.put_signal(dst, channel, timeout_ms, "symm_mem.put_signal");
  }
  void wait_signal(int src, int channel, int64_t timeout_ms) override {
    w_.wait_signal(src, channel, timeout_ms, "symm_mem.wait_signal");
  }

  void put(const Tensor& src, int dst, size_t offset_bytes) override {
    copy_bytes(src, dst, offset_bytes, "symm_mem.put", true);
  }
  void get(Tensor& dst, int src, size_t offset_bytes) override {
    copy_bytes(dst, src, offset_bytes, "symm_mem.get", false);
  }

 private:
  void check_rank(int r, const char* op) const {
    check(r >= 0 && r < w_.world_size(), op, "rank ", r, " is not in the world of ", w_.world_size());
  }
  void copy_bytes(const Tensor& local, int peer, size_t offset, const char* op, bool to_peer) const {
    check_rank(peer, op);
    check(local.is_contiguous() && local.device().type() == DeviceType::CPU, op,
          "the local tensor must be a contiguous CPU tensor (got sizes ", shape_str(local.sizes()), ")");
    const size_t bytes = static_cast<size_t>(local.numel()) * element_size(local.dtype());
    check(offset <= block_.bytes && bytes <= block_.bytes - offset, op, bytes, " bytes at offset ", offset,
          " do not fit the buffer of ", block_.bytes, " bytes");
    uint8_t* remote = w_.heap(peer) + block_.offset + offset;
    if (to_peer) std::memcpy(remote, local.raw_data(), bytes);
    else std::memcpy(local.raw_data(), remote, bytes);
  }

  World& w_;
  World::Block block_;
};

}  // namespace

namespace {

// The symmetric heap as the allocator of the tensors it holds (CPU memory
// no device type allocates by default).
class SymmetricHeapAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    World& w = World::get();
    return w.heap(w.rank()) + w.allocate(nbytes).offset;
  }
  void deallocate(void* p, size_t) override {
    World& w = World::get();
    w.release(static_cast<size_t>(static_cast<uint8_t*>(p) - w.heap(w.rank())));
  }
};

}  // namespace

Tensor empty(Shape sizes, DType dtype) {
  static SymmetricHeapAllocator* const allocator = new SymmetricHeapAllocator;  // outlives every tensor
  return kiln::empty(std::move(sizes), TensorOptions(dtype).device(kCPU), *allocator);
}

std::shared_ptr<SymmetricMemory> rendezvous(const Tensor& t) { return detail::rendezvous(t, "symm_mem.rendezvous"); }

}  // namespace kiln::distributed::symm_mem

namespace kiln::distributed::detail {

using symm_mem::Handle;
using kiln::detail::concat;

std::shared_ptr<symm_mem::SymmetricMemory> rendezvous(const Tensor& t, const char* op) {
  World& w = World::get();
  const World::Block b = block_of(w, t, op);
  // Handles are cached per allocation (serial numbers match across ranks),
  // so the checking exchange below runs once per buffer.
  static std::mutex mu;
  static std::unordered_map<uint64_t, std::shared_ptr<symm_mem::SymmetricMemory>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(b.serial); it != cache.end()) return it->second;
  }
  SegmentHeader& mine = w.header(w.rank());
  mine.rendezvous_serial = b.serial;
  mine.rendezvous_offset = b.offset;
  mine.rendezvous_bytes = b.bytes;
  w.barrier(0, 0, op);  // every rank's slot written (the signals order the writes)
  std::string mismatch;
  for (int r = 0; r < w.world_size() && mismatch.empty(); ++r) {
    const SegmentHeader& h = w.header(r);
    if (h.rendezvous_offset != b.offset || h.rendezvous_bytes != b.bytes || h.rendezvous_serial != b.serial)
      mismatch = concat("rank ", r, " offers the buffer at offset ", h.rendezvous_offset, " of ", h.rendezvous_bytes,
                        " bytes (allocation ", h.rendezvous_serial, "), rank ", w.rank(), " the one at ", b.offset,
                        " of ", b.bytes, " bytes (allocation ", b.serial, ")");
  }
  w.barrier(0, 0, op);  // every rank read the slots before anyone reuses them
  if (!mismatch.empty())
    fail(op, mismatch, ": every rank must allocate its symmetric tensors in the same order with the same sizes");
  auto h = std::make_shared<Handle>(w, b);
  std::lock_guard<std::mutex> lock(mu);
  // A freed block's serial never returns, so stale entries are only memory;
  // drop them when the cache grows.
  if (cache.size() > 4096) cache.clear();
  cache[b.serial] = h;
  return h;
}

World::Block block_of(World& w, const Tensor& t, const char* op) {
  check(t.defined() && t.device().type() == DeviceType::CPU, op, "expects a CPU tensor from symm_mem::empty");
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  const uint8_t* heap = w.heap(w.rank());
  check(p >= heap && p < heap + w.heap_bytes(), op,
        "the tensor (sizes ", shape_str(t.sizes()), ") is not in the symmetric heap: allocate it with symm_mem::empty");
  return w.block_at(static_cast<size_t>(p - heap), op);
}

}  // namespace kiln::distributed::detail
