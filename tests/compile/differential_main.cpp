// The differential tester of kiln::compile: runs random programs eagerly
// and compiled and reports every difference a user could observe (values,
// requires_grad, gradients and their definedness, writes to inputs, errors,
// recompiles on identical calls).
//   kiln-compile-differential [--first N] [--count N] [--seconds S]
// runs programs first, first + 1, ... until count ran or S seconds passed;
// exit status 1 when any program differed (each is printed with its
// differences, so `--first SEED --count 1` reproduces it).
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <string>

#include "compile/random_program.h"
#include "kiln/kiln.h"

int main(int argc, char** argv) {
  uint64_t first = 0, count = 100;
  double seconds = 0;
  bool print_only = false;  // --print: list the programs, run none (to compare generator versions)
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--print")) print_only = true;
    else if (i + 1 < argc && !std::strcmp(argv[i], "--first")) first = std::strtoull(argv[++i], nullptr, 10);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--count")) count = std::strtoull(argv[++i], nullptr, 10);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--seconds")) seconds = std::strtod(argv[++i], nullptr);
    else {
      std::fprintf(stderr, "usage: %s [--first N] [--count N] [--seconds S] [--print]\n", argv[0]);
      return 2;
    }
  }
  if (print_only) {
    for (uint64_t seed = first; seed < first + count; ++seed)
      std::printf("%s", kiln::test::random_program(seed).to_string().c_str());
    return 0;
  }
  // Generated loops go to a cache of this run's own, removed at the end.
  char dir[] = "/tmp/kiln-differential-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  setenv("KILN_CACHE_DIR", dir, 1);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  // Programs run in child processes of kBatch each, so that a crash loses
  // one batch and names it. Each child reports its counts through a pipe.
  constexpr uint64_t kBatch = 1000;
  struct Counts {
    uint64_t ran = 0, failed = 0;
    int64_t compiler_runs = 0;
  } total;
  for (uint64_t lo = first; lo < first + count && !(seconds > 0 && elapsed() > seconds); lo += kBatch) {
    const uint64_t hi = std::min(first + count, lo + kBatch);
    int fds[2];
    if (pipe(fds) != 0) return 2;
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      close(fds[0]);
      Counts c;
      for (uint64_t seed = lo; seed < hi && !(seconds > 0 && elapsed() > seconds); ++seed) {
        const kiln::test::Program p = kiln::test::random_program(seed);
        std::vector<std::string> diffs;
        try {
          diffs = kiln::test::differences(p);
        } catch (const std::exception& e) {
          diffs.push_back(std::string("the tester itself threw: ") + e.what());
        }
        ++c.ran;
        if (diffs.empty()) continue;
        ++c.failed;
        std::printf("%s", p.to_string().c_str());
        for (const std::string& d : diffs) std::printf("  DIFFERS: %s\n", d.c_str());
      }
      c.compiler_runs = kiln::compiler::detail::compiler_runs();
      std::fflush(stdout);
      const bool sent = write(fds[1], &c, sizeof c) == static_cast<ssize_t>(sizeof c);
      _exit(sent ? 0 : 2);
    }
    close(fds[1]);
    Counts c;
    const bool got = read(fds[0], &c, sizeof c) == static_cast<ssize_t>(sizeof c);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("the batch from seed %llu died (status %d): run it with --first %llu --count %llu\n",
                  static_cast<unsigned long long>(lo), status, static_cast<unsigned long long>(lo),
                  static_cast<unsigned long long>(hi - lo));
      ++total.failed;
      continue;
    }
    total.ran += c.ran, total.failed += c.failed, total.compiler_runs += c.compiler_runs;
  }
  std::filesystem::remove_all(dir);
  std::printf("%llu programs from seed %llu, %llu differed; the C++ compiler ran %lld times (%.0f s)\n",
              static_cast<unsigned long long>(total.ran), static_cast<unsigned long long>(first),
              static_cast<unsigned long long>(total.failed), static_cast<long long>(total.compiler_runs), elapsed());
  return total.failed ? 1 : 0;
}
