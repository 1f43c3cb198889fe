// One rank of a two-rank job in which rank 1 dies by SIGKILL: at set-up
// (MODE setup), or at a random moment while both ranks run the collective
// MODE names in a loop (one_shot, two_shot, barrier, signal, all_reduce:
// the process group's, after which rank 0 destroys the group), so in the
// middle of one. MODE hang: rank 1 stops (SIGSTOP) instead, and rank 0
// must time out naming it and exit 3. Rank 0 must get a DistributedError naming rank 1 and the
// operation within the timeout (KILN_DIST_TIMEOUT_MS), never hang. Rank 0
// ignores the launcher's SIGTERM so it can report; it exits 0 when the
// error was right.
#include <signal.h>

#include <chrono>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include "kiln/distributed.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::distributed;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const JobEnv env = job_env();
  if (env.rank == 0) ::signal(SIGTERM, SIG_IGN);
  if (env.rank == 1 && mode == "setup") ::raise(SIGKILL);
  auto start = std::chrono::steady_clock::now();
  try {
    Tensor x = symm_mem::empty({1 << 16});
    auto h = symm_mem::rendezvous(x);
    if (env.rank == 1) {
      std::thread([hang = mode == "hang"] {
        std::this_thread::sleep_for(std::chrono::microseconds(std::random_device()() % 50000));
        ::raise(hang ? SIGSTOP : SIGKILL);
      }).detach();
    }
    if (mode != "setup") start = std::chrono::steady_clock::now();
    for (int64_t i = 0;; ++i) {
      x.fill_(1.0);
      if (mode == "one_shot") symm_mem::one_shot_all_reduce(x);
      else if (mode == "two_shot") symm_mem::two_shot_all_reduce_(x);
      else if (mode == "barrier" || mode == "hang") h->barrier();
      else if (mode == "all_reduce") {
        if (!is_initialized()) init_process_group("auto");
        default_group().all_reduce(x);
      }
      else if (mode == "signal") {
        h->put_signal(1 - env.rank, 5);
        h->wait_signal(1 - env.rank, 5);
      } else {
        std::cerr << "unknown mode '" << mode << "'\n";
        return 2;
      }
    }
  } catch (const DistributedError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string m = e.what();
    const std::string op = mode == "setup" ? "distributed.init" : mode == "signal" ? "_signal" : mode;
    std::cout << "rank 0 after " << s << " s: " << m << "\n";
    if (mode == "all_reduce") destroy_process_group();  // a survivor ends its group and exits cleanly
    // A hung (stopped) peer: found by the timeout; exit non-zero so the
    // launcher stops it (SIGKILL ends a stopped process).
    if (mode == "hang") return m.find("rank 1 ") != std::string::npos && m.find("(hung?)") != std::string::npos ? 3 : 1;
    // all_reduce: rank 1 may die before the group's set-up ends
    const bool names_op = m.find(op) != std::string::npos ||
                          (mode == "all_reduce" && m.find("init_process_group") != std::string::npos);
    return m.find("rank 1") != std::string::npos && names_op ? 0 : 1;
  }
}
