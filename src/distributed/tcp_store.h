// The job's key-value store over TCP, as torch.distributed's TCPStore:
// rank 0 serves it at MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) is a
// client. The gloo backend meets through it (each rank publishes the
// addresses of its connections), and because every rank keeps its
// connection open for the whole job, the server knows which ranks have
// exited: after a failed collective that tells the survivors whom to name.
// Internal to src/distributed.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::distributed::detail {

class TcpStoreServer;

// Bounds of a request (Note [Store protocol]): a longer key or value, or
// anything before a connection has proven it knows the job's secret, closes
// the connection (Note [Store authentication]).
inline constexpr uint32_t kStoreMaxKeyBytes = 1 << 20;
inline constexpr uint32_t kStoreMaxValueBytes = 64 << 20;

// The secret the job's connections to its store prove they know:
// KILN_STORE_SECRET (`kiln run` sets it, the same on every node of a job);
// a world of one started by hand, which serves its own store, makes one.
std::string store_secret(int world_size);

class TcpStore {
 public:
  // Connects as `rank` (retrying until timeout_ms, the server may start
  // later) and proves it knows `secret`; rank 0 first starts the server on
  // `port` at `host`'s address (KILN_STORE_BIND names another: 0.0.0.0
  // for every interface).
  TcpStore(const std::string& host, int port, int rank, const std::string& secret, int64_t timeout_ms);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  // Waits until every key is set; a DistributedError after timeout_ms.
  void wait(const std::vector<std::string>& keys, int64_t timeout_ms);
  std::vector<char> get(const std::string& key, int64_t timeout_ms);
  // What the server knows of the ranks: those that connected, those whose
  // connection closed
  // (exited or killed), and those alive whose heartbeat has been silent
  // for over silent_ms (stopped or hung: a process that runs beats every
  // kBeatMs from a thread of its own), with how long, in rank order.
  struct Peers {
    std::vector<int> joined;  // connected at some point (and not exited since)
    std::vector<int> exited;
    std::vector<std::pair<int, int64_t>> silent;  // rank, ms since its last beat
  };
  Peers peers(int64_t silent_ms);
  static constexpr int64_t kBeatMs = 100;

 private:
  // One request and its reply (Note [Store protocol] in tcp_store.cpp).
  std::vector<char> call(char command, const std::string& key, const std::vector<char>& value, int64_t timeout_ms);

  void beat_loop(int fd, int rank);

  std::unique_ptr<TcpStoreServer> server_;
  int fd_ = -1;
  std::thread beat_;
  std::mutex beat_mu_;
  std::condition_variable beat_cv_;
  bool stopping_ = false;
  std::string where_;  // host:port, for errors
};

// Serves the requests read from `fd` until it closes or breaks the protocol,
// on a store of its own that knows `secret` and waits at most max_wait_ms:
// the server's request parser, under libFuzzer (tests/fuzz/store_fuzz.cpp).
void serve_store_connection(int fd, const std::string& secret, int64_t max_wait_ms);

}  // namespace kiln::distributed::detail
