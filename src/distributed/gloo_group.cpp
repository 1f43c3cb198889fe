// The "gloo" process group: torch.distributed's collectives across
// machines over TCP with Debian's libgloo. The ranks meet through the job's
// TCP store (rank 0 serves it at MASTER_ADDR:MASTER_PORT): each publishes
// the addresses of its connections to every peer and connects a full mesh.
// A failed collective names whom the store saw exit (every rank keeps its
// store connection open until it ends), else says no peer answered in time.
#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "distributed/group_util.h"
#include "distributed/symmetric_memory.h"
#include "distributed/tcp_store.h"

namespace kiln::distributed::detail {

namespace {

using std::chrono::milliseconds;

// gloo's view of the job's store: its keys under this group's prefix.
class StoreView final : public gloo::rendezvous::Store {
 public:
  StoreView(TcpStore& store, std::string prefix, int64_t timeout_ms)
      : store_(store), prefix_(std::move(prefix)), timeout_ms_(timeout_ms) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_.set(prefix_ + key, data); }
  std::vector<char> get(const std::string& key) override { return store_.get(prefix_ + key, timeout_ms_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, milliseconds(timeout_ms_)); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    store_.wait(full, timeout.count() > 0 ? timeout.count() : timeout_ms_);
  }

 private:
  TcpStore& store_;
  std::string prefix_;
  int64_t timeout_ms_;
};

// The address of this machine that faces `host` (the route the kernel would
// take to reach it): where peers can reach this rank's connections.
std::string address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    throw DistributedError(concat("[distributed.init_process_group] cannot resolve MASTER_ADDR '", host, "'"));
  std::string address;
  const int fd = ::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* a = local.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                                                : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (::inet_ntop(local.ss_family, a, text, sizeof text)) address = text;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  if (address.empty())
    throw DistributedError(concat("[distributed.init_process_group] no route from this machine to MASTER_ADDR '",
                                  host, "'"));
  return address;
}

// Distinct store keys for each group this process creates (every rank
// creates its groups in the same order).
std::atomic<int> g_generation{0};

// The job's store, shared by the groups alive in this process (rank 0's
// serves it while any of its groups lives).
std::shared_ptr<TcpStore> job_store(const JobEnv& env) {
  static std::mutex mu;
  static std::weak_ptr<TcpStore> current;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<TcpStore> store = current.lock();
  if (!store) {
    store = std::make_shared<TcpStore>(env.master_addr, env.master_port, env.rank, store_secret(env.world_size),
                                       default_timeout_ms());
    current = store;
  }
  return store;
}

// Where gloo's point-to-point messages go: above the slots its collectives
// build from their tags.
constexpr uint64_t kPointToPointSlot = 0x4b494c4e;  // "KILN"

class GlooGroup final : public ProcessGroup {
 public:
  // The group of the job's ranks `members` (global ranks, in group-rank
  // order; this rank among them): every member creates it, in the same
  // order as its other groups.
  GlooGroup(const JobEnv& env, std::vector<int> members) : members_(std::move(members)) {
    const char* name = "distributed.init_process_group";
    size_ = static_cast<int>(members_.size());
    rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), env.rank) - members_.begin());
    check(rank_ < size_, name, "rank ", env.rank, " is not among the group's ranks");
    // gloo writes to sockets without MSG_NOSIGNAL: a write to a dead peer
    // would kill this process by SIGPIPE instead of failing the collective.
    // Ignore it, as every Python process (so every PyTorch one) does,
    // unless the program installed a handler of its own.
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
    const int64_t timeout = default_timeout_ms();
    store_ = job_store(env);
    const std::string prefix = concat("gloo/", g_generation.fetch_add(1), "/", members_.front(), "/");
    gloo::transport::tcp::attr attr;
    // GLOO_SOCKET_IFNAME picks the interface, as in PyTorch.
    if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface)
      attr.iface = iface;
    else
      attr.hostname = address_towards(env.master_addr, env.master_port);
    guarded(name, timeout, [&] {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
      context->setTimeout(milliseconds(timeout));
      StoreView view(*store_, prefix, timeout);
      context->connectFullMesh(view, device_);
      context_ = context;
    });
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }
  size_t one_shot_max_bytes() const override { return 0; }
  void set_one_shot_max_bytes(size_t) override {
    fail("distributed.set_one_shot_max_bytes", "the one-shot threshold belongs to the symm backend; gloo reduces in a ring");
  }

  void all_reduce_impl(Tensor& t, ReduceOp op, int64_t timeout_ms) override {
    all_reduce_as("distributed.all_reduce", t, op, timeout_ms);
  }

  // all_reduce, named `name` in errors.
  void all_reduce_as(const char* name, Tensor& t, ReduceOp op, int64_t timeout_ms) {
    if (t.numel() == 0) return;
    Contiguous c(t);
    // 16-bit floats travel and accumulate as float32.
    const bool widen = t.dtype() == kFloat16 || t.dtype() == kBFloat16;
    Tensor work = widen ? c.work.to(kFloat32) : c.work;
    const DType dtype = work.dtype();
    const ReduceOp pairwise = op == ReduceOp::Avg ? ReduceOp::Sum : op;
    guarded(name, timeout_ms, [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setTimeout(milliseconds(resolve_timeout(timeout_ms)));
      if (dtype == kInt64)
        opts.setOutput(work.data_ptr<int64_t>(), static_cast<size_t>(work.numel()));
      else
        opts.setOutput(work.data_ptr<float>(), static_cast<size_t>(work.numel()));
      opts.setReduceFunction([dtype, pairwise](void* out, const void* a, const void* b, size_t n) {
        reduce(dtype, pairwise, {static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b)}, out, 0,
               static_cast<int64_t>(n));
      });
      gloo::allreduce(opts);
    });
    if (op == ReduceOp::Avg) {
      float* p = work.data_ptr<float>();
      for (int64_t i = 0; i < work.numel(); ++i) p[i] /= static_cast<float>(size_);
    }
    if (widen) c.work.copy_(work);
    c.finish();
  }

  void broadcast_impl(Tensor& t, int src, int64_t timeout_ms) override {
    const char* name = "distributed.broadcast";
    if (t.numel() == 0) return;
    Contiguous c(t);
    guarded(name, timeout_ms, [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setTimeout(milliseconds(resolve_timeout(timeout_ms)));
      opts.setRoot(src);
      opts.setOutput(c.bytes(), byte_size(t));
      gloo::broadcast(opts);
    });
    c.finish();
  }

  void all_gather_impl(Tensor& out, const Tensor& input, int64_t timeout_ms) override {
    const char* name = "distributed.all_gather";
    if (out.numel() == 0) return;
    Tensor in = input.contiguous();
    Contiguous c(out);
    guarded(name, timeout_ms, [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setTimeout(milliseconds(resolve_timeout(timeout_ms)));
      opts.setInput(static_cast<uint8_t*>(in.raw_data()), byte_size(in));
      opts.setOutput(c.bytes(), byte_size(out));
      gloo::allgather(opts);
    });
    c.finish();
  }

  // Each rank sends slice r of its input to rank r (one all-to-all) and
  // reduces the W slices it receives, in rank order.
  void reduce_scatter_impl(Tensor& out, const Tensor& input, ReduceOp op, int64_t timeout_ms) override {
    const char* name = "distributed.reduce_scatter";
    if (out.numel() == 0) return;
    Tensor in = input.contiguous();
    Tensor slices = kiln::empty(in.sizes(), in.dtype());
    const size_t slice_bytes = byte_size(out);
    guarded(name, timeout_ms, [&] {
      gloo::AlltoallOptions opts(context_);
      opts.setTimeout(milliseconds(resolve_timeout(timeout_ms)));
      opts.setInput(static_cast<uint8_t*>(in.raw_data()), byte_size(in));
      opts.setOutput(static_cast<uint8_t*>(slices.raw_data()), byte_size(in));
      gloo::alltoall(opts);
    });
    std::vector<const uint8_t*> bases;
    for (int r = 0; r < size_; ++r) bases.push_back(static_cast<const uint8_t*>(slices.raw_data()) + r * slice_bytes);
    Contiguous c(out);
    reduce(out.dtype(), op, bases, c.bytes(), 0, out.numel());
    c.finish();
  }

  void all_to_all_v_impl(Tensor& out, const Tensor& input, const std::vector<int64_t>& output_splits,
                         const std::vector<int64_t>& input_splits, int64_t timeout_ms) override {
    const char* name = "distributed.all_to_all_v";
    const int W = size_, me = rank_;
    // The splits first, so a disagreement is an error on every rank, not a
    // transfer of the wrong sizes.
    std::vector<int64_t> sent = input_splits, received(W);
    guarded(name, timeout_ms, [&] {
      gloo::AlltoallOptions opts(context_);
      opts.setTimeout(milliseconds(resolve_timeout(timeout_ms)));
      opts.setInput(sent.data(), sent.size());
      opts.setOutput(received.data(), received.size());
      gloo::alltoall(opts);
    });
    std::string mismatch;
    for (int p = 0; p < W && mismatch.empty(); ++p)
      if (received[p] != output_splits[p]) mismatch = splits_mismatch(p, me, received[p], output_splits[p]);
    Tensor flag = kiln::full({1}, mismatch.empty() ? int64_t{0} : int64_t{me + 1}, kInt64);
    all_reduce_as(name, flag, ReduceOp::Max, timeout_ms);
    if (!mismatch.empty()) fail(name, mismatch);
    const int64_t bad = flag.item<int64_t>();
    check(bad == 0, name, "rank ", bad - 1, " received splits that disagree with what its peers send");

    Tensor in = input.contiguous();
    Contiguous c(out);
    const int64_t row_bytes = shape_numel(row_shape(in)) * static_cast<int64_t>(element_size(in.dtype()));
    std::vector<int64_t> send_bytes, recv_bytes;
    for (int p = 0; p < W; ++p) {
      send_bytes.push_back(input_splits[p] * row_bytes);
      recv_bytes.push_back(output_splits[p] * row_bytes);
    }
    uint8_t dummy = 0;  // gloo wants a buffer even when nothing moves
    auto* send_ptr = in.numel() ? static_cast<uint8_t*>(in.raw_data()) : &dummy;
    auto* recv_ptr = out.numel() ? c.bytes() : &dummy;
    guarded(name, timeout_ms, [&] {
      gloo::AlltoallvOptions opts(context_);
      opts.setTimeout(milliseconds(resolve_timeout(timeout_ms)));
      opts.setInput(send_ptr, send_bytes);
      opts.setOutput(recv_ptr, recv_bytes);
      gloo::alltoallv(opts);
    });
    c.finish();
  }

  void send_impl(const Tensor& t, int dst, int64_t timeout_ms) override {
    Tensor in = t.contiguous();
    message("distributed.send", in, dst, /*sending=*/true, timeout_ms);
  }

  void recv_impl(Tensor& t, int src, int64_t timeout_ms) override {
    Contiguous c(t);
    message("distributed.recv", c.work, src, /*sending=*/false, timeout_ms);
    c.finish();
  }

  void barrier_impl(int64_t timeout_ms) override {
    guarded("distributed.barrier", timeout_ms, [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(milliseconds(resolve_timeout(timeout_ms)));
      gloo::barrier(opts);
    });
  }

 private:
  // One point-to-point message of t's bytes (t contiguous) to or from
  // `peer`; an empty tensor still makes one (a byte), so the receiver returns.
  void message(const char* name, const Tensor& t, int peer, bool sending, int64_t timeout_ms) {
    uint8_t token = 0;
    void* data = t.numel() ? t.raw_data() : &token;
    const size_t bytes = t.numel() ? byte_size(t) : 1;
    guarded(name, timeout_ms, [&] {
      auto buffer = context_->createUnboundBuffer(data, bytes);
      const milliseconds timeout(resolve_timeout(timeout_ms));
      if (sending) buffer->send(peer, kPointToPointSlot);
      else buffer->recv(peer, kPointToPointSlot);
      if (!(sending ? buffer->waitSend(timeout) : buffer->waitRecv(timeout)))
        throw std::runtime_error(sending ? "send aborted" : "recv aborted");
    });
  }

  // Runs a gloo call; its failure becomes a DistributedError naming the
  // operation and whom the store saw exit.
  template <class F>
  void guarded(const char* name, int64_t timeout_ms, F&& f) {
    try {
      f();
    } catch (const DistributedError& e) {  // from the store, under gloo's rendezvous
      throw DistributedError(concat("[", name, "] rank ", members_[rank_], " (gloo): ", who_failed(timeout_ms), "; ", e.what()));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw DistributedError(concat("[", name, "] rank ", members_[rank_], " (gloo): ", who_failed(timeout_ms), "; gloo says: ",
                                    e.what()));
    }
  }

  // Whom the store saw exit, else whose heartbeat stopped, else nobody.
  std::string who_failed(int64_t timeout_ms) {
    auto listed = [](const std::vector<int>& ranks, const char* one, const char* many) {
      std::string text;
      for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
      return concat(ranks.size() == 1 ? "rank " : "ranks ", text, ranks.size() == 1 ? one : many);
    };
    try {
      // The store may learn of a death a moment after gloo does.
      auto member = [&](int r) { return std::find(members_.begin(), members_.end(), r) != members_.end(); };
      auto of_this_group = [&](const std::vector<int>& ranks) {
        std::vector<int> mine;
        for (int r : ranks)
          if (member(r)) mine.push_back(r);
        return mine;
      };
      TcpStore::Peers peers;
      for (int i = 0; i < 25; ++i) {
        if (i) std::this_thread::sleep_for(milliseconds(20));
        peers = store_->peers(10 * TcpStore::kBeatMs);
        const std::vector<int> exited = of_this_group(peers.exited);
        if (!exited.empty()) return listed(exited, " has exited", " have exited");
      }
      std::vector<int> never;
      for (int r : members_)
        if (r != members_[rank_] && std::find(peers.joined.begin(), peers.joined.end(), r) == peers.joined.end())
          never.push_back(r);
      if (!never.empty())
        return listed(never, " never joined (not started, or died first)", " never joined (not started, or died first)");
      std::vector<int> silent;
      int64_t longest = 0;
      for (const auto& [r, ms] : peers.silent)
        if (member(r)) {
          silent.push_back(r);
          longest = std::max(longest, ms);
        }
      if (!silent.empty()) return concat(listed(silent, " has", " have"), " not answered for ", longest, " ms (hung?)");
      return concat("no rank has exited or hung: a peer did not answer within ", resolve_timeout(timeout_ms),
                    " ms (slow?)");
    } catch (const DistributedError&) {
      return "rank 0 has exited (the store it serves is gone)";
    }
  }

  std::vector<int> members_;  // global ranks, in group-rank order
  int rank_ = 0, size_ = 0;
  std::shared_ptr<TcpStore> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_gloo_group(const JobEnv& env, std::vector<int> members) {
  if (members.empty())
    for (int r = 0; r < env.world_size; ++r) members.push_back(r);
  return std::make_unique<GlooGroup>(env, std::move(members));
}

}  // namespace kiln::distributed::detail
