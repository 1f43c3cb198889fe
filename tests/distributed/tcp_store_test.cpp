// The job's TCP store against peers that do not know the job's secret or
// break the protocol (Note [Store authentication], Note [Store protocol]):
// their connection is closed, the server's memory stays flat, and the
// store goes on serving the job.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distributed/tcp_store.h"
#include "kiln/distributed.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using distributed::detail::TcpStore;

const std::string kSecret = "0123456789abcdef0123456789abcdef";

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

int connect_local(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

void send_bytes(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }

// A whole request as Note [Store protocol] lays it out.
std::string request(char command, const std::string& key, const std::string& value) {
  return std::string(1, command) + u32(static_cast<uint32_t>(key.size())) + key +
         u32(static_cast<uint32_t>(value.size())) + value + std::string(8, '\0');
}

// Reads until the server closes the connection (true) or `ms` pass; the
// bytes it sent before closing in `got`.
bool closed_within(int fd, int ms, std::string* got = nullptr) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  char buf[256];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    const ssize_t k = ::recv(fd, buf, sizeof buf, 0);
    if (k <= 0) return true;
    if (got) got->append(buf, static_cast<size_t>(k));
  }
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

TEST(TcpStore, StrangersAndOversizedRequestsAreCutOffAndTheJobGoesOn) {
  const int port = free_port();
  TcpStore store("127.0.0.1", port, 0, kSecret, 5000);
  store.set("before", {'1'});
  const int64_t rss_before = resident_bytes();
  // The attack: set with a 4 GiB value length, unauthenticated.
  for (int i = 0; i < 3; ++i) {
    const int fd = connect_local(port);
    send_bytes(fd, "S" + u32(0xFFFFFFF0u));
    EXPECT_TRUE(closed_within(fd, 2000)) << "an unauthenticated set was not cut off";
    ::close(fd);
  }
  // A wrong secret: refused ('-'), then closed.
  {
    const int fd = connect_local(port);
    send_bytes(fd, request('A', "0123456789abcdef0123456789abcdeX", ""));
    std::string got;
    EXPECT_TRUE(closed_within(fd, 2000, &got));
    EXPECT_EQ(got.substr(0, 1), "-");
    ::close(fd);
  }
  // A secret longer than any the store takes, a value on the 'A' request.
  for (const std::string& bad : {std::string("A") + u32(0xFFFFFFF0u), request('A', kSecret, "x")}) {
    const int fd = connect_local(port);
    send_bytes(fd, bad);
    EXPECT_TRUE(closed_within(fd, 2000));
    ::close(fd);
  }
  // Authenticated, but a value over the bound, a key over it, a rank that
  // is no number, an unknown command: each closes the connection.
  const std::vector<std::string> broken = {
      "S" + u32(3) + "key" + u32(0xFFFFFFF0u),
      "S" + u32(0xFFFFFFF0u),
      request('H', "abc", ""),
      request('B', "-1", ""),
      request('X', "", "soon"),
      request('Z', "k", "v"),
  };
  for (const std::string& bad : broken) {
    const int fd = connect_local(port);
    send_bytes(fd, request('A', kSecret, ""));
    send_bytes(fd, bad);
    std::string got;
    EXPECT_TRUE(closed_within(fd, 2000, &got)) << "request " << bad.substr(0, 1) << " was not cut off";
    EXPECT_EQ(got.substr(0, 1), "+") << "the authentication was refused";
    ::close(fd);
  }
  EXPECT_LT(resident_bytes() - rss_before, int64_t{64} << 20) << "the server allocated what it was told";
  // The job goes on.
  store.set("after", {'2'});
  EXPECT_EQ(store.get("before", 1000), std::vector<char>{'1'});
  EXPECT_EQ(store.get("after", 1000), std::vector<char>{'2'});
}

TEST(TcpStore, AFloodOfSilentConnectionsIsBoundedAndPasses) {
  const int port = free_port();
  TcpStore store("127.0.0.1", port, 0, kSecret, 5000);
  std::vector<int> silent;
  for (int i = 0; i < 64; ++i) silent.push_back(connect_local(port));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all accepted, waiting for their secret
  const int over = connect_local(port);
  EXPECT_TRUE(closed_within(over, 2000)) << "a 65th unauthenticated connection was kept";
  ::close(over);
  for (int fd : silent) ::close(fd);
  // Once they are gone, a rank gets in again.
  bool served = false;
  for (int attempt = 0; attempt < 50 && !served; ++attempt) {
    const int fd = connect_local(port);
    send_bytes(fd, request('A', kSecret, ""));
    std::string got;
    closed_within(fd, 100, &got);
    served = got.substr(0, 1) == "+";
    ::close(fd);
  }
  EXPECT_TRUE(served);
}

TEST(TcpStore, ARankWithAnotherSecretIsRefusedNamingIt) {
  const int port = free_port();
  TcpStore store("127.0.0.1", port, 0, kSecret, 5000);
  expect_error([&] { TcpStore other("127.0.0.1", port, 1, "fedcba9876543210fedcba9876543210", 1000); },
               {"refused this rank", "KILN_STORE_SECRET differs from rank 0's"});
}

// The listening socket's local address in /proc/net/tcp (hex, as the
// kernel writes it), "" if nothing listens on the port.
std::string listening_address(int port) {
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  char want[8];
  std::snprintf(want, sizeof want, ":%04X", port);
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (state == "0A" && local.size() > 5 && local.substr(local.size() - 5) == want) return local.substr(0, 8);
  }
  return "";
}

TEST(TcpStore, ListensAtMasterAddrOnly) {
  const int port = free_port();
  TcpStore store("127.0.0.1", port, 0, kSecret, 5000);
  EXPECT_EQ(listening_address(port), "0100007F");  // 127.0.0.1, not 0.0.0.0
}

TEST(TcpStore, TheSecretComesFromTheEnvironment) {
  {
    ScopedEnv unset("KILN_STORE_SECRET", "");
    expect_error([] { distributed::detail::store_secret(2); },
                 {"WORLD_SIZE is 2", "KILN_STORE_SECRET is unset", "kiln run"});
    EXPECT_EQ(distributed::detail::store_secret(1).size(), 32u);  // a world of one makes its own
  }
  {
    ScopedEnv bad("KILN_STORE_SECRET", "short");
    expect_error([] { distributed::detail::store_secret(2); }, {"KILN_STORE_SECRET must be 16 to 256"});
  }
  {
    ScopedEnv bad("KILN_STORE_SECRET", "0123456789abcdef;rm");
    expect_error([] { distributed::detail::store_secret(2); }, {"letters and digits"});
  }
  ScopedEnv good("KILN_STORE_SECRET", kSecret);
  EXPECT_EQ(distributed::detail::store_secret(4), kSecret);
}

}  // namespace
}  // namespace kiln::test
