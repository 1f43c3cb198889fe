// libFuzzer target: the job store's request parser (Note [Store protocol],
// Note [Store authentication]), as the server runs it on a connection: the
// input is what a peer sends, the replies are drained. It must never crash,
// leak, or allocate past the protocol's bounds (-rss_limit_mb).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <thread>

#include "distributed/tcp_store.h"

namespace {
// The secret the seed corpus authenticates with (corpus/store).
const std::string kSecret = "fuzzsecret0123456789";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  std::thread peer([&] {
    for (size_t sent = 0; sent < size;) {
      const ssize_t k = ::send(fds[0], data + sent, size - sent, MSG_NOSIGNAL);
      if (k <= 0) break;
      sent += static_cast<size_t>(k);
    }
    ::shutdown(fds[0], SHUT_WR);
    char sink[4096];
    while (::recv(fds[0], sink, sizeof sink, 0) > 0) {
    }
  });
  // Waits for keys nobody sets end after 5 ms.
  kiln::distributed::detail::serve_store_connection(fds[1], kSecret, 5);
  ::close(fds[1]);
  peer.join();
  ::close(fds[0]);
  return 0;
}
