// Runs the kernel tests under the CPU capability named by
// KILN_CPU_CAPABILITY; exits 77 (skipped) when this machine lacks it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/kiln.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* want = std::getenv("KILN_CPU_CAPABILITY")) {
    const kiln::Capability c = kiln::parse_capability(want);
    if (kiln::cpu_capability() != c) {
      std::printf("capability %s is not available on this machine: skipped\n", want);
      return 77;
    }
  }
  std::printf("running kernel tests with capability %s\n", kiln::capability_name(kiln::cpu_capability()));
  return RUN_ALL_TESTS();
}
