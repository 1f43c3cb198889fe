// Threads, CPU capability selection and the random generator.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include <cblas.h>
#include <hwy/targets.h>

#include "core/allocator.h"
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Runtime, ParallelForCoversTheRangeOnce) {
  set_num_threads(2);
  EXPECT_EQ(get_num_threads(), 2);
  std::vector<std::atomic<int>> hits(100000);
  parallel_for(0, 100000, 1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  // Nested: runs serially inside, still once each.
  std::atomic<int64_t> total{0};
  parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) parallel_for(0, 1000, 1, [&](int64_t x, int64_t y) { total += y - x; });
  });
  EXPECT_EQ(total.load(), 8000);
  expect_error([] { set_num_threads(0); }, {"[set_num_threads]", ">= 1"});
  // Note [Bounded thread count]: a count that would exhaust the process
  // limit is refused before any thread starts; the pool stays as it was.
  expect_error([] { set_num_threads(100000); }, {"[set_num_threads]", "<= ", "per core", "100000"});
  EXPECT_EQ(get_num_threads(), 2);
}

// Threads that cannot be started (ctest thread-limit runs this as user
// nobody under `ulimit -u`, tests/core/thread_limit.sh): an error naming the
// count, the previous pool kept and working (it once hung).
TEST(Runtime, AThreadThatCannotStartIsAnErrorAndThePoolStaysUsable) {
  if (std::getenv("KILN_TEST_NPROC_LIMITED") == nullptr) GTEST_SKIP() << "run by ctest thread-limit under ulimit -u";
  set_num_threads(2);
  expect_error([] { set_num_threads(60); }, {"[set_num_threads]", "could not start a pool of 60 threads"});
  EXPECT_EQ(get_num_threads(), 2);
  const Tensor x = arange(0, 1 << 20, 1, kFloat64);
  EXPECT_EQ(sum(x).item<double>(), 0.5 * (1 << 20) * ((1 << 20) - 1));
  set_num_threads(1);
  EXPECT_EQ(sum(x).item<double>(), 0.5 * (1 << 20) * ((1 << 20) - 1));
}

// Back-to-back jobs whose task counts change between them: a worker still
// leaving one job must neither take nor count a task of the next (a pool
// that let it hung here, or counted a task twice).
TEST(Runtime, BackToBackJobsOfChangingSizesRunEachTaskOnce) {
  set_num_threads(2);
  std::atomic<int64_t> covered{0};
  int64_t expected = 0;
  for (int job = 0; job < 200000; ++job) {
    const int64_t n = 2 + job % 7;  // 2..8 tasks of one element each
    expected += n * (n - 1) / 2;
    parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) covered += i;
    });
    ASSERT_EQ(covered.load(), expected) << "job " << job;
  }
}

// Note [Resizing the pool]: set_num_threads while other threads run ops
// used to replace the pool under a running parallel_for (a hang in 10 of 15
// runs, a use-after-free without glibc's blocking condvar destructor).
// A watchdog fails the test instead of letting ctest hang.
TEST(Runtime, SetNumThreadsWhileOtherThreadsRunOps) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> ops{0};
  std::vector<std::thread> users;
  for (int t = 0; t < 8; ++t)
    users.emplace_back([&, t] {
      Tensor x = randn({64, 257});
      while (!stop.load()) {
        Tensor y = (x * 2 + 1).sum({1});  // parallel over rows
        parallel_for(0, 10000, 100 + t, [](int64_t, int64_t) {});
        ops.fetch_add(y.numel() == 64 ? 1 : 0);
      }
    });
  std::atomic<bool> resized{false};
  std::thread resizer([&] {
    for (int i = 0; i < 300; ++i) set_num_threads(1 + i % 3);
    resized = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!resized.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!resized.load()) {
    ADD_FAILURE() << "set_num_threads did not finish within 60 s: deadlock";
    std::_Exit(1);  // the threads cannot be joined
  }
  stop = true;
  resizer.join();
  for (auto& u : users) u.join();
  EXPECT_GT(ops.load(), 0);
  set_num_threads(2);
}

TEST(Runtime, ParallelForPropagatesErrors) {
  EXPECT_THROW(parallel_for(0, 100000, 10, [](int64_t b, int64_t) {
                 if (b > 0) fail("test", "boom");
               }),
               Error);
}

TEST(Runtime, CapabilitiesCanBeLoweredAndRestored) {
  const auto avail = available_capabilities();
  ASSERT_FALSE(avail.empty());
  // The lowest target this build compiled: scalar on x86; NEON on arm64 (Debian's Highway compiles no scalar one there).
  EXPECT_EQ(avail.front(), cpu_architecture() == "aarch64" ? Capability::NEON : Capability::Scalar);
  const Capability best = cpu_capability();
  Tensor x = randn({1000});
  const auto want = values(exp(x));
  for (Capability c : avail) {
    set_cpu_capability(c);
    // Highway's SupportedTargets() resets its dispatch choice to the best
    // target (Highway 1.0); cpu_capability() must store the lowered one again.
    const int64_t allowed = hwy::SupportedTargets();
    EXPECT_EQ(cpu_capability(), c);
    expect_close(exp(x), want, 1e-6, 0, capability_name(c));
    EXPECT_EQ(hwy::GetChosenTarget().GetIndex(),
              hwy::Num0BitsBelowLS1Bit_Nonzero64(
                  static_cast<uint64_t>((HWY_CHOSEN_TARGET_SHIFT(allowed) | HWY_CHOSEN_TARGET_MASK_SCALAR) &
                                        HWY_CHOSEN_TARGET_MASK_TARGETS)))
        << capability_name(c);
  }
  set_cpu_capability(best);
  EXPECT_EQ(parse_capability("avx2"), Capability::AVX2);
  expect_error([] { parse_capability("mmx"); }, {"[cpu_capability]", "mmx"});
}

TEST(Runtime, SeedGivesReproducibleStreamsWhateverTheThreadCount) {
  manual_seed(42);
  set_num_threads(1);
  const auto a = values(randn({100000}));
  manual_seed(42);
  set_num_threads(2);
  const auto b = values(randn({100000}));
  EXPECT_EQ(a, b);
  const auto c = values(randn({100000}));
  EXPECT_NE(a, c);  // the stream moves on
}

TEST(Runtime, DistributionsHaveTheRightMoments) {
  manual_seed(7);
  Tensor u = rand({200000}, kFloat64);
  EXPECT_NEAR(mean(u).item<double>(), 0.5, 0.005);
  EXPECT_GE(amin(u).item<double>(), 0.0);
  EXPECT_LT(amax(u).item<double>(), 1.0);
  Tensor n = randn({200000});
  EXPECT_NEAR(mean(n).item<double>(), 0.0, 0.01);
  EXPECT_NEAR(kiln::std(n).item<double>(), 1.0, 0.01);
  Tensor r = randint(3, 7, {10000});
  EXPECT_EQ(amin(r).item<int64_t>(), 3);
  EXPECT_EQ(amax(r).item<int64_t>(), 6);
  Tensor h = rand({10000}, kBFloat16);
  EXPECT_LT(amax(h).item<float>(), 1.0f);
}

TEST(Runtime, GeneratorStateRestoresTheExactStream) {
  manual_seed(5);
  (void)rand({7});
  const Tensor state = get_rng_state();
  EXPECT_EQ(state.dtype(), kUInt8);
  EXPECT_EQ(state.sizes(), (Shape{16}));
  const auto a = values(randn({1000}));
  const auto b = values(randint(0, 100, {50}));
  (void)rand({3});
  set_rng_state(state);
  EXPECT_EQ(values(randn({1000})), a);
  EXPECT_EQ(values(randint(0, 100, {50})), b);

  // A generator of its own: independent of the default one, restorable too.
  Generator g(99);
  const Tensor g0 = g.get_state();
  const Tensor before = get_rng_state();
  const auto p = values(randperm(20, g));
  EXPECT_EQ(values(get_rng_state()), values(before));  // the default stream did not move
  EXPECT_NE(values(g.get_state()), values(g0));
  Generator h;
  h.set_state(g0);
  EXPECT_EQ(h.seed(), 99u);
  EXPECT_EQ(values(randperm(20, h)), p);
  // The state round-trips through a non-contiguous view too.
  Tensor wide = zeros({16, 2}, kUInt8);
  wide.select(1, 0).copy_(g0);
  h.set_state(wide.select(1, 0));
  EXPECT_EQ(values(randperm(20, h)), p);

  expect_error([&] { h.set_state(zeros({15}, kUInt8)); }, {"Generator.set_state", "[16]", "uint8", "[15]"});
  expect_error([&] { h.set_state(zeros({16}, kFloat32)); }, {"Generator.set_state", "float32"});
  expect_error([&] { set_rng_state(zeros({2, 8}, kUInt8)); }, {"Generator.set_state", "[2, 8]"});
  expect_error([&] { h.set_state(Tensor()); }, {"Generator.set_state", "undefined"});
}

TEST(Runtime, RandpermIsAPermutationUniformOverPositions) {
  manual_seed(8);
  for (int64_t n : {0, 1, 2, 17, 1000}) {
    const Tensor p = randperm(n);
    EXPECT_EQ(p.dtype(), kInt64);
    EXPECT_EQ(p.sizes(), (Shape{n}));
    auto v = values(p);
    std::sort(v.begin(), v.end());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(v[static_cast<size_t>(i)], static_cast<double>(i)) << n;
  }
  // Where element 0 lands, over 20,000 permutations of 4: each place about
  // a quarter of the time (5,000; 6 standard deviations is 370).
  std::vector<int> counts(4);
  for (int i = 0; i < 20000; ++i) {
    const auto v = values(randperm(4));
    counts[static_cast<size_t>(std::find(v.begin(), v.end(), 0.0) - v.begin())]++;
  }
  for (int c : counts) EXPECT_NEAR(c, 5000, 370);
  EXPECT_EQ(randperm(5, kFloat16).dtype(), kFloat16);
  EXPECT_EQ(randperm(0, kInt8).numel(), 0);
  expect_error([] { (void)randperm(-1); }, {"randperm", "-1"});
  expect_error([] { (void)randperm(300, kUInt8); }, {"randperm", "300", "uint8", "255"});
  expect_error([] { (void)randperm(3000, kFloat16); }, {"randperm", "float16", "2048"});
  expect_error([] { (void)randperm(3, kBool); }, {"randperm", "bool"});
}

TEST(Runtime, LargeBlocksAreCachedAndReleased) {
  empty_cache();
  EXPECT_EQ(allocator_cached_bytes(), 0u);
  void* first;
  {
    Tensor t = empty({1 << 20});  // 4 MiB
    first = t.raw_data();
  }
#if !KILN_ASAN  // the allocator caches nothing under ASan
  EXPECT_GE(allocator_cached_bytes(), size_t{4} << 20);
  Tensor again = empty({(1 << 20) - 100});  // same size class: the cached block comes back
  EXPECT_EQ(again.raw_data(), first);
  EXPECT_EQ(allocator_cached_bytes(), 0u);
#endif
  Tensor small = ones({10});  // small blocks bypass the cache
  EXPECT_EQ(allocator_cached_bytes(), 0u);
  empty_cache();
  EXPECT_EQ(allocator_cached_bytes(), 0u);
}

// Pages of [p, p + bytes) that are resident.
size_t resident_pages(const void* p, size_t bytes) {
  const uintptr_t page = 4096, addr = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (addr + page - 1) / page * page, hi = (addr + bytes) / page * page;
  std::vector<unsigned char> resident((hi - lo) / page);
  EXPECT_EQ(mincore(reinterpret_cast<void*>(lo), hi - lo, resident.data()), 0);
  return static_cast<size_t>(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return (r & 1) != 0; }));
}

// Small blocks (malloc plus an offset byte) are 64-byte aligned at every
// size and hold their data until freed, among others freed around them.
TEST(Runtime, SmallBlocksAreAlignedAndKeepTheirData) {
  auto make = [](int64_t n) { return full({n % 300}, static_cast<double>(n % 100), n % 2 ? kFloat32 : kInt8); };
  std::vector<Tensor> kept;
  for (int64_t n = 0; n < 600; ++n) {
    Tensor t = make(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u) << n;
    if (n % 3 == 0) kept.push_back(t);  // the rest are freed while later ones are made
  }
  for (size_t i = 0; i < kept.size(); ++i) {
    const int64_t n = static_cast<int64_t>(3 * i);
    expect_close(kept[i], values(make(n)), 0, 0, "tensor " + std::to_string(n));
  }
}

// A block of the cached sizes comes with its pages mapped, so the first
// write to a fresh tensor does not fault page by page; a block for storage
// nobody writes (the compile tracer's pending tensors) is left unmapped,
// kept apart when released, and mapped when an ordinary tensor draws it
// (Note [Untouched blocks] in src/core/allocator.cpp).
TEST(Runtime, CachedBlocksComeWithTheirPagesMapped) {
#if !KILN_ASAN  // the allocator caches nothing under ASan
  empty_cache();
  const size_t bytes = size_t{3} << 20, pages = bytes / 4096 - 1;
  const Tensor t = empty({3 << 18});  // 3 MiB, never written here
  EXPECT_GE(resident_pages(t.raw_data(), bytes), pages);
  const void* unwritten_block;
  {
    Tensor pending;
    {
      const core::UnwrittenAllocations pending_storage;
      pending = empty({3 << 18});
    }
    unwritten_block = pending.raw_data();
    // At most the pages glibc writes its chunk headers into, at the block's
    // ends: when an earlier free of a large mmapped chunk raised glibc's
    // mmap threshold, the block comes from the heap and the next chunk's
    // header lands in its last page (1 page seen in 1 of 8 full runs).
    EXPECT_LE(resident_pages(unwritten_block, bytes), 2u);
  }
  const Tensor drawn = empty({3 << 18});  // the unwritten block, now mapped
  EXPECT_EQ(drawn.raw_data(), unwritten_block);
  EXPECT_GE(resident_pages(drawn.raw_data(), bytes), pages);
#endif
}

TEST(Runtime, InfoStrings) {
  EXPECT_FALSE(version().empty());
  EXPECT_NE(blas_info().find("OpenBLAS"), std::string::npos);
}

// Note [One thread pool]: GEMMs are split over kiln's pool, so a pool made
// by set_num_threads sets OpenBLAS back to one thread, as the default does.
TEST(Runtime, OpenBlasStaysSingleThreaded) {
  const int before = get_num_threads();
  for (int n : {2, 1, 3}) {
    openblas_set_num_threads(4);
    set_num_threads(n);
    EXPECT_NE(blas_info().find(", 1 thread)"), std::string::npos) << blas_info();
  }
  set_num_threads(before);
}

}  // namespace
}  // namespace kiln::test
