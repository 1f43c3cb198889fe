// One rank of a two-rank job in which rank 1 dies by SIGKILL: at set-up
// (MODE setup), or at a random moment while both ranks run the collective
// MODE names in a loop (one_shot, two_shot, barrier, signal, all_reduce:
// the process group's, after which rank 0 destroys the group), so in the
// middle of one. MODE hang: rank 1 stops (SIGSTOP) instead, and rank 0
// must time out naming it and exit 3. MODE gloo_X: the same on the gloo
// process group (X: setup, hang, or the collective: all_reduce, broadcast,
// all_gather, reduce_scatter, all_to_all_v, send_recv). Rank 0 must get a DistributedError naming rank 1 and the
// operation within the timeout (KILN_DIST_TIMEOUT_MS), never hang. Rank 0
// ignores the launcher's SIGTERM so it can report; it exits 0 when the
// error was right.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include "kiln/distributed.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::distributed;

namespace {

// Rank 1 dies (or stops, for a hang) at a random moment within 50 ms.
void schedule_fault(bool hang) {
  std::thread([hang] {
    std::this_thread::sleep_for(std::chrono::microseconds(std::random_device()() % 50000));
    ::raise(hang ? SIGSTOP : SIGKILL);
  }).detach();
}

// The collective `what` names, in a loop until it fails.
[[noreturn]] void run_gloo(const std::string& what, int rank) {
  ProcessGroup& pg = init_process_group("gloo");
  if (rank == 1) schedule_fault(what == "hang");
  Tensor x = ones({1 << 16}), out = empty({1 << 16}), pair = empty({2 << 16}), half = empty({1 << 15});
  for (;;) {
    if (what == "all_reduce" || what == "setup") {
      pg.all_reduce(x);
    } else if (what == "broadcast") {
      pg.broadcast(x, 1);
    } else if (what == "all_gather") {
      pg.all_gather(pair, x);
    } else if (what == "reduce_scatter") {
      pg.reduce_scatter(half, x);
    } else if (what == "all_to_all_v") {
      pg.all_to_all_v(out, x, {1 << 15, 1 << 15}, {1 << 15, 1 << 15});
    } else if (what == "send_recv") {
      if (rank == 0) {
        pg.send(x, 1);
        pg.recv(out, 1);
      } else {
        pg.recv(out, 0);
        pg.send(x, 0);
      }
    } else if (what == "hang") {
      pg.barrier();
    } else {
      std::cerr << "unknown mode 'gloo_" << what << "'\n";
      std::exit(2);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool gloo = mode.rfind("gloo_", 0) == 0;
  const std::string what = gloo ? mode.substr(5) : mode;
  const JobEnv env = job_env();
  if (env.rank == 0) ::signal(SIGTERM, SIG_IGN);
  if (env.rank == 1 && what == "setup") ::raise(SIGKILL);
  auto start = std::chrono::steady_clock::now();
  try {
    if (gloo) run_gloo(what, env.rank);
    Tensor x = symm_mem::empty({1 << 16});
    auto h = symm_mem::rendezvous(x);
    if (env.rank == 1) schedule_fault(mode == "hang");
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
    const std::string op = what == "setup" ? (gloo ? "init_process_group" : "distributed.init")
                           : mode == "signal" ? "_signal"
                           : what == "hang" ? (gloo ? "barrier" : "hang")
                                            : what;
    std::cout << "rank 0 after " << s << " s: " << m << "\n";
    if (is_initialized()) destroy_process_group();  // a survivor ends its group and exits cleanly
    // A hung (stopped) peer: found by the timeout; exit non-zero so the
    // launcher stops it (SIGKILL ends a stopped process).
    if (what == "hang") return m.find("rank 1 ") != std::string::npos && m.find("(hung?)") != std::string::npos ? 3 : 1;
    // all_reduce: rank 1 may die before the group's set-up ends
    const bool names_op = m.find(op) != std::string::npos ||
                          (what == "send_recv" && (m.find("distributed.send") != std::string::npos ||
                                                   m.find("distributed.recv") != std::string::npos)) ||
                          (what != "setup" && m.find("init_process_group") != std::string::npos);
    return m.find("rank 1") != std::string::npos && names_op ? 0 : 1;
  }
}
