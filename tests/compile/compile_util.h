// Shared by the kiln::compile tests: a fresh compile cache per test, and
// comparisons of compiled results with eager ones.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "kiln/compile.h"
#include "kiln/profiler.h"
#include "test_util.h"

namespace kiln::test {

// Each test compiles into its own fresh cache directory.
class Compile : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/kiln-compile-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    cache_dir_ = dir;
    setenv("KILN_CACHE_DIR", dir, 1);
    // KILN_CXX stays what the run was started with (a cross compiler under qemu).
  }
  void TearDown() override { std::filesystem::remove_all(cache_dir_); }
  std::string cache_dir_;
};

// Runs of op `name` (any shapes) among the ops the profiler timed since `reset`.
inline int64_t profiled_calls(const std::string& name) {
  int64_t calls = 0;
  for (const profiler::OpStats& s : profiler::op_stats())
    if (s.key.rfind(name + " ", 0) == 0) calls += s.calls;
  return calls;
}

inline CompileOptions backend(const std::string& b) {
  CompileOptions o;
  o.backend = b;
  return o;
}

inline CompileOptions fullgraph() {
  CompileOptions o;
  o.fullgraph = true;
  return o;
}

inline void expect_same(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-5) {
  ASSERT_EQ(got.defined(), want.defined()) << what;
  if (!want.defined()) return;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  expect_close(got, values(want), tol, tol, what);
}

}  // namespace kiln::test
