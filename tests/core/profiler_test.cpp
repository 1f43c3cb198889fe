// The op profiler: outermost kernels and generated loops, by op and shapes.
#include <stdlib.h>

#include <filesystem>

#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

int64_t calls_of(const std::string& key) {
  for (const profiler::OpStats& s : profiler::op_stats())
    if (s.key == key) return s.calls;
  return 0;
}

TEST(Profiler, CountsOutermostKernelsByOpAndShapes) {
  const Tensor x = randn({3, 4});
  profiler::reset();
  profiler::enable(true);
  for (int i = 0; i < 3; ++i) add(x, x);
  x.t().contiguous();                                       // a copy of a non-contiguous input
  slice_backward(x.slice(1, 1, 3), x.sizes(), 1, 1, 3, 1);  // fills and copies inside: one entry
  profiler::enable(false);
  add(x, x);  // off: not counted
  EXPECT_EQ(calls_of("add [3, 4] [3, 4]"), 3) << profiler::summary();
  EXPECT_EQ(calls_of("_to_copy [4, 3]nc"), 1) << profiler::summary();
  EXPECT_EQ(calls_of("slice_backward [3, 2]nc"), 1) << profiler::summary();
  EXPECT_EQ(profiler::op_stats().size(), 3u) << profiler::summary();
  const std::vector<profiler::OpStats> stats = profiler::op_stats();
  for (size_t i = 1; i < stats.size(); ++i) EXPECT_GE(stats[i - 1].seconds, stats[i].seconds);
  EXPECT_NE(profiler::summary().find("add [3, 4] [3, 4]"), std::string::npos);
  profiler::reset();
  EXPECT_TRUE(profiler::op_stats().empty());
}

TEST(Profiler, GeneratedLoopsAreEntriesToo) {
  char dir[] = "/tmp/kiln-profiler-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  setenv("KILN_CACHE_DIR", dir, 1);
  auto f = compile([](const Tensor& a) { return exp(a * 2.0) + a; });
  const Tensor a = randn({5, 7});
  f(a);  // compiled here
  profiler::reset();
  profiler::enable(true);
  f(a);
  profiler::enable(false);
  EXPECT_EQ(calls_of("loop(mul,exp,add) [5, 7]"), 1) << profiler::summary();
  profiler::reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::test
