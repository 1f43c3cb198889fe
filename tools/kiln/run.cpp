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
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
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

pid_t start_rank(const JobLayout& job, int local_rank, const std::string& secret,
                 const std::vector<std::string>& command) {
  const int rank = job.global_rank(local_rank);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("[kiln run] fork failed: ") + std::strerror(errno));
  if (pid > 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a rank never outlives its launcher
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(local_rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(job.nnodes * job.nproc).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(job.nproc).c_str(), 1);
  ::setenv("GROUP_RANK", std::to_string(job.node_rank).c_str(), 1);
  ::setenv("MASTER_ADDR", job.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(job.master_port).c_str(), 1);
  ::setenv("KILN_JOB_SECRET", secret.c_str(), 1);
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
  job.master_port = port && *port ? std::atoi(port) : free_port();
  return job;
}

std::string launch_ranks(const JobLayout& job, double grace_s, const std::vector<std::string>& command) {
  const std::string secret = distributed::new_job_secret();
  const int nproc = job.nproc;
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) pids.push_back(start_rank(job, r, secret, command));
  int running = nproc;
  std::string failure;
  bool stopping = false;
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, stopping ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    if (pid == 0) {  // stopping, nobody exited yet
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids)
          if (p > 0) ::kill(p, SIGKILL);
        deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    int rank = -1;
    for (int r = 0; r < nproc; ++r)
      if (pids[r] == pid) rank = r;
    if (rank < 0) continue;
    const int global_rank = job.global_rank(rank);
    pids[rank] = -1;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && !stopping) {
      failure = "rank " + std::to_string(global_rank) + " " + describe(status);
      std::cerr << "kiln run: " << failure << "; stopping the other ranks\n";
      stopping = true;
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
      deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
    } else if (!ok) {
      std::cerr << "kiln run: rank " << global_rank << " " << describe(status) << "\n";
    }
  }
  remove_segments(secret);
  return failure;
}

void add_run(CLI::App& app, bool execute) {
  auto* cmd = app.add_subcommand("run", "start N ranks of a program on this machine, one node of a job (as torchrun)");
  auto nproc = std::make_shared<int>(1);
  auto nnodes = std::make_shared<int>(1);
  auto node_rank = std::make_shared<int>(0);
  auto master = std::make_shared<std::string>();
  auto grace = std::make_shared<double>(5.0);
  cmd->add_option("--nproc", *nproc, "number of ranks on this node")->check(CLI::Range(1, 1024));
  cmd->add_option("--nnodes", *nnodes, "number of nodes (machines) in the job, each started by its own kiln run")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--node-rank", *node_rank, "this node's place in the job, 0 to nnodes - 1")
      ->check(CLI::Range(0, 1023));
  cmd->add_option("--master", *master, "ADDR:PORT where rank 0 (on node 0) serves the job's store");
  cmd->add_option("--grace", *grace, "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(CLI::Range(0.0, 3600.0));
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
    JobLayout job{*nproc, *nnodes, *node_rank};
    if (!master->empty()) parse_master(*master, job);
    if (!execute) return;
    if (master->empty()) job = single_node_job(*nproc);
    std::cout.flush();
    const std::string failure = launch_ranks(job, *grace, command);
    if (!failure.empty()) throw Error("[kiln run] " + failure);
  });
}

}  // namespace kiln::cli
