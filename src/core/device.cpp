// Device names and the allocator of each device type.
#include "kiln/device.h"

#include <array>
#include <atomic>
#include <charconv>
#include <ostream>

#include "core/allocator.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// The CPU's memory: the caching allocator of core/allocator.h.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override { return core::allocate(nbytes); }
  void deallocate(void* p, size_t nbytes) override { core::deallocate(p, nbytes); }
};

// Meta tensors have no data: their storage is a size without memory.
class MetaAllocator final : public Allocator {
 public:
  void* allocate(size_t) override { return nullptr; }
  void deallocate(void*, size_t) override {}
};

// Constant-initialised, so a storage made during another translation unit's
// static initialisation finds the built-in allocators, and the lookup on
// every allocation has no initialisation guard to test.
constinit CpuAllocator cpu_allocator;
constinit MetaAllocator meta_allocator;
constinit std::array<std::atomic<Allocator*>, kNumDeviceTypes> allocator_table{&cpu_allocator, &meta_allocator};

thread_local Device thread_default_device;
// Guards alive on any thread: while none is, every default is the CPU and
// default_device() reads no thread-local (a call into __tls_get_addr from a
// shared library), since the dispatcher asks on every op.
std::atomic<int> guards_alive{0};

}  // namespace

Device default_device() {
  if (guards_alive.load(std::memory_order_relaxed) == 0) return Device(kCPU);
  return thread_default_device;
}

DefaultDeviceGuard::DefaultDeviceGuard(Device device) : previous_(thread_default_device) {
  guards_alive.fetch_add(1, std::memory_order_relaxed);
  thread_default_device = device;
}

DefaultDeviceGuard::~DefaultDeviceGuard() {
  thread_default_device = previous_;
  guards_alive.fetch_sub(1, std::memory_order_relaxed);
}

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::Meta: return "meta";
  }
  return "unknown";
}

Device::Device(std::string_view text) : Device() {
  const std::string_view type = text.substr(0, text.find(':'));
  bool known = false;
  for (int t = 0; t < kNumDeviceTypes; ++t)
    if (type == device_type_name(static_cast<DeviceType>(t))) {
      type_ = static_cast<DeviceType>(t);
      known = true;
    }
  check(known, "Device", "expected a device type (cpu, meta) with an optional index, e.g. 'cpu' or 'cpu:0', but got '",
        text, "'");
  if (type.size() == text.size()) return;
  const std::string_view digits = text.substr(type.size() + 1);
  int index = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  check(ec == std::errc() && end == digits.data() + digits.size() && index >= 0, "Device",
        "expected a non-negative device index after ':' but got '", text, "'");
  // The CPU and meta are one device each (Device's constructor).
  check(index == 0, "Device", "device type ", type, " has only device 0, but got '", text, "'");
}

std::string Device::str() const {
  std::string s = device_type_name(type_);
  if (index_ >= 0) s += ":" + std::to_string(index_);
  return s;
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

void register_allocator(DeviceType type, Allocator* allocator) {
  check(allocator != nullptr, "register_allocator", "null allocator for device type ", device_type_name(type));
  allocator_table[static_cast<int>(type)].store(allocator, std::memory_order_release);
}

Allocator* allocator_for(DeviceType type) {
  return allocator_table[static_cast<int>(type)].load(std::memory_order_acquire);
}

}  // namespace kiln
