// Note [Atomic saves]
// A save writes `<path>.tmp.<pid>.<random>`, fsyncs it, renames it over
// `<path>` and fsyncs the directory, so a reader (or a crash at any point)
// sees the old file or the new one, never a torn one. The temporary is
// created with O_CREAT | O_EXCL | O_NOFOLLOW: a file or symlink already at
// that name is never opened, let alone truncated or followed, and the
// random part makes the name unguessable. A writer killed mid-save leaves
// its temporary behind; the next save of the same path removes every
// temporary whose pid no longer runs (a live pid may be another process
// saving right now, so its file is left alone), the unsuffixed names of
// earlier versions included. The new file has the permissions of the one it
// replaces (mode, and owner and group where this process may set them): a
// checkpoint made private stays private. A file that did not exist gets the
// usual 0666 less the umask.
#include "io/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "kiln/error.h"

namespace kiln::io::detail {
namespace {

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "a special file";
}

// "dir" and "base" of a path ("." for a bare name).
std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// Removes `<base>.tmp.<pid>.*` in dir for pids that no longer run (and
// `<base>.tmp.<pid>`, the name earlier versions used).
void remove_dead_temporaries(const std::string& dir, const std::string& base) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const std::string prefix = base + ".tmp.";
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || (*end != '.' && *end != '\0')) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) ::unlinkat(::dirfd(d), name.c_str(), 0);
  }
  ::closedir(d);
}

std::function<void()>& before_read_hook() {
  static std::function<void()> hook;
  return hook;
}

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

void set_before_read_hook(std::function<void()> hook) { before_read_hook() = std::move(hook); }

RegularFile::RegularFile(const std::string& path, const char* op) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  check(fd_ >= 0, op, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd_, &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(op, "'", path, "' is ", stat_ok ? file_kind(st.st_mode) : "unreadable", ", not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  mtime_ns_ = mtime_ns(st);
}

RegularFile::~RegularFile() { ::close(fd_); }

// Note [Files that change while read]
// Loaders read a file whole rather than map it: a mapped file that another
// process truncates (a save in place, `cp` over it) kills the reader with
// SIGBUS at its next access to the lost pages, even long after the load
// returned. A read sees the change instead: fewer bytes than the size at
// opening, or a size or modification time that moved, is an error telling
// to load again once the file is written (saves are atomic renames, Note
// [Atomic saves], so kiln's own never change a file in place).
void RegularFile::read_all(void* dst, const std::string& path, const char* op) const {
  if (const auto& hook = before_read_hook()) hook();
  char* out = static_cast<char*>(dst);
  size_t got = 0;
  while (got < size_) {
    const ssize_t r = ::pread(fd_, out + got, size_ - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    check(r >= 0, op, "reading '", path, "' failed: ", std::strerror(errno));
    check(r > 0, op, "'", path, "' shrank while it was read (", size_, " bytes when opened, only ", got,
          " there): it changed during the load; load it again once it is written");
    got += static_cast<size_t>(r);
  }
  struct stat st {};
  check(::fstat(fd_, &st) == 0, op, "cannot stat '", path, "': ", std::strerror(errno));
  check(static_cast<size_t>(st.st_size) == size_ && mtime_ns(st) == mtime_ns_, op, "'", path,
        "' changed while it was read (", size_, " bytes when opened, ", st.st_size,
        " now): load it again once it is written");
}

void write_all(int fd, const void* data, size_t n, const std::string& path, const char* op) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(op, "writing '", path, "' failed: ", std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void write_atomically(const std::string& path, const char* op, const std::function<void(int fd)>& write) {
  const auto [dir, base] = split_path(path);
  remove_dead_temporaries(dir, base);
  std::random_device entropy;
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 16; ++attempt) {
    tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(entropy());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  check(fd >= 0, op, "cannot create a temporary file beside '", path, "': ", std::strerror(errno));
  try {
    // The replaced file's permissions, set before a byte is written.
    struct stat old;
    if (::stat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode)) {
      check(::fchmod(fd, old.st_mode & 07777) == 0, op, "cannot give '", tmp, "' the mode of '", path,
            "': ", std::strerror(errno));
      // Another owner only as root (EPERM otherwise: the file is then ours).
      if (::fchown(fd, old.st_uid, old.st_gid) != 0) (void)::fchown(fd, static_cast<uid_t>(-1), old.st_gid);
    }
    write(fd);
    check(::fsync(fd) == 0, op, "fsync of '", tmp, "' failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(op, "cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
  // Make the rename itself durable.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

size_t checked_shape_nbytes(const Shape& shape, DType dtype, const char* op, const std::string& what) {
  std::string why;
  size_t nbytes = 0;
  try {
    nbytes = shape_nbytes(shape, dtype, op);
    (void)contiguous_strides(shape);
  } catch (const Error& e) {
    why = e.what();
    why.erase(0, why.find("] ") == std::string::npos ? 0 : why.find("] ") + 2);  // its "[op] "
  }
  check(why.empty(), op, what, ": ", why);
  return nbytes;
}

}  // namespace kiln::io::detail
