// The differential tester of kiln::compile: runs random programs eagerly
// and compiled and reports every difference a user could observe (values,
// requires_grad, gradients and their definedness, writes to inputs, errors,
// recompiles on identical calls).
//   kiln-compile-differential [--first N] [--count N] [--seconds S]
// runs programs first, first + 1, ... until count ran or S seconds passed;
// exit status 1 when any program differed (each is printed with its
// differences, so `--first SEED --count 1` reproduces it).
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "compile/random_program.h"
#include "kiln/kiln.h"

int main(int argc, char** argv) {
  uint64_t first = 0, count = 100;
  double seconds = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--first")) first = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--count")) count = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--seconds")) seconds = std::strtod(argv[i + 1], nullptr);
    else {
      std::fprintf(stderr, "usage: %s [--first N] [--count N] [--seconds S]\n", argv[0]);
      return 2;
    }
  }
  // Generated loops go to a cache of this run's own, removed at the end.
  char dir[] = "/tmp/kiln-differential-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  setenv("KILN_CACHE_DIR", dir, 1);
  const auto start = std::chrono::steady_clock::now();
  uint64_t ran = 0, failed = 0;
  for (uint64_t seed = first; seed < first + count; ++seed) {
    if (seconds > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) break;
    const kiln::test::Program p = kiln::test::random_program(seed);
    std::vector<std::string> diffs;
    try {
      diffs = kiln::test::differences(p);
    } catch (const std::exception& e) {
      diffs.push_back(std::string("the tester itself threw: ") + e.what());
    }
    ++ran;
    if (diffs.empty()) continue;
    ++failed;
    std::printf("%s", p.to_string().c_str());
    for (const std::string& d : diffs) std::printf("  DIFFERS: %s\n", d.c_str());
  }
  std::filesystem::remove_all(dir);
  std::printf("%llu programs from seed %llu, %llu differed; the C++ compiler ran %lld times (%.0f s)\n",
              static_cast<unsigned long long>(ran), static_cast<unsigned long long>(first),
              static_cast<unsigned long long>(failed), static_cast<long long>(kiln::compiler::detail::compiler_runs()),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return failed ? 1 : 0;
}
