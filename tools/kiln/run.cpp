// `kiln run --nproc N [--nnodes M --node-rank R --master ADDR:PORT]
// PROGRAM ARGS...`: torchrun's job. On each of M nodes (default 1) it starts
// N ranks of PROGRAM with RANK (R * N + local rank), LOCAL_RANK, WORLD_SIZE
// (M * N), LOCAL_WORLD_SIZE, GROUP_RANK (R), MASTER_ADDR, MASTER_PORT (where
// rank 0 serves the job's store: --master, else MASTER_ADDR/MASTER_PORT
// from the environment, else 127.0.0.1 and a free port) and the node's
// secret (KILN_JOB_SECRET, which names its shared-memory segments). A rank
// that fails makes the launcher stop its other ranks (SIGTERM, then SIGKILL
// after --grace seconds) and exit 1, naming the rank and its exit status or
// signal; ranks on other nodes see their peers go and fail in turn. When
// the job ends, whatever segments of it are left in /dev/shm (ranks killed
// before they met) are removed.
#include <netinet/in.h>
#include <signal.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "kiln/distributed.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "stopped with status " + std::to_string(status);
}

pid_t start_rank(const JobLayout& job, int local_rank, const std::string& secret, const std::string& store_secret,
                 const sigset_t& rank_mask, const std::vector<std::string>& command) {
  const int rank = job.global_rank(local_rank);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("[kiln run] fork failed: ") + std::strerror(errno));
  if (pid > 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a rank never outlives its launcher
  ::sigprocmask(SIG_SETMASK, &rank_mask, nullptr);  // the signals the launcher holds for itself
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(local_rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(job.nnodes * job.nproc).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(job.nproc).c_str(), 1);
  ::setenv("GROUP_RANK", std::to_string(job.node_rank).c_str(), 1);
  ::setenv("MASTER_ADDR", job.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(job.master_port).c_str(), 1);
  ::setenv("KILN_JOB_SECRET", secret.c_str(), 1);
  ::setenv("KILN_STORE_SECRET", store_secret.c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::cerr << "kiln run: rank " << rank << ": cannot run '" << command[0] << "': " << std::strerror(errno) << "\n";
  ::_exit(127);
}

void remove_segments(const std::string& secret) {
  std::error_code ec;
  const std::string prefix = "kiln-" + secret + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(entry.path(), ec);
}

// A TCP port nobody listens on now (the kernel's pick), for a job on one
// machine: two jobs at once do not collide on a fixed port.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw Error(std::string("[kiln run] cannot find a free TCP port: ") + std::strerror(errno));
  return ntohs(a.sin_port);
}

// "ADDR:PORT" (ADDR a name, an IPv4 address or [an IPv6 one]).
void parse_master(const std::string& text, JobLayout& job) {
  const size_t colon = text.rfind(':');
  std::string addr = colon == std::string::npos ? "" : text.substr(0, colon);
  if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']') addr = addr.substr(1, addr.size() - 2);
  int port = 0;
  if (!addr.empty()) {
    try {
      size_t used = 0;
      port = std::stoi(text.substr(colon + 1), &used);
      if (used != text.size() - colon - 1) port = 0;
    } catch (const std::exception&) {
    }
  }
  if (addr.empty() || port < 1 || port > 65535)
    throw Error("[kiln run] --master '" + text + "' is not ADDR:PORT (a host and a TCP port)");
  job.master_addr = addr;
  job.master_port = port;
}

}  // namespace

JobLayout single_node_job(int nproc) {
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  JobLayout job{nproc};
  job.master_addr = addr && *addr ? addr : "127.0.0.1";
  if (!port || !*port) {
    job.master_port = free_port();
  } else {
    const char* end = port + std::strlen(port);
    int p = 0;
    const auto [stop, ec] = std::from_chars(port, end, p);
    if (ec != std::errc() || stop != end || p < 1 || p > 65535)
      throw Error(std::string("[kiln run] MASTER_PORT '") + port + "' is not a TCP port (1 to 65535)");
    job.master_port = p;
  }
  return job;
}

// Note [The launcher's signals]
// SIGTERM, SIGINT and SIGHUP sent to `kiln run` (a scheduler ending the
// job, Ctrl-C, a closed terminal) are held from before the first rank
// starts (blocked, read from a signalfd, with SIGCHLD, so one poll waits for
// both): whatever stage the job is in, the launcher forwards the signal to
// its ranks, gives them --grace seconds, then SIGKILL, removes the job's
// segments from /dev/shm and dies by the same signal. Only SIGKILL of the
// launcher itself leaves segments behind: its ranks die with it (the
// parent-death signal), but nobody is left to clean up.
std::string launch_ranks(const JobLayout& job, double grace_s, const std::vector<std::string>& command) {
  const std::string secret = distributed::new_job_secret();
  // The store's secret is not the segments' (their names, in /dev/shm, are
  // listed to every user); a job of several nodes brings its own.
  const char* given = std::getenv("KILN_STORE_SECRET");
  const std::string store_secret = given && *given ? given : distributed::new_job_secret();
  sigset_t held, rank_mask;
  sigemptyset(&held);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&held, sig);
  ::signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would reap the ranks before waitpid sees them
  ::sigprocmask(SIG_BLOCK, &held, &rank_mask);
  const int signals = ::signalfd(-1, &held, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signals < 0) {
    ::sigprocmask(SIG_SETMASK, &rank_mask, nullptr);
    throw Error(std::string("[kiln run] signalfd failed: ") + std::strerror(errno));
  }
  const int nproc = job.nproc;
  std::vector<pid_t> pids;
  int running = 0;
  std::string failure;
  bool stopping = false;
  int stop_signal = 0;
  auto deadline = std::chrono::steady_clock::time_point::max();
  auto stop_ranks = [&](int sig) {
    for (pid_t p : pids)
      if (p > 0) ::kill(p, sig);
    stopping = true;
    deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  };
  try {
    for (int r = 0; r < nproc; ++r, ++running)
      pids.push_back(start_rank(job, r, secret, store_secret, rank_mask, command));
  } catch (const Error& e) {
    failure = e.what();
    stop_ranks(SIGKILL);
  }
  while (running > 0) {
    int status = 0;
    pid_t pid;
    while (running > 0 && (pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      int rank = -1;
      for (int r = 0; r < static_cast<int>(pids.size()); ++r)
        if (pids[r] == pid) rank = r;
      if (rank < 0) continue;
      const int global_rank = job.global_rank(rank);
      pids[rank] = -1;
      --running;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && !stopping) {
        failure = "rank " + std::to_string(global_rank) + " " + describe(status);
        std::cerr << "kiln run: " << failure << "; stopping the other ranks\n";
        stop_ranks(SIGTERM);
      } else if (!ok) {
        std::cerr << "kiln run: rank " << global_rank << " " << describe(status) << "\n";
      }
    }
    if (running == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      deadline = std::chrono::steady_clock::time_point::max();
    }
    // A signal (a rank's SIGCHLD included) or the end of the grace period.
    int wait_ms = -1;
    if (deadline != std::chrono::steady_clock::time_point::max()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      wait_ms = static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, int64_t{1} << 30));
    }
    pollfd ready{signals, POLLIN, 0};
    ::poll(&ready, 1, wait_ms);
    signalfd_siginfo info;
    while (::read(signals, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD || stop_signal != 0) continue;
      stop_signal = sig;
      const char* name = sigabbrev_np(sig);
      failure = std::string("got SIG") + (name ? name : "?") + ", stopped the ranks";
      std::cerr << "kiln run: got SIG" << (name ? name : "?") << "; stopping the ranks\n";
      stop_ranks(sig);
    }
  }
  ::close(signals);
  remove_segments(secret);
  ::sigprocmask(SIG_SETMASK, &rank_mask, nullptr);
  if (stop_signal != 0) {  // ends as the signal would have ended it
    std::cout.flush();
    std::cerr.flush();
    ::signal(stop_signal, SIG_DFL);
    ::raise(stop_signal);
  }
  return failure;
}

void add_run(CLI::App& app, bool execute) {
  auto* cmd = app.add_subcommand("run", "start N ranks of a program on this machine, one node of a job (as torchrun)");
  auto nproc = std::make_shared<int64_t>(1);
  auto nnodes = std::make_shared<int64_t>(1);
  auto node_rank = std::make_shared<int64_t>(0);
  auto master = std::make_shared<std::string>();
  auto grace = std::make_shared<double>(5.0);
  add_int_flag(*cmd, "--nproc", *nproc, 1, 1024, "number of ranks on this node");
  add_int_flag(*cmd, "--nnodes", *nnodes, 1, 1024,
               "number of nodes (machines) in the job, each started by its own kiln run");
  add_int_flag(*cmd, "--node-rank", *node_rank, 0, 1023, "this node's place in the job, 0 to nnodes - 1");
  cmd->add_option("--master", *master, "ADDR:PORT where rank 0 (on node 0) serves the job's store");
  add_real_flag(*cmd, "--grace", *grace, 0.0, 3600.0, "seconds between SIGTERM and SIGKILL when stopping ranks");
  cmd->prefix_command();  // PROGRAM and its arguments are left as they are
  cmd->callback([cmd, nproc, nnodes, node_rank, master, grace, execute] {
    const std::vector<std::string> command = cmd->remaining();
    if (command.empty()) throw Error("[kiln run] missing PROGRAM: kiln run --nproc N PROGRAM [ARGS...]");
    if (*node_rank >= *nnodes)
      throw Error("[kiln run] --node-rank " + std::to_string(*node_rank) + " is not below --nnodes " +
                  std::to_string(*nnodes));
    if (*nnodes > 1 && master->empty())
      throw Error("[kiln run] a job of " + std::to_string(*nnodes) +
                  " nodes needs --master ADDR:PORT (where node 0's rank 0 serves the store), the same on every node");
    JobLayout job{static_cast<int>(*nproc), static_cast<int>(*nnodes), static_cast<int>(*node_rank)};
    if (!master->empty()) parse_master(*master, job);
    const char* store_secret = std::getenv("KILN_STORE_SECRET");
    if (*nnodes > 1 && (!store_secret || !*store_secret))
      throw Error("[kiln run] a job of " + std::to_string(*nnodes) +
                  " nodes needs KILN_STORE_SECRET in the environment, the same on every node (its ranks prove with "
                  "it that they belong to the job; e.g. export KILN_STORE_SECRET=$(od -An -N16 -tx1 /dev/urandom | "
                  "tr -d ' \\n'))");
    if (!execute) return;
    if (master->empty()) job = single_node_job(static_cast<int>(*nproc));
    std::cout.flush();
    const std::string failure = launch_ranks(job, *grace, command);
    if (!failure.empty()) throw Error("[kiln run] " + failure);
  });
}

}  // namespace kiln::cli
