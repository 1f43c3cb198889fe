// Note [Store protocol]
// A request is a command byte, a key (u32 length, bytes), a value (u32
// length, bytes) and a timeout (i64 ms); a reply is a status byte ('+'
// done, '-' refused or timed out) and a value. Commands: 'A' authenticate
// (key: the job's secret; first on every connection, Note [Store
// authentication]), 'H' hello (key: the client's rank), 'S' set, 'W' wait
// for the keys (value: the keys, '\0'-separated), 'G' get (waits like 'W'),
// 'B' a heartbeat (key: the rank; sent on a connection of its own by a
// thread of each client), 'X' the peers (value: the silence threshold in
// ms as text; reply: i32 pairs (rank, -2) for a rank that said hello,
// (rank, -1) for one that has exited since, (rank, ms) for one silent that
// long). The server keeps a thread per connection (a job has few ranks); a
// connection that closes after its hello marks that rank exited. A key over
// kStoreMaxKeyBytes, a value over kStoreMaxValueBytes, a rank or threshold
// that is not a whole number in range, or an unknown command closes the
// connection: its peer is broken or hostile, and the server allocates
// nothing it was not sent.
//
// Note [Store authentication]
// The store listens on a TCP port that anyone who reaches MASTER_ADDR can
// connect to. Every connection first sends 'A' with the job's secret
// (KILN_STORE_SECRET: 32 hex digits from /dev/urandom that `kiln run` makes,
// or takes from its environment for a job of several nodes, and gives its
// ranks through theirs, which other users cannot read). Until it has, the
// server reads nothing but that request (a key of at most kAuthMaxBytes, an
// empty value) within kAuthMs, keeps at most kMaxUnauthenticated such
// connections at a time (more are closed at once), and compares in constant
// time; a wrong secret gets '-' and the connection closes. The secret
// travels in clear: it keeps strangers out of the store, it does not hide
// the job's traffic from someone who can read the network (gloo's is not
// hidden either).
#include "distributed/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "kiln/distributed.h"
#include "kiln/error.h"

namespace kiln::distributed::detail {

using kiln::detail::concat;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kAuthMaxBytes = 256;
constexpr int64_t kAuthMs = 5000;
constexpr int kMaxUnauthenticated = 64;
constexpr int kMaxRank = 1 << 20;
constexpr auto kNoDeadline = Clock::time_point::max();

// Whole reads and writes; false when the peer closed or failed, or (reads)
// when the deadline passed first.
bool read_all(int fd, void* p, size_t n, Clock::time_point deadline = kNoDeadline) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    if (deadline != kNoDeadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd pfd{fd, POLLIN, 0};
      const int ready = left > 0 ? ::poll(&pfd, 1, static_cast<int>(left)) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return false;
    }
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

// A length-prefixed blob of at most `max` bytes (a longer one is not read).
bool read_blob(int fd, std::vector<char>& out, uint32_t max, Clock::time_point deadline = kNoDeadline) {
  uint32_t n = 0;
  if (!read_all(fd, &n, sizeof n, deadline) || n > max) return false;
  out.resize(n);
  return read_all(fd, out.data(), n, deadline);
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
  return read_all(fd, &status, 1) && read_blob(fd, reply, kStoreMaxValueBytes);
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

// A whole decimal number in [0, max] (a rank, a threshold), else -1.
int64_t whole_number(const char* begin, const char* end, int64_t max) {
  int64_t v = -1;
  const auto [stop, ec] = std::from_chars(begin, end, v);
  return ec == std::errc() && stop == end && v >= 0 && v <= max ? v : -1;
}

// Equal, in time that depends on the lengths alone.
bool same_secret(const std::vector<char>& given, const std::string& secret) {
  unsigned diff = given.size() != secret.size();
  for (size_t i = 0; i < secret.size(); ++i)
    diff |= static_cast<unsigned char>(i < given.size() ? given[i] : 0) ^ static_cast<unsigned char>(secret[i]);
  return diff == 0;
}

}  // namespace

class TcpStoreServer {
 public:
  TcpStoreServer(std::string secret, int64_t max_wait_ms) : secret_(std::move(secret)), max_wait_ms_(max_wait_ms) {}

  // Listens at `host`'s address (KILN_STORE_BIND's when set) and serves each
  // connection from a thread of its own.
  void listen(const std::string& host, int port) {
    const char* bind_env = std::getenv("KILN_STORE_BIND");
    const std::string bind_host = bind_env && *bind_env ? bind_env : host;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(bind_host.c_str(), std::to_string(port).c_str(), &hints, &found);
    std::string why = rc != 0 ? ::gai_strerror(rc) : "no address";
    for (addrinfo* a = rc == 0 ? found : nullptr; a && listen_fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int one = 1, zero = 0;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      // "::" serves IPv4 clients too, as 0.0.0.0 would.
      if (a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
        listen_fd_ = fd;
      } else {
        why = std::strerror(errno);
        ::close(fd);
      }
    }
    if (found) ::freeaddrinfo(found);
    if (listen_fd_ < 0)
      throw DistributedError(concat("[distributed.store] rank 0 cannot serve the store at ", bind_host, ":", port, ": ",
                                    why, " (MASTER_ADDR must be an address of rank 0's machine, or KILN_STORE_BIND ",
                                    "one to listen at; MASTER_PORT: another job may hold it)"));
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~TcpStoreServer() {
    if (listen_fd_ < 0) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (int fd : clients_) ::shutdown(fd, SHUT_RDWR);
    }
    cv_.notify_all();
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    for (Handler& h : handlers_) h.thread.join();
    ::close(listen_fd_);
  }

  // Reads the 'A' request (Note [Store authentication]) and answers it;
  // true when it named the secret.
  bool authenticate(int fd) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(kAuthMs);
    char command = 0;
    std::vector<char> given, value;
    int64_t timeout_ms = 0;
    if (!read_all(fd, &command, 1, deadline) || command != 'A' || !read_blob(fd, given, kAuthMaxBytes, deadline) ||
        !read_blob(fd, value, 0, deadline) || !read_all(fd, &timeout_ms, sizeof timeout_ms, deadline))
      return false;
    const bool ok = same_secret(given, secret_);
    const char status = ok ? '+' : '-';
    write_all(fd, &status, 1) && write_blob(fd, nullptr, 0);
    return ok;
  }

  // An authenticated connection's requests until it closes or breaks the
  // protocol; the rank its hello named (-1 if none).
  int serve_requests(int fd) {
    int rank = -1;
    for (;;) {
      char command = 0;
      std::vector<char> key_bytes, value;
      int64_t timeout_ms = 0;
      if (!read_all(fd, &command, 1) || !read_blob(fd, key_bytes, kStoreMaxKeyBytes) ||
          !read_blob(fd, value, kStoreMaxValueBytes) || !read_all(fd, &timeout_ms, sizeof timeout_ms))
        break;
      const std::string key(key_bytes.begin(), key_bytes.end());
      const char* key_end = key.data() + key.size();
      std::vector<char> reply;
      bool done = true, broken = false;
      std::unique_lock<std::mutex> lock(mu_);
      switch (command) {
        case 'H':
        case 'B': {
          const int64_t r = whole_number(key.data(), key_end, kMaxRank);
          if (r < 0) {
            broken = true;
          } else if (command == 'H') {
            rank = static_cast<int>(r);
            joined_.insert(rank);
          } else {
            last_beat_[static_cast<int>(r)] = Clock::now();
          }
          break;
        }
        case 'S':
          data_[key] = std::move(value);
          cv_.notify_all();
          break;
        case 'W':
        case 'G': {
          const std::vector<std::string> keys = command == 'G' ? std::vector<std::string>{key} : split_keys(value);
          const int64_t wait_ms = std::clamp<int64_t>(timeout_ms, 0, max_wait_ms_);
          done = cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] {
            return stopping_ || std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k); });
          });
          done = done && !stopping_;
          if (done && command == 'G') reply = data_[key];
          break;
        }
        case 'X': {
          const int64_t silent_ms = whole_number(value.data(), value.data() + value.size(), int64_t{1} << 40);
          if (silent_ms < 0) {
            broken = true;
            break;
          }
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
          broken = true;
      }
      lock.unlock();
      if (broken) break;
      const char status = done ? '+' : '-';
      if (!write_all(fd, &status, 1) || !write_blob(fd, reply.data(), reply.size())) break;
    }
    return rank;
  }

 private:
  struct Handler {
    std::thread thread;
    bool done = false;  // under mu_: the thread has nothing left to do but return
  };

  void accept_loop() {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) {
        if (fd >= 0) ::close(fd);
        return;
      }
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // Out of descriptors or memory (a flood of connections): the ranks'
        // connections must still get in once it passes.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          lock.unlock();
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        return;
      }
      reap_finished();
      if (unauthenticated_ >= kMaxUnauthenticated) {
        ::close(fd);
        continue;
      }
      auto handler = handlers_.emplace(handlers_.end());
      try {
        handler->thread = std::thread([this, fd, handler] { serve(fd, handler); });
      } catch (const std::system_error&) {  // no thread to serve it: as if over the limit
        handlers_.erase(handler);
        ::close(fd);
        continue;
      }
      ++unauthenticated_;
      clients_.insert(fd);
    }
  }

  void serve(int fd, std::list<Handler>::iterator handler) {
    const bool ok = authenticate(fd);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --unauthenticated_;
    }
    const int rank = ok ? serve_requests(fd) : -1;
    std::lock_guard<std::mutex> lock(mu_);
    if (rank >= 0 && !stopping_) exited_.insert(rank);
    clients_.erase(fd);
    ::close(fd);
    handler->done = true;
  }

  // Joins the threads of connections that ended (under mu_): a long job,
  // or a flood of connections, does not pile them up.
  void reap_finished() {
    for (auto it = handlers_.begin(); it != handlers_.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      it->thread.join();
      it = handlers_.erase(it);
    }
  }

  const std::string secret_;
  const int64_t max_wait_ms_;
  int listen_fd_ = -1;
  std::thread acceptor_;
  std::list<Handler> handlers_;
  int unauthenticated_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::set<int> clients_;
  std::map<std::string, std::vector<char>> data_;
  std::set<int> joined_, exited_;
  std::map<int, Clock::time_point> last_beat_;
};

void serve_store_connection(int fd, const std::string& secret, int64_t max_wait_ms) {
  TcpStoreServer server(secret, max_wait_ms);
  if (server.authenticate(fd)) server.serve_requests(fd);
}

std::string store_secret(int world_size) {
  if (const char* s = std::getenv("KILN_STORE_SECRET"); s && *s) {
    const std::string secret = s;
    const bool letters_and_digits = std::all_of(
        secret.begin(), secret.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
    if (secret.size() < 16 || secret.size() > kAuthMaxBytes || !letters_and_digits)
      throw DistributedError(concat("[distributed] KILN_STORE_SECRET must be 16 to ", kAuthMaxBytes,
                                    " letters and digits (got ", secret.size(), " characters)"));
    return secret;
  }
  if (world_size > 1)
    throw DistributedError(concat("[distributed] WORLD_SIZE is ", world_size,
                                  " but KILN_STORE_SECRET is unset: start the ranks with `kiln run`, which sets it"));
  static const std::string own = new_job_secret();
  return own;
}

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

namespace {

// The client's 'A' request (Note [Store authentication]).
void prove_secret(int fd, const std::string& secret, const std::string& where) {
  char status = 0;
  std::vector<char> reply;
  if (!send_request(fd, 'A', secret, {}, 0) || !read_reply(fd, status, reply))
    throw DistributedError(concat("[distributed.store] the store at ", where,
                                  " closed the connection before this rank could authenticate"));
  if (status != '+')
    throw DistributedError(concat("[distributed.store] the store at ", where, " refused this rank: its ",
                                  "KILN_STORE_SECRET differs from rank 0's (every node of a job needs the same)"));
}

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, int rank, const std::string& secret, int64_t timeout_ms)
    : where_(concat(host, ":", port)) {
  if (rank == 0) {
    // Waits end with the client's timeout (the server answers '-' at
    // timeout_ms); a day bounds what a request can ask for.
    server_ = std::make_unique<TcpStoreServer>(secret, int64_t{86400} * 1000);
    server_->listen(host, port);
  }
  fd_ = connect_to(host, port, Clock::now() + std::chrono::milliseconds(timeout_ms), where_);
  prove_secret(fd_, secret, where_);
  call('H', std::to_string(rank), {}, timeout_ms);
  const int beat_fd = connect_to(host, port, Clock::now() + std::chrono::milliseconds(timeout_ms), where_);
  try {
    prove_secret(beat_fd, secret, where_);
  } catch (...) {
    ::close(beat_fd);
    throw;
  }
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
