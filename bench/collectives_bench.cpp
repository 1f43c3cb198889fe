// kiln-bench-collectives: all-reduce (float32 sum) of random data at 4 KiB,
// 64 KiB, 1 MiB and 64 MiB with 2 and 4 ranks, against OpenMPI's
// MPI_Allreduce (bench/peers/mpi_allreduce.c) and gloo's (the gloo process
// group on TCP loopback), run in the same invocation.
// Run plainly, it starts the ranks itself: `kiln run --nproc W` of this
// program for kiln, `mpirun -np W` of the peer for OpenMPI, then reports.
// kiln's cases: symm_mem's one_shot_all_reduce (out of place) and
// two_shot_all_reduce_ (in place) on a symmetric buffer, and the process
// group's all_reduce (a plain tensor, copied in; one-shot up to its
// threshold). Latency is rank 0's time per call, best of five batches of
// about 50 ms, ranks meeting at a barrier before each batch; algorithm
// bandwidth is bytes / latency. Every rank runs one thread.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench_util.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::distributed;

namespace {

const int64_t kSizes[] = {4 << 10, 64 << 10, 1 << 20, 64 << 20};

// Seconds per call of fn, every rank running the same number of calls.
double time_collective(ProcessGroup& pg, const std::function<void()>& fn, const std::function<void()>& refill) {
  int64_t iters = 1;
  auto batch = [&] {
    refill();
    pg.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) fn();
    Tensor t = full({1}, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
    pg.broadcast(t, 0);  // rank 0's clock decides, so every rank agrees on the counts
    return t.item<double>();
  };
  for (;;) {
    const double t = batch();
    if (t * static_cast<double>(iters) > 0.05 || iters >= (1 << 20)) break;
    iters *= 4;
  }
  double best = 1e30;
  for (int b = 0; b < 5; ++b) best = std::min(best, batch());
  return best;
}

int run_rank() {
  set_num_threads(1);
  ProcessGroup& pg = init_process_group("symm");
  manual_seed(77 + pg.rank());
  for (int64_t bytes : kSizes) {
    const int64_t n = bytes / 4;
    const Tensor data = randn({n});
    Tensor x = symm_mem::empty({n});
    auto refill = [&] { x.copy_(data); };
    auto line = [&](const char* algo, double s) {
      if (pg.rank() == 0) std::printf("kiln %d %lld %s %.9g\n", pg.size(), static_cast<long long>(bytes), algo, s);
    };
    line("one_shot", time_collective(pg, [&] { symm_mem::one_shot_all_reduce(x); }, refill));
    line("two_shot", time_collective(pg, [&] { symm_mem::two_shot_all_reduce_(x); }, refill));
    Tensor y = data.clone();
    line("process_group", time_collective(pg, [&] { pg.all_reduce(y); }, [&] { y.copy_(data); }));
  }
  destroy_process_group();
  // The peer on the same collective: the gloo process group (Debian's
  // libgloo, TCP loopback between the ranks; its ring all-reduce).
  ProcessGroup& gloo = init_process_group("gloo");
  for (int64_t bytes : kSizes) {
    const Tensor data = randn({bytes / 4});
    Tensor y = data.clone();
    const double s = time_collective(gloo, [&] { gloo.all_reduce(y); }, [&] { y.copy_(data); });
    if (gloo.rank() == 0) std::printf("gloo %d %lld gloo %.9g\n", gloo.size(), static_cast<long long>(bytes), s);
  }
  std::fflush(stdout);
  destroy_process_group();
  return 0;
}

// Runs a command, returning its stdout lines split into words.
std::vector<std::vector<std::string>> run_lines(const std::string& command) {
  std::vector<std::vector<std::string>> lines;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return lines;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) {
    std::istringstream words(buf);
    std::vector<std::string> w;
    for (std::string s; words >> s;) w.push_back(s);
    lines.push_back(w);
  }
  const int status = ::pclose(p);
  if (status != 0) std::fprintf(stderr, "kiln-bench-collectives: '%s' failed (status %d)\n", command.c_str(), status);
  return lines;
}

std::string size_name(int64_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + "MiB" : std::to_string(bytes >> 10) + "KiB";
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("KILN_JOB_SECRET")) return run_rank();
  kiln::bench::Reporter rep;
  for (int i = 1; i < argc; ++i) rep.json = rep.json || std::string(argv[i]) == "--json";
  std::string sizes;
  for (int64_t b : kSizes) sizes.append(" ").append(std::to_string(b));
  // (ranks, bytes, algorithm) -> seconds per call
  std::map<std::tuple<int, int64_t, std::string>, double> kiln_s, mpi_s, gloo_s;
  for (int ranks : {2, 4}) {
    for (auto& w : run_lines(std::string(KILN_CLI) + " run --nproc " + std::to_string(ranks) + " " + argv[0]))
      if (w.size() == 5 && (w[0] == "kiln" || w[0] == "gloo"))
        (w[0] == "kiln" ? kiln_s : gloo_s)[{std::stoi(w[1]), std::stoll(w[2]), w[3]}] = std::stod(w[4]);
#ifdef KILN_MPI_PEER
    for (auto& w : run_lines("mpirun --allow-run-as-root --oversubscribe --bind-to none -np " + std::to_string(ranks) +
                             " " + KILN_MPI_PEER + sizes + " 2>/dev/null"))
      if (w.size() == 4 && w[0] == "mpi") mpi_s[{std::stoi(w[1]), std::stoll(w[2]), "mpi"}] = std::stod(w[3]);
#endif
  }
  for (auto& [key, s] : kiln_s) {
    const auto& [ranks, bytes, algo] = key;
    const std::string c = "allreduce_" + std::to_string(ranks) + "ranks_" + size_name(bytes) + "_" + algo;
    // The process group's all_reduce against gloo's: the same call.
    auto g = gloo_s.find({ranks, bytes, "gloo"});
    if (algo == "process_group" && g != gloo_s.end()) {
      rep.report("collectives", c, "us", s * 1e6, "gloo", g->second * 1e6, /*higher_is_better=*/false);
      if (bytes >= (1 << 20))
        rep.report("collectives", c + "_algbw", "GB/s", bytes / s / 1e9, "gloo", bytes / g->second / 1e9);
    }
    auto m = mpi_s.find({ranks, bytes, "mpi"});
    if (m == mpi_s.end()) {
      std::fprintf(stderr, "kiln-bench-collectives: no OpenMPI figure for %d ranks, %lld bytes (libopenmpi-dev?)\n",
                   ranks, static_cast<long long>(bytes));
      continue;
    }
    rep.report("collectives", c, "us", s * 1e6, "openmpi", m->second * 1e6, /*higher_is_better=*/false);
    if (bytes >= (1 << 20))
      rep.report("collectives", c + "_algbw", "GB/s", bytes / s / 1e9, "openmpi", bytes / m->second / 1e9);
  }
  return 0;
}
