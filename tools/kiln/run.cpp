// `kiln run --nproc N PROGRAM ARGS...`: torchrun's job on one machine.
// Starts N ranks of PROGRAM with RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and the job's secret
// (KILN_JOB_SECRET, which names its shared-memory segments) in their
// environment. A rank that fails makes the launcher stop the others
// (SIGTERM, then SIGKILL after --grace seconds) and exit 1, naming the rank
// and its exit status or signal. When the job ends, whatever segments
// of it are left in /dev/shm (ranks killed before they met) are removed.
#include <signal.h>
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

pid_t start_rank(int rank, int nproc, const std::string& secret, const std::vector<std::string>& command) {
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("[kiln run] fork failed: ") + std::strerror(errno));
  if (pid > 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a rank never outlives its launcher
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 0);
  ::setenv("MASTER_PORT", "29500", 0);
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

}  // namespace

std::string launch_ranks(int nproc, double grace_s, const std::vector<std::string>& command) {
  const std::string secret = distributed::new_job_secret();
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) pids.push_back(start_rank(r, nproc, secret, command));
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
    pids[rank] = -1;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && !stopping) {
      failure = "rank " + std::to_string(rank) + " " + describe(status);
      std::cerr << "kiln run: " << failure << "; stopping the other ranks\n";
      stopping = true;
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
      deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
    } else if (!ok) {
      std::cerr << "kiln run: rank " << rank << " " << describe(status) << "\n";
    }
  }
  remove_segments(secret);
  return failure;
}

void add_run(CLI::App& app, bool execute) {
  auto* cmd = app.add_subcommand("run", "start N ranks of a program on this machine (as torchrun)");
  auto nproc = std::make_shared<int>(1);
  auto grace = std::make_shared<double>(5.0);
  cmd->add_option("--nproc", *nproc, "number of ranks")->check(CLI::Range(1, 1024));
  cmd->add_option("--grace", *grace, "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->prefix_command();  // PROGRAM and its arguments are left as they are
  cmd->callback([cmd, nproc, grace, execute] {
    const std::vector<std::string> command = cmd->remaining();
    if (command.empty()) throw Error("[kiln run] missing PROGRAM: kiln run --nproc N PROGRAM [ARGS...]");
    if (!execute) return;
    std::cout.flush();
    const std::string failure = launch_ranks(*nproc, *grace, command);
    if (!failure.empty()) throw Error("[kiln run] " + failure);
  });
}

}  // namespace kiln::cli
