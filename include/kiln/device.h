// Devices: where a tensor's memory lives and which kernels compute on it.
//
// A Device is a type and an index, as torch::Device: "cpu", "meta", later
// "cuda:1". The meta device (PyTorch's) holds tensors with sizes, strides and
// dtype but no data: every op on meta tensors runs its shape function only,
// so a model can be built and a training step traced without memory.
//
// Each device type has one Allocator, registered by the type's own code
// (the CPU's caching allocator in src/core/allocator.cpp; a symmetric-memory
// allocator plugs in the same way); a storage keeps the allocator it came
// from and returns its memory to it.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace kiln {

enum class DeviceType : uint8_t { CPU, Meta };
inline constexpr int kNumDeviceTypes = 2;
inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kMeta = DeviceType::Meta;
const char* device_type_name(DeviceType t);

class Device {
 public:
  // Implicit from a type, as in PyTorch (`x.to(kMeta)`). The CPU and meta
  // are one device each: their index is -1 (0 is taken as -1).
  constexpr Device(DeviceType type = DeviceType::CPU, int index = -1)
      : type_(type), index_(static_cast<int16_t>(index == 0 && single(type) ? -1 : index)) {}
  // "cpu", "meta", "cpu:0"; anything else is a kiln::Error naming the text.
  explicit Device(std::string_view text);

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_meta() const { return type_ == DeviceType::Meta; }
  std::string str() const;  // "cpu", "meta"

  friend bool operator==(const Device&, const Device&) = default;

 private:
  static constexpr bool single(DeviceType t) { return t == DeviceType::CPU || t == DeviceType::Meta; }
  DeviceType type_;
  int16_t index_;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

// The device factories use when not given one: the CPU, or this thread's
// innermost DefaultDeviceGuard's (as `with torch.device("meta"):` in
// PyTorch, e.g. to build a model on meta). Kernels run with their own
// device as the default, so their temporaries never land elsewhere.
Device default_device();
class DefaultDeviceGuard {
 public:
  explicit DefaultDeviceGuard(Device device);
  ~DefaultDeviceGuard();
  DefaultDeviceGuard(const DefaultDeviceGuard&) = delete;
  DefaultDeviceGuard& operator=(const DefaultDeviceGuard&) = delete;

 private:
  Device previous_;
};

// The memory of one device type. allocate(0) may return null; memory comes
// back through deallocate with the size it was allocated with.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
};

// The allocator of a device type: the built-in ones (CPU, meta) from the
// start, others once registered. `allocator` must outlive every storage it
// made; registering replaces the previous one for storages made afterwards.
void register_allocator(DeviceType type, Allocator* allocator);
Allocator* allocator_for(DeviceType type);

}  // namespace kiln

KILN_API_END
