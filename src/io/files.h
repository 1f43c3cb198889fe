// File access shared by the readers and writers of src/io/: opening only
// regular files (a FIFO or a device would block or stream forever) and
// writing a file atomically through a safely created temporary.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "kiln/detail/tensor_impl.h"

namespace kiln::io::detail {

// An open read-only descriptor of a regular file, closed on destruction.
// Opened without blocking, so a FIFO is refused instead of waiting for a
// writer; a directory, FIFO, socket or device is a kiln::Error naming `op`.
class RegularFile {
 public:
  RegularFile(const std::string& path, const char* op);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  int fd() const { return fd_; }
  size_t size() const { return size_; }
  // Reads the whole file, size() bytes, into dst; a file that shrinks or is
  // modified meanwhile is a kiln::Error naming `path` (Note [Files that
  // change while read]).
  void read_all(void* dst, const std::string& path, const char* op) const;

 private:
  int fd_ = -1;
  size_t size_ = 0;
  int64_t mtime_ns_ = 0;
};

// Tests only: called by read_all between a file's opening and its reading
// (a test truncates the file there); empty by default.
void set_before_read_hook(std::function<void()> hook);

// Writes `path` atomically: `write(fd)` fills a new temporary file beside it
// (created with O_EXCL | O_NOFOLLOW under an unpredictable name, so nothing
// planted there is followed or reused), which is fsynced and renamed over
// `path`. Temporaries of the same path left by writers that died (their pid
// no longer runs) are removed first. See Note [Atomic saves] in files.cpp.
void write_atomically(const std::string& path, const char* op, const std::function<void(int fd)>& write);

// A shape read from a file, checked before a tensor is made of it: at most
// kMaxDims dims, its element count, byte size (the return) and strides
// within int64 (Note [Checked sizes]; a zero-size shape has no bytes to bound
// its strides), else a kiln::Error naming `op` and `what` (the file, the
// tensor), where the tensor's own checks would name only "empty".
size_t checked_shape_nbytes(const Shape& shape, DType dtype, const char* op, const std::string& what);

// write(2) until all n bytes are out; errors name `op` and `path`.
void write_all(int fd, const void* data, size_t n, const std::string& path, const char* op);

}  // namespace kiln::io::detail
