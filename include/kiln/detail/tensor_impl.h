// Storage and TensorImpl: the memory a tensor owns and the metadata (sizes,
// strides, offset, dtype) through which a tensor or a view reads it.
#pragma once
#include "kiln/export.h"
KILN_API_BEGIN  // Note [Exported symbols]
#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"

namespace kiln {

using Shape = std::vector<int64_t>;

// A block of bytes on a device, from that device's allocator (64-byte
// aligned on the CPU; no memory at all on meta), or foreign CPU memory with a
// deleter (from_blob).
class StorageImpl {
 public:
  // Allocates, uninitialised, from allocator_for(device.type()), or from
  // `allocator` (one registered for no device type: a symmetric heap).
  StorageImpl(size_t nbytes, Device device, Allocator* allocator = nullptr);
  StorageImpl(void* data, size_t nbytes, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  Allocator* allocator_ = nullptr;  // null for foreign memory
  std::function<void(void*)> deleter_;
};

// Autograd attaches its per-tensor state here (defined by src/autograd/).
struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<StorageImpl> storage;
  Shape sizes;
  Shape strides;  // in elements
  int64_t storage_offset = 0;
  DType dtype = kFloat32;
  Device device;  // its storage's
  // Shared by a base and all its views, as in PyTorch: an in-place write
  // through any of them bumps it.
  std::shared_ptr<std::atomic<uint64_t>> version = std::make_shared<std::atomic<uint64_t>>(0);
  // A tensor made from a C++ number: it takes part in type promotion with
  // the lowest priority (see result_type).
  bool wrapped_number = false;
  // Made by a view op: shares its storage with a base tensor.
  bool is_view = false;
  // A view's base: the tensor, not itself a view, that the chain of views
  // started from (autograd rebases its history when a view is written in
  // place, Note [Writing into views]). Weak: a view does not keep its base's
  // handle alive (kiln::compile counts a traced tensor's holders), and once
  // nothing holds the base no one can ask for its gradient.
  std::weak_ptr<TensorImpl> view_base;
  // Bit d set: kiln::compile treats dim d's size as dynamic (mark_dynamic).
  uint64_t dynamic_dims = 0;
  std::shared_ptr<AutogradMeta> autograd;

  int64_t numel() const;
  char* data() const {
    return static_cast<char*>(storage->data()) + storage_offset * static_cast<int64_t>(element_size(dtype));
  }
};

Shape contiguous_strides(const Shape& sizes);
// A TensorImpl seeing base's storage (and version counter) with another
// layout; a layout reaching past the storage is a kiln::Error naming `op`
// (Note [Checked sizes]). View bookkeeping (is_view, view_base) is the
// caller's.
std::shared_ptr<TensorImpl> restrided(const TensorImpl& base, Shape sizes, Shape strides, int64_t storage_offset,
                                      const char* op);
// "[2, 3]": shapes as error messages print them.
std::string shape_str(const Shape& sizes);
// The same text, formatted only when streamed: for check()'s message
// arguments, which every call evaluates but only a failure prints (a
// shape_str per argument was most of an in-place op's cost while tracing).
// Holds a reference: use it within the expression that made it.
struct ShapeText {
  const Shape& sizes;
};
inline ShapeText shape_text(const Shape& sizes) { return {sizes}; }
std::ostream& operator<<(std::ostream& os, ShapeText t);
// Note [Checked sizes]
// Every allocation, view and loader computes element counts and byte sizes
// through these, never by multiplying sizes itself: a negative size or a
// count or byte size that does not fit in int64 is a kiln::Error naming `op`
// and the shape, where an unchecked product would wrap to a small or negative
// number and a kernel would write past the buffer it sized from it. A shape
// has at most kMaxDims dims (as in PyTorch).
inline constexpr size_t kMaxDims = 64;
int64_t shape_numel(const Shape& sizes, const char* op = "numel");
// numel x element size, checked the same way.
size_t shape_nbytes(const Shape& sizes, DType dtype, const char* op);
// Bytes from the storage's start to one past the last element a layout
// (sizes, strides, offset in elements) can reach: 0 for no elements. Negative
// strides or offsets are refused.
size_t layout_extent_nbytes(const Shape& sizes, const Shape& strides, int64_t offset, DType dtype, const char* op);

}  // namespace kiln

KILN_API_END
