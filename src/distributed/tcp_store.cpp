// Note [Store protocol]
// A request is a command byte, a key (u32 length, bytes), a value (u32
// length, bytes) and a timeout (i64 ms); a reply is a status byte ('+'
// done, '-' timed out) and a value. Commands: 'H' hello (key: the client's
// rank), 'S' set, 'W' wait for the keys (value: the keys, '\0'-separated),
// 'G' get (waits like 'W'), 'B' a heartbeat (key: the rank; sent on a
// connection of its own by a thread of each client), 'X' the peers (value:
// the silence threshold in ms as text; reply: i32 pairs (rank, -2) for a
// rank that said hello, (rank, -1) for one that has exited since, (rank,
// ms) for one silent that long). The server keeps a
// thread per connection (a job has few ranks); a connection that closes
// after its hello marks that rank exited.
#include "distributed/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "kiln/distributed.h"
#include "kiln/error.h"

namespace kiln::distributed::detail {

using kiln::detail::concat;
using Clock = std::chrono::steady_clock;

namespace {

// Whole reads and writes; false when the peer closed or failed.
bool read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, b, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    b += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    b += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool read_blob(int fd, std::vector<char>& out) {
  uint32_t n = 0;
  if (!read_all(fd, &n, sizeof n)) return false;
  out.resize(n);
  return read_all(fd, out.data(), n);
}

bool write_blob(int fd, const char* data, size_t n) {
  const auto len = static_cast<uint32_t>(n);
  return write_all(fd, &len, sizeof len) && write_all(fd, data, n);
}

// The client's half of Note [Store protocol]; false when the connection
// is gone.
bool send_request(int fd, char command, const std::string& key, const std::vector<char>& value, int64_t timeout_ms) {
  return write_all(fd, &command, 1) && write_blob(fd, key.data(), key.size()) &&
         write_blob(fd, value.data(), value.size()) && write_all(fd, &timeout_ms, sizeof timeout_ms);
}

bool read_reply(int fd, char& status, std::vector<char>& reply) {
  return read_all(fd, &status, 1) && read_blob(fd, reply);
}

std::vector<std::string> split_keys(const std::vector<char>& joined) {
  std::vector<std::string> keys;
  std::string k;
  for (char c : joined) {
    if (c == '\0') {
      keys.push_back(k);
      k.clear();
    } else {
      k += c;
    }
  }
  return keys;
}

}  // namespace

class TcpStoreServer {
 public:
  explicit TcpStoreServer(int port) {
    listen_fd_ = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool v6 = listen_fd_ >= 0;
    if (!v6) listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw DistributedError(concat("[distributed.store] socket: ", std::strerror(errno)));
    const int one = 1, zero = 0;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {  // one socket for IPv4 and IPv6 clients
      ::setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0 || ::listen(listen_fd_, 1024) != 0) {
      const std::string why = std::strerror(errno);
      ::close(listen_fd_);
      throw DistributedError(concat("[distributed.store] rank 0 cannot serve the store on port ", port, ": ", why,
                                    " (MASTER_PORT: another job may hold it)"));
    }
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~TcpStoreServer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (int fd : clients_) ::shutdown(fd, SHUT_RDWR);
    }
    cv_.notify_all();
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    for (std::thread& t : handlers_) t.join();
    ::close(listen_fd_);
  }

 private:
  void accept_loop() {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        if (fd >= 0) ::close(fd);
        return;
      }
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      clients_.insert(fd);
      handlers_.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    int rank = -1;
    for (;;) {
      char command = 0;
      std::vector<char> key_bytes, value;
      int64_t timeout_ms = 0;
      if (!read_all(fd, &command, 1) || !read_blob(fd, key_bytes) || !read_blob(fd, value) ||
          !read_all(fd, &timeout_ms, sizeof timeout_ms))
        break;
      const std::string key(key_bytes.begin(), key_bytes.end());
      std::vector<char> reply;
      bool done = true;
      std::unique_lock<std::mutex> lock(mu_);
      switch (command) {
        case 'H':
          rank = std::atoi(key.c_str());
          joined_.insert(rank);
          break;
        case 'S':
          data_[key] = value;
          cv_.notify_all();
          break;
        case 'W':
        case 'G': {
          const std::vector<std::string> keys = command == 'G' ? std::vector<std::string>{key} : split_keys(value);
          done = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
            return stopping_ || std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k); });
          });
          done = done && !stopping_;
          if (done && command == 'G') reply = data_[key];
          break;
        }
        case 'B':
          last_beat_[std::atoi(key.c_str())] = Clock::now();
          break;
        case 'X': {
          const int64_t silent_ms = std::atoll(std::string(value.begin(), value.end()).c_str());
          auto put = [&](int32_t a, int32_t b) {
            const int32_t pair[2] = {a, b};
            const auto* p = reinterpret_cast<const char*>(pair);
            reply.insert(reply.end(), p, p + sizeof pair);
          };
          for (int r : joined_) put(r, exited_.count(r) ? -1 : -2);
          for (const auto& [r, t] : last_beat_) {
            const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
            if (!exited_.count(r) && ms > silent_ms) put(r, static_cast<int32_t>(std::min<int64_t>(ms, 1 << 30)));
          }
          break;
        }
        default:
          done = false;
      }
      lock.unlock();
      const char status = done ? '+' : '-';
      if (!write_all(fd, &status, 1) || !write_blob(fd, reply.data(), reply.size())) break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (rank >= 0 && !stopping_) exited_.insert(rank);
    clients_.erase(fd);
    ::close(fd);
  }

  int listen_fd_ = -1;
  std::thread acceptor_;
  std::vector<std::thread> handlers_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::set<int> clients_;
  std::map<std::string, std::vector<char>> data_;
  std::set<int> joined_, exited_;
  std::map<int, Clock::time_point> last_beat_;
};

namespace {

int connect_to(const std::string& host, int port, Clock::time_point deadline, const std::string& where) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  std::string last_error = "no address";
  for (;;) {
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc != 0) {
      last_error = ::gai_strerror(rc);
    } else {
      for (addrinfo* a = found; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(found);
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          return fd;
        }
        last_error = std::strerror(errno);
        ::close(fd);
      }
      ::freeaddrinfo(found);
    }
    if (Clock::now() > deadline)
      throw DistributedError(concat("[distributed.store] cannot reach the store at ", where, " (rank 0 serves it): ",
                                    last_error));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, int rank, int64_t timeout_ms)
    : where_(concat(host, ":", port)) {
  if (rank == 0) server_ = std::make_unique<TcpStoreServer>(port);
  fd_ = connect_to(host, port, Clock::now() + std::chrono::milliseconds(timeout_ms), where_);
  call('H', std::to_string(rank), {}, timeout_ms);
  const int beat_fd = connect_to(host, port, Clock::now() + std::chrono::milliseconds(timeout_ms), where_);
  beat_ = std::thread([this, beat_fd, rank] { beat_loop(beat_fd, rank); });
}

TcpStore::~TcpStore() {
  {
    std::lock_guard<std::mutex> lock(beat_mu_);
    stopping_ = true;
  }
  beat_cv_.notify_all();
  beat_.join();
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

// Beats until the store ends or the server goes (then the main connection
// reports it).
void TcpStore::beat_loop(int fd, int rank) {
  const std::string key = std::to_string(rank);
  std::unique_lock<std::mutex> lock(beat_mu_);
  while (!stopping_) {
    char status = 0;
    std::vector<char> reply;
    if (!send_request(fd, 'B', key, {}, 0) || !read_reply(fd, status, reply)) break;
    beat_cv_.wait_for(lock, std::chrono::milliseconds(kBeatMs), [&] { return stopping_; });
  }
  ::close(fd);
}

std::vector<char> TcpStore::call(char command, const std::string& key, const std::vector<char>& value,
                                 int64_t timeout_ms) {
  auto lost = [&] {
    return DistributedError(concat("[distributed.store] the store at ", where_,
                                   " closed the connection: rank 0, which serves it, has exited"));
  };
  if (!send_request(fd_, command, key, value, timeout_ms)) throw lost();
  // The server answers within timeout_ms; a hung server gets a second more.
  pollfd p{fd_, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(timeout_ms + 1000, 1 << 30)));
  if (ready == 0)
    throw DistributedError(concat("[distributed.store] the store at ", where_, " did not answer within ",
                                  timeout_ms + 1000, " ms: rank 0 is hung"));
  char status = 0;
  std::vector<char> reply;
  if (!read_reply(fd_, status, reply)) throw lost();
  if (status != '+')
    throw DistributedError(concat("[distributed.store] waited ", timeout_ms, " ms for '", key,
                                  "' in the store: a rank never published it (not started, or dead)"));
  return reply;
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) { call('S', key, value, 0); }

void TcpStore::wait(const std::vector<std::string>& keys, int64_t timeout_ms) {
  std::vector<char> joined;
  for (const std::string& k : keys) {
    joined.insert(joined.end(), k.begin(), k.end());
    joined.push_back('\0');
  }
  std::string shown;
  for (const std::string& k : keys) shown += (shown.empty() ? "" : ", ") + k;
  call('W', shown, joined, timeout_ms);
}

std::vector<char> TcpStore::get(const std::string& key, int64_t timeout_ms) { return call('G', key, {}, timeout_ms); }

TcpStore::Peers TcpStore::peers(int64_t silent_ms) {
  const std::string threshold = std::to_string(silent_ms);
  const std::vector<char> reply = call('X', "", std::vector<char>(threshold.begin(), threshold.end()), 1000);
  Peers p;
  for (size_t i = 0; i + 2 * sizeof(int32_t) <= reply.size(); i += 2 * sizeof(int32_t)) {
    int32_t pair[2];
    std::memcpy(pair, reply.data() + i, sizeof pair);
    if (pair[1] == -2)
      p.joined.push_back(pair[0]);
    else if (pair[1] == -1)
      p.exited.push_back(pair[0]);
    else
      p.silent.emplace_back(pair[0], pair[1]);
  }
  return p;
}

}  // namespace kiln::distributed::detail
