// Symmetric memory and its collectives, run by ctest under
// `kiln run --nproc N` (N = 2 and 4): every rank runs every test, in the
// same order. Each rank's data comes from a seed of its rank, so every rank
// can rebuild all ranks' inputs and reduce them itself in float64: the
// reference each collective is compared with.
#include <fcntl.h>
#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>

#include "distributed/compare.h"
#include "kiln/distributed.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::distributed;

namespace {

int world() { return job_env().world_size; }
int me() { return job_env().rank; }

// Rank r's input: random values (a few special ones for floats).
Tensor input_of(int r, int64_t n, DType dtype, uint64_t salt) {
  manual_seed(1000 * salt + r);
  if (dtype == kInt64) return randint(-1000, 1000, {n});
  Tensor x = randn({n});
  if (n > 8 && salt % 3 == 0) {  // special values at rank-dependent places
    float* p = x.data_ptr<float>();
    p[r % n] = 0.0f;
    p[(3 + r) % n] = -0.0f;
    p[(5 + 2 * r) % n] = 1e30f;
  }
  return x.to(dtype);
}

Tensor reference(int64_t n, DType dtype, uint64_t salt, const std::string& op) {
  Tensor acc;
  for (int r = 0; r < world(); ++r) {
    Tensor x = input_of(r, n, dtype, salt).to(kFloat64);
    if (!acc.defined()) acc = x;
    else if (op == "sum" || op == "avg") acc = acc + x;
    else if (op == "max") acc = maximum(acc, x);
    else acc = minimum(acc, x);
  }
  if (op == "avg") acc = acc / static_cast<double>(world());
  return acc;
}

// Every rank got the same bits as rank 0 (through a symmetric buffer).
void expect_same_on_every_rank(const Tensor& result, const std::string& what) {
  Tensor mine = symm_mem::empty(result.sizes(), result.dtype());
  mine.copy_(result);
  auto h = symm_mem::rendezvous(mine);
  h->barrier();
  Tensor zero = empty(result.sizes(), result.dtype());
  h->get(zero, 0);
  h->barrier();
  const size_t bytes = static_cast<size_t>(result.numel()) * element_size(result.dtype());
  EXPECT_EQ(std::memcmp(zero.raw_data(), result.raw_data(), bytes), 0) << what << ": rank " << me() << " differs from rank 0";
}

const DType kDTypes[] = {kFloat32, kFloat16, kBFloat16, kInt64};
const int64_t kSizes[] = {1, 7, 1000, 100003};

}  // namespace

TEST(SymmetricMemory, TheLauncherGaveEveryRankItsPlace) {
  const JobEnv e = job_env();
  EXPECT_GE(e.world_size, 2);
  EXPECT_LT(e.rank, e.world_size);
  EXPECT_EQ(e.local_world_size, e.world_size);
  EXPECT_FALSE(e.secret.empty());
}

TEST(SymmetricMemory, OneShotAllReduceMatchesAFloat64Reference) {
  uint64_t salt = 0;
  for (DType dtype : kDTypes)
    for (const char* op : {"sum", "avg", "max", "min"}) {
      if (dtype == kInt64 && std::string(op) == "avg") continue;
      for (int64_t n : kSizes) {
        ++salt;
        Tensor x = symm_mem::empty({n}, dtype);
        x.copy_(input_of(me(), n, dtype, salt));
        const Tensor before = x.clone();
        Tensor y = symm_mem::one_shot_all_reduce(x, op);
        const std::string what = std::string(op) + " " + dtype_name(dtype) + " n=" + std::to_string(n);
        test::expect_matches(y, reference(n, dtype, salt, op), what);
        EXPECT_EQ(std::memcmp(x.raw_data(), before.raw_data(), n * element_size(dtype)), 0) << what << ": the input changed";
        expect_same_on_every_rank(y, what);
      }
    }
}

TEST(SymmetricMemory, TwoShotAllReduceMatchesAFloat64Reference) {
  uint64_t salt = 100;
  for (DType dtype : kDTypes)
    for (const char* op : {"sum", "avg", "max", "min"}) {
      if (dtype == kInt64 && std::string(op) == "avg") continue;
      for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1000}, int64_t{100003}}) {  // fewer elements than ranks too
        ++salt;
        Tensor x = symm_mem::empty({n}, dtype);
        x.copy_(input_of(me(), n, dtype, salt));
        Tensor& y = symm_mem::two_shot_all_reduce_(x, op);
        EXPECT_EQ(&y, &x);
        const std::string what = std::string(op) + " " + dtype_name(dtype) + " n=" + std::to_string(n);
        test::expect_matches(x, reference(n, dtype, salt, op), what);
        expect_same_on_every_rank(x, what);
      }
    }
}

TEST(SymmetricMemory, ReduceScatterOutAndAllGatherOutMatchTheReference) {
  const int W = world();
  const int64_t cols = 33;
  uint64_t salt = 300;
  for (DType dtype : kDTypes)
    for (const char* op : {"sum", "avg", "max", "min"}) {
      if (dtype == kInt64 && std::string(op) == "avg") continue;
      for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{5}}) {  // per rank
        ++salt;
        const int64_t n = W * rows * cols;
        Tensor x = symm_mem::empty({W * rows, cols}, dtype);
        x.copy_(input_of(me(), n, dtype, salt).view({W * rows, cols}));
        Tensor out = empty({rows, cols}, dtype);
        Tensor& r = symm_mem::reduce_scatter_out(x, out, op);
        EXPECT_EQ(&r, &out);
        const std::string what = std::string("reduce_scatter_out ") + op + " " + dtype_name(dtype) + " rows " +
                                 std::to_string(rows);
        test::expect_matches(out, reference(n, dtype, salt, op).view({W * rows, cols}).slice(0, me() * rows,
                                                                                            (me() + 1) * rows),
                             what);
      }
    }
  // Into a transposed (non-contiguous) output.
  Tensor in = symm_mem::empty({3, 4});
  in.copy_(input_of(me(), 12, kFloat32, 399).view({3, 4}));
  Tensor base = full({4, 3 * W}, -1.0);
  Tensor out = base.t();  // [3W, 4]
  Tensor& g = symm_mem::all_gather_out(in, out);
  EXPECT_EQ(&g, &out);
  for (int r = 0; r < W; ++r)
    test::expect_matches(out.slice(0, 3 * r, 3 * r + 3), input_of(r, 12, kFloat32, 399).view({3, 4}), "all_gather_out");
  Tensor wrong = empty({5, 4});
  test::expect_error([&] { symm_mem::all_gather_out(in, wrong); }, {"symm_mem.all_gather_out", "times the rows"});
  test::expect_error([&] { symm_mem::reduce_scatter_out(in, wrong); }, {"symm_mem.reduce_scatter_out", "times the rows"});
  Tensor plain = randn({3, 4});
  test::expect_error([&] { symm_mem::all_gather_out(plain, out); }, {"not in the symmetric heap"});
}

TEST(SymmetricMemory, AViewInsideABufferReducesItsOwnElements) {
  Tensor buf = symm_mem::empty({4, 50});
  buf.copy_(input_of(me(), 200, kFloat32, 7).view({4, 50}));
  Tensor row = buf.select(0, 2);
  Tensor y = symm_mem::one_shot_all_reduce(row, "sum");
  Tensor want = reference(200, kFloat32, 7, "sum").view({4, 50}).select(0, 2);
  test::expect_matches(y, want, "row 2 of a buffer");
}

TEST(SymmetricMemory, NaNWinsMaxAndMinAndInfinitiesAdd) {
  Tensor x = symm_mem::empty({3});
  const float nan = NAN, inf = INFINITY;
  x.copy_(tensor({me() == 0 ? nan : 1.0f, inf, 2.0f}));
  Tensor mx = symm_mem::one_shot_all_reduce(x, "max"), mn = symm_mem::one_shot_all_reduce(x, "min");
  Tensor s = symm_mem::one_shot_all_reduce(x, "sum");
  EXPECT_TRUE(std::isnan(mx.data_ptr<float>()[0]));
  EXPECT_TRUE(std::isnan(mn.data_ptr<float>()[0]));
  EXPECT_EQ(s.data_ptr<float>()[1], inf);
  EXPECT_EQ(s.data_ptr<float>()[2], 2.0f * world());
}

TEST(SymmetricMemory, BadInputIsRefusedWithTheOpInTheMessage) {
  Tensor plain = randn({8});
  test::expect_error([&] { symm_mem::one_shot_all_reduce(plain); }, {"not in the symmetric heap"});
  Tensor m = symm_mem::empty({4, 4});
  Tensor t = m.transpose(0, 1);
  test::expect_error([&] { symm_mem::two_shot_all_reduce_(t); }, {"contiguous"});
  Tensor d = symm_mem::empty({4}, kFloat64);
  test::expect_error([&] { symm_mem::one_shot_all_reduce(d); }, {"float64"});
  Tensor i = symm_mem::empty({4}, kInt64);
  test::expect_error([&] { symm_mem::one_shot_all_reduce(i, "avg"); }, {"floating"});
  test::expect_error([&] { symm_mem::one_shot_all_reduce(m, "prod"); }, {"unknown reduce op 'prod'"});
  auto h = symm_mem::rendezvous(m);
  EXPECT_EQ(h->buffer_size(), 64u);
  test::expect_error([&] { h->get_buffer(0, {5, 4}, kFloat32); }, {"the buffer has 64"});
  test::expect_error([&] { h->get_buffer(0, {4}, kFloat32, 13); }, {"from element 13"});
  test::expect_error([&] { h->get_buffer(world(), {4}, kFloat32); }, {"is not in the world"});
  Tensor big = zeros({20});
  test::expect_error([&] { h->put(big, 0); }, {"do not fit"});
  test::expect_error([&] { h->put_signal(0, symm_mem::kNumChannels); }, {"channel"});
  h->barrier();
}

TEST(SymmetricMemory, BuffersAllocatedInDifferentOrdersAreCaughtAtRendezvous) {
  Tensor a = symm_mem::empty({me() == 0 ? 16 : 32});
  try {
    symm_mem::rendezvous(a);
    ADD_FAILURE() << "rendezvous accepted buffers of different sizes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same order with the same sizes"), std::string::npos) << e.what();
  }
}

TEST(SymmetricMemory, GetBufferAliasesThePeersMemory) {
  Tensor x = symm_mem::empty({10});
  x.fill_(static_cast<double>(me() + 1));
  auto h = symm_mem::rendezvous(x);
  h->barrier();
  const int peer = (me() + 1) % world();
  Tensor p = h->get_buffer(peer, {2, 5}, kFloat32);
  EXPECT_EQ(p.data_ptr<float>()[7], static_cast<float>(peer + 1));
  h->barrier();
  // A one-sided put into the next rank, then a signal: it sees the values.
  h->put(full({3}, 100.0 + me()), peer, 4 * sizeof(float));
  h->put_signal(peer, 7);
  const int from = (me() - 1 + world()) % world();
  h->wait_signal(from, 7);
  EXPECT_EQ(x.data_ptr<float>()[4], static_cast<float>(100 + from));
  EXPECT_EQ(x.data_ptr<float>()[6], static_cast<float>(100 + from));
  EXPECT_EQ(x.data_ptr<float>()[7], static_cast<float>(me() + 1));
  h->barrier();
  EXPECT_EQ(h->buffer_ptrs().size(), static_cast<size_t>(world()));
  EXPECT_EQ(h->signal_pad_ptrs().size(), static_cast<size_t>(world()));
}

// Ranks pair up (0-1, 2-3): the sender puts a counter and signals, the
// receiver checks it and acknowledges. A lost or duplicated signal shows as
// a counter out of sequence (or a wait that times out).
TEST(SymmetricMemory, SignalsAreNeitherLostNorDuplicatedUnderStress) {
  Tensor x = symm_mem::empty({1}, kInt64);
  auto h = symm_mem::rendezvous(x);
  h->barrier();
  const int partner = me() ^ 1;
  const int64_t rounds = world() == 2 ? 1000000 : 100000;  // 4 ranks share 2 cores here
  if (partner < world()) {
    int64_t* mine = x.data_ptr<int64_t>();
    auto* theirs = static_cast<int64_t*>(h->buffer_ptrs()[partner]);
    int64_t bad = 0;
    for (int64_t i = 0; i < rounds; ++i) {
      if (me() % 2 == 0) {
        *theirs = i;
        h->put_signal(partner, 8);
        h->wait_signal(partner, 9);
      } else {
        h->wait_signal(partner, 8);
        bad += *mine != i;
        h->put_signal(partner, 9);
      }
    }
    EXPECT_EQ(bad, 0);
  }
  h->barrier();
}

TEST(SymmetricMemory, AMissingSignalTimesOutNamingThePeer) {
  Tensor x = symm_mem::empty({1});
  auto h = symm_mem::rendezvous(x);
  const int peer = (me() + 1) % world();
  try {
    h->wait_signal(peer, 10, 100);
    ADD_FAILURE() << "a signal nobody sent arrived";
  } catch (const DistributedError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank " + std::to_string(peer) + " did not answer"), std::string::npos) << m;
    EXPECT_NE(m.find("100 ms"), std::string::npos) << m;
  }
  h->barrier();
}

TEST(SymmetricMemory, NoSegmentNameOutlivesTheSetUp) {
  symm_mem::empty({1});  // the world is set up
  const std::string name = "/kiln-" + job_env().secret + "-" + std::to_string(me());
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  EXPECT_LT(fd, 0) << name << " is still in /dev/shm: another process of this user could map it";
}

// Rank r sends count(r, p) rows to rank p, each tagged (sender, receiver,
// row): every row must land at the offset out_splits_offsets gives, in rank
// order; zero-row sends included.
TEST(SymmetricMemory, AllToAllVdevDeliversRowsAndReportsSplitsAndOffsets) {
  const int W = world();
  auto count = [](int r, int p) { return static_cast<int64_t>((3 * r + 5 * p) % 4); };
  int64_t sent = 0, received = 0;
  for (int p = 0; p < W; ++p) sent += count(me(), p), received += count(p, me());
  // Symmetric buffers have one size on every rank: room for the most rows.
  Tensor in = symm_mem::empty({3 * W, 3}), out = symm_mem::empty({3 * W + 2, 3});
  Tensor splits = symm_mem::empty({W}, kInt64), so = symm_mem::empty({2, W}, kInt64);
  out.fill_(-1.0);
  int64_t row = 0;
  for (int p = 0; p < W; ++p) {
    splits.data_ptr<int64_t>()[p] = count(me(), p);
    for (int64_t k = 0; k < count(me(), p); ++k, ++row)
      for (int c = 0; c < 3; ++c) in.data_ptr<float>()[3 * row + c] = static_cast<float>(c == 0 ? me() : c == 1 ? p : k);
  }
  symm_mem::all_to_all_vdev(in, out, splits, so);
  int64_t at = 0;
  for (int p = 0; p < W; ++p) {
    EXPECT_EQ(so.data_ptr<int64_t>()[p], count(p, me())) << "split from rank " << p;
    EXPECT_EQ(so.data_ptr<int64_t>()[W + p], at) << "offset of rank " << p;
    for (int64_t k = 0; k < count(p, me()); ++k, ++at) {
      const float* r = out.data_ptr<float>() + 3 * at;
      EXPECT_TRUE(r[0] == p && r[1] == me() && r[2] == k) << "row " << at << ": " << r[0] << " " << r[1] << " " << r[2];
    }
  }
  EXPECT_EQ(out.data_ptr<float>()[3 * at], -1.0f) << "a row past the received ones was written";
  EXPECT_LE(sent, 3 * W);
  // Too small an output is an error on the receiving rank after the exchange (no hang).
  Tensor small = symm_mem::empty({1, 3});
  bool too_small = received > 1, refused = false;
  try {
    symm_mem::all_to_all_vdev(in, small, splits, so);
  } catch (const Error& e) {
    refused = std::string(e.what()).find("need") != std::string::npos;
  }
  EXPECT_EQ(refused, too_small);
}

// The expert-major form: E = 2 experts per rank, rank r sends count(r, p, e)
// rows for rank p's expert e; rank p's out holds, per local expert, the
// rows from ranks 0..W-1, each expert's block starting at a multiple of 4.
TEST(SymmetricMemory, AllToAllVdev2dLaysRowsOutExpertMajorWithAlignment) {
  const int W = world();
  const int64_t E = 2, align = 4;
  auto count = [](int r, int p, int64_t e) { return static_cast<int64_t>((r + 2 * p + 3 * e) % 3); };
  int64_t sent = 0;
  for (int p = 0; p < W; ++p)
    for (int64_t e = 0; e < E; ++e) sent += count(me(), p, e);
  Tensor in = symm_mem::empty({2 * W * E, 2}), out = symm_mem::empty({E * (align + 2 * W), 2});
  Tensor splits = symm_mem::empty({W * E}, kInt64), so = symm_mem::empty({2, E * W}, kInt64);
  int64_t row = 0;
  for (int p = 0; p < W; ++p)
    for (int64_t e = 0; e < E; ++e) {
      splits.data_ptr<int64_t>()[p * E + e] = count(me(), p, e);
      for (int64_t k = 0; k < count(me(), p, e); ++k, ++row) {
        in.data_ptr<float>()[2 * row] = static_cast<float>(100 * me() + 10 * p + e);
        in.data_ptr<float>()[2 * row + 1] = static_cast<float>(k);
      }
    }
  ASSERT_LE(sent, 2 * W * E);
  symm_mem::all_to_all_vdev_2d(in, out, splits, so, align);
  int64_t at = 0;
  for (int64_t e = 0; e < E; ++e) {
    at = (at + align - 1) / align * align;
    for (int r = 0; r < W; ++r) {
      EXPECT_EQ(so.data_ptr<int64_t>()[e * W + r], count(r, me(), e));
      EXPECT_EQ(so.data_ptr<int64_t>()[E * W + e * W + r], at);
      for (int64_t k = 0; k < count(r, me(), e); ++k, ++at) {
        EXPECT_EQ(out.data_ptr<float>()[2 * at], static_cast<float>(100 * r + 10 * me() + e)) << "row " << at;
        EXPECT_EQ(out.data_ptr<float>()[2 * at + 1], static_cast<float>(k)) << "row " << at;
      }
    }
  }
}
