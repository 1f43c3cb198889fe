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

class TcpStore {
 public:
  // Connects as `rank` (retrying until timeout_ms, the server may start
  // later); rank 0 first starts the server on `port` (all interfaces).
  TcpStore(const std::string& host, int port, int rank, int64_t timeout_ms);
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

}  // namespace kiln::distributed::detail
