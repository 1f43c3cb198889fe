// The "symm" process group under `kiln run` (2 and 4 ranks): every
// collective against a reference each rank computes alone from every rank's
// inputs (seeded by rank), on odd sizes, every dtype, non-contiguous tensors,
// both all_reduce algorithms, and tensors larger than the scratch buffer.
#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>

#include "distributed/compare.h"
#include "kiln/distributed.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::distributed;

namespace {

// The backend under test: KILN_TEST_BACKEND (ctest runs this program
// with "auto", which is symm on one machine, and with "gloo").
std::string backend_under_test() {
  const char* b = std::getenv("KILN_TEST_BACKEND");
  return b && *b ? b : "auto";
}

ProcessGroup& group() {
  if (!is_initialized()) init_process_group(backend_under_test());
  return default_group();
}

// Whether the group has symm's all_reduce thresholds (alone, or inside the
// nodes of a job on several).
bool is_symm() { return group().backend() != "gloo"; }

Tensor data_of(int r, Shape sizes, DType dtype, uint64_t salt) {
  manual_seed(7000 * salt + r);
  if (dtype == kInt64) return randint(-1000, 1000, sizes);
  return randn(sizes).to(dtype);
}

// The reduction in float64 of every rank's data, rounded to dtype once.
Tensor reduced(Shape sizes, DType dtype, uint64_t salt, ReduceOp op) {
  Tensor acc;
  const int W = group().size();
  for (int r = 0; r < W; ++r) {
    Tensor x = data_of(r, sizes, dtype, salt).to(kFloat64);
    acc = !acc.defined() ? x : op == ReduceOp::Max ? maximum(acc, x) : op == ReduceOp::Min ? minimum(acc, x) : acc + x;
  }
  if (op == ReduceOp::Avg) acc = acc / static_cast<double>(W);
  return acc.to(dtype);
}

}  // namespace

TEST(ProcessGroup, AllReduceBothAlgorithmsEveryDTypeAndOp) {
  ProcessGroup& pg = group();
  const bool one_node = job_env().local_world_size == job_env().world_size;
  EXPECT_EQ(pg.backend(), backend_under_test() == "gloo" ? "gloo" : one_node ? "symm" : "symm+gloo");
  EXPECT_EQ(get_world_size(), job_env().world_size);
  EXPECT_EQ(get_rank(), job_env().rank);
  const size_t saved = pg.one_shot_max_bytes();
  uint64_t salt = 0;
  // symm: two-shot everywhere, then one-shot; gloo has one algorithm.
  const std::vector<size_t> thresholds = is_symm() ? std::vector<size_t>{0, size_t{1} << 30} : std::vector<size_t>{0};
  for (size_t one_shot_max : thresholds)
    for (DType dtype : {kFloat32, kFloat16, kBFloat16, kInt64})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
        if (dtype == kInt64 && op == ReduceOp::Avg) continue;
        for (Shape sizes : {Shape{}, Shape{1}, Shape{3}, Shape{17, 33}, Shape{0, 4}}) {
          if (is_symm()) pg.set_one_shot_max_bytes(one_shot_max);
          ++salt;
          Tensor x = data_of(pg.rank(), sizes, dtype, salt);
          pg.all_reduce(x, op);
          test::expect_matches(x, reduced(sizes, dtype, salt, op),
                      std::string("all_reduce ") + dtype_name(dtype) + " " + shape_str(sizes) + " one-shot up to " +
                          std::to_string(one_shot_max));
        }
      }
  if (is_symm()) {
    pg.set_one_shot_max_bytes(saved);
  } else {
    test::expect_error([&] { pg.set_one_shot_max_bytes(0); }, {"belongs to the symm backend"});
  }
}

TEST(ProcessGroup, AllReduceOfANonContiguousTensorWritesThroughTheView) {
  ProcessGroup& pg = group();
  Tensor base = data_of(pg.rank(), {6, 5}, kFloat32, 900);
  Tensor view = base.transpose(0, 1);  // [5, 6], not contiguous
  pg.all_reduce(view, ReduceOp::Sum);
  test::expect_matches(base, reduced({6, 5}, kFloat32, 900, ReduceOp::Sum), "transposed all_reduce");
}

TEST(ProcessGroup, AllReduceLargerThanTheScratchGoesInPieces) {
  // KILN_SYMM_SCRATCH_MB=1 in this test's environment: 1 MiB of scratch.
  ProcessGroup& pg = group();
  const int64_t n = (3 << 20) / 4 + 5;  // 3 MiB of float32 and a few
  Tensor x = data_of(pg.rank(), {n}, kFloat32, 901);
  pg.all_reduce(x, ReduceOp::Sum);
  test::expect_matches(x, reduced({n}, kFloat32, 901, ReduceOp::Sum), "3 MiB all_reduce");
  Tensor b = pg.rank() == 1 ? data_of(1, {n}, kFloat32, 902) : zeros({n});
  pg.broadcast(b, 1);
  test::expect_matches(b, data_of(1, {n}, kFloat32, 902), "3 MiB broadcast from rank 1");
}

TEST(ProcessGroup, AllGatherReduceScatterAndBroadcast) {
  ProcessGroup& pg = group();
  const int W = pg.size();
  for (DType dtype : {kFloat32, kBFloat16, kInt64}) {
    Tensor in = data_of(pg.rank(), {3, 7}, dtype, 910);
    Tensor out = empty({3 * W, 7}, dtype);
    pg.all_gather(out, in);
    for (int r = 0; r < W; ++r) test::expect_matches(out.slice(0, 3 * r, 3 * r + 3), data_of(r, {3, 7}, dtype, 910), "all_gather");

    Tensor big = data_of(pg.rank(), {2 * W, 5}, dtype, 911);
    Tensor mine = empty({2, 5}, dtype);
    pg.reduce_scatter(mine, big, ReduceOp::Sum);
    test::expect_matches(mine, reduced({2 * W, 5}, dtype, 911, ReduceOp::Sum).slice(0, 2 * pg.rank(), 2 * pg.rank() + 2),
                "reduce_scatter");

    Tensor b = data_of(pg.rank(), {4, 3}, dtype, 912);
    pg.broadcast(b, W - 1);
    test::expect_matches(b, data_of(W - 1, {4, 3}, dtype, 912), "broadcast");
  }
  Tensor wrong = empty({5, 7});
  test::expect_error([&] { pg.all_gather(wrong, randn({3, 7})); }, {"W times the input's rows"});
  test::expect_error([&] { pg.broadcast(wrong, W); }, {"rank " + std::to_string(W) + " is not in the group"});
  Tensor ints = zeros({2}, kInt64);
  test::expect_error([&] { pg.all_reduce(ints, ReduceOp::Avg); }, {"'avg' needs a floating dtype"});
}

// Rank r sends (r + p) % 3 + 1 rows to rank p: uneven splits, the rows
// tagged with sender and receiver so misplaced ones show.
TEST(ProcessGroup, AllToAllVDeliversEveryRowToItsRank) {
  ProcessGroup& pg = group();
  const int W = pg.size(), me = pg.rank();
  auto count = [](int from, int to) { return static_cast<int64_t>((from + to) % 3 + 1); };
  std::vector<int64_t> in_splits, out_splits;
  int64_t in_rows = 0, out_rows = 0;
  for (int p = 0; p < W; ++p) {
    in_splits.push_back(count(me, p));
    out_splits.push_back(count(p, me));
    in_rows += in_splits.back();
    out_rows += out_splits.back();
  }
  Tensor in = empty({in_rows, 2});
  int64_t row = 0;
  for (int p = 0; p < W; ++p)
    for (int64_t k = 0; k < count(me, p); ++k, ++row) {
      in.data_ptr<float>()[2 * row] = static_cast<float>(100 * me + p);
      in.data_ptr<float>()[2 * row + 1] = static_cast<float>(k);
    }
  Tensor out = full({out_rows, 2}, -1.0);
  pg.all_to_all_v(out, in, out_splits, in_splits);
  row = 0;
  for (int p = 0; p < W; ++p)
    for (int64_t k = 0; k < count(p, me); ++k, ++row) {
      EXPECT_EQ(out.data_ptr<float>()[2 * row], static_cast<float>(100 * p + me)) << "row " << row;
      EXPECT_EQ(out.data_ptr<float>()[2 * row + 1], static_cast<float>(k)) << "row " << row;
    }
  // Splits that disagree are an error on the receiving rank, not a hang.
  std::vector<int64_t> bad = out_splits;
  bad[0] += 1;
  Tensor out2 = empty({out_rows + 1, 2});
  test::expect_error([&] { pg.all_to_all_v(out2, in, bad, in_splits); }, {"which expects"});
}

TEST(ProcessGroup, SendAndRecvAroundTheRing) {
  ProcessGroup& pg = group();
  const int W = pg.size(), me = pg.rank();
  for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{(1 << 20) / 4 * 3 + 1}}) {  // empty, small, 3 MiB
    Tensor mine = data_of(me, {n}, kFloat32, 920), got = empty({n});
    if (me % 2 == 0) {
      pg.send(mine, (me + 1) % W);
      pg.recv(got, (me - 1 + W) % W);
    } else {
      pg.recv(got, (me - 1 + W) % W);
      pg.send(mine, (me + 1) % W);
    }
    test::expect_matches(got, data_of((me - 1 + W) % W, {n}, kFloat32, 920), "recv of " + std::to_string(n));
  }
  test::expect_error([&] { pg.send(zeros({1}), me); }, {"cannot send to itself"});
  pg.barrier();
}

// Two Linear layers; each rank trains on its own data. After one backward
// under DistributedDataParallel every rank's gradients are the mean of what
// each rank's data gives alone (computed here on a copy of the model, for
// every rank's data), with buckets small enough that there are several.
TEST(DistributedDataParallel, GradientsAreTheMeanOverRanksAndParametersStartEqual) {
  ProcessGroup& pg = group();
  const int W = pg.size();
  manual_seed(100 + pg.rank());  // different initial weights: DDP must broadcast rank 0's
  nn::Linear l1(7, 9), l2(9, 3);
  struct Net : nn::Module {
    nn::Linear& a;
    nn::Linear& b;
    Net(nn::Linear& a, nn::Linear& b) : a(a), b(b) {
      register_module("a", &a);
      register_module("b", &b);
    }
  } net(l1, l2);
  nn::DistributedDataParallel ddp(net, pg, /*bucket_cap_mb=*/64.0 / (1 << 20));  // 64 bytes: a bucket per tensor or so
  EXPECT_GT(ddp.num_buckets(), 2u);
  manual_seed(100);
  nn::Linear r1(7, 9), r2(9, 3);  // rank 0's initial weights
  for (auto [p, q] : {std::pair{l1.weight, r1.weight}, {l1.bias, r1.bias}, {l2.weight, r2.weight}, {l2.bias, r2.bias}})
    test::expect_matches(p, q, "parameter after construction");
  auto loss_on = [](nn::Linear& a, nn::Linear& b, int r) {
    const Tensor x = data_of(r, {5, 7}, kFloat32, 930);
    return (tanh(b(relu(a(x)))) * data_of(r, {5, 3}, kFloat32, 931)).sum();
  };
  for (int step = 0; step < 2; ++step) {  // the second backward reuses the buckets
    for (nn::Linear* m : {&l1, &l2, &r1, &r2}) {
      m->weight.set_grad(Tensor());
      m->bias.set_grad(Tensor());
    }
    loss_on(l1, l2, pg.rank()).backward();
    for (int r = 0; r < W; ++r) (loss_on(r1, r2, r) / static_cast<double>(W)).backward();
    for (auto [p, q] : {std::pair{l1.weight, r1.weight}, {l1.bias, r1.bias}, {l2.weight, r2.weight}, {l2.bias, r2.bias}})
      test::expect_matches(p.grad(), q.grad(), "gradient");
  }
}

// nn::MoE with its experts on every rank (2 per rank) against the same layer
// with every expert in one process: rank r's output, its input's and its
// router's gradients equal the single-process layer's on rank r's tokens;
// each local expert's gradient equals the single-process one summed over
// every rank's tokens (they all came to it). The token exchange is
// all_to_all_v both ways, forward and backward.
TEST(MoE, ShardedExpertsGiveTheSingleProcessResultsAndGradients) {
  ProcessGroup& pg = group();
  const int W = pg.size(), me = pg.rank();
  const int64_t E = 2 * W, C = 6, H = 10, k = 2;
  manual_seed(500);
  nn::MoE moe(C, E, k, H, &pg);
  EXPECT_EQ(moe.experts.size(), 2u);
  EXPECT_EQ(moe.first_local_expert(), 2 * me);
  auto tokens = [](int r) { return data_of(r, {3, 5, C}, kFloat32, 940); };
  auto loss_weights = [](int r) { return data_of(r, {3, 5, C}, kFloat32, 941); };

  Tensor x = tokens(me).requires_grad_();
  Tensor y = moe(x);
  (y * loss_weights(me)).sum().backward();

  manual_seed(500);
  nn::MoE mine(C, E, k, H);  // every expert here; this rank's tokens only
  Tensor xr = tokens(me).requires_grad_();
  Tensor yr = mine(xr);
  (yr * loss_weights(me)).sum().backward();
  test::expect_matches(y.detach(), yr.detach(), "MoE output");
  test::expect_matches(x.grad(), xr.grad(), "input gradient");
  test::expect_matches(moe.router.weight.grad(), mine.router.weight.grad(), "router gradient");

  manual_seed(500);
  nn::MoE all(C, E, k, H);  // every rank's tokens
  for (int r = 0; r < W; ++r) (all(tokens(r)) * loss_weights(r)).sum().backward();
  for (size_t j = 0; j < moe.experts.size(); ++j) {
    const nn::Expert& got = *moe.experts[j];
    const nn::Expert& want = *all.experts[moe.first_local_expert() + j];
    test::expect_matches(got.up.weight, want.up.weight, "expert weights as initialised");
    test::expect_matches(got.up.weight.grad(), want.up.weight.grad(), "expert up.weight gradient");
    test::expect_matches(got.down.bias.grad(), want.down.bias.grad(), "expert down.bias gradient");
  }
  // The expert parameters are the ones data parallelism leaves local.
  int local = 0;
  for (auto& [name, p] : moe.named_parameters()) local += nn::MoE::is_expert_parameter(name);
  EXPECT_EQ(local, 8);  // 2 experts x (up, down) x (weight, bias)
}

// A model of a router-and-experts layer trained data-parallel with its
// experts sharded: DistributedDataParallel averages the router and leaves
// the experts local; the loss falls on every rank.
TEST(MoE, TrainsDataParallelWithShardedExperts) {
  ProcessGroup& pg = group();
  const int W = pg.size();
  const int64_t C = 8;
  manual_seed(600);
  nn::MoE moe(C, 2 * W, 2, 16, &pg);
  nn::DistributedDataParallel ddp(moe, pg, 25.0, nn::MoE::is_expert_parameter);
  optim::AdamWOptions o;
  o.lr = 1e-2;
  optim::AdamW opt(moe.parameters(), o);
  manual_seed(700);
  const Tensor target_map = randn({C, C}) * 0.5;
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    const Tensor x = data_of(pg.rank(), {32, C}, kFloat32, 1000 + step);
    Tensor loss = nn::mse_loss(moe(x), tanh(matmul(x, target_map)));
    opt.zero_grad();
    loss.backward();
    opt.step();
    Tensor l = full({1}, loss.item<double>());
    pg.all_reduce(l, ReduceOp::Avg);
    (step == 0 ? first : last) = l.item<double>();
  }
  EXPECT_LT(last, 0.5 * first) << "loss " << first << " -> " << last;
}

// Each collective is a dispatcher op (c10d::...): a mode sees it, the
// profiler times it, and kiln::compile ends its graph there, running the
// collective eagerly in program order (fullgraph: an error naming it).
TEST(ProcessGroup, CollectivesAreDispatcherOpsThatCompileRunsEagerly) {
  ProcessGroup& pg = group();
  struct Seen : DispatchMode {
    std::vector<std::string> names;
    std::vector<Tensor> on_op(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs,
                              std::span<const Tensor> out) override {
      names.push_back(op.name);
      return dispatch(op, in, attrs, out);
    }
  } seen;
  Tensor t = ones({4});
  {
    ModeGuard guard(&seen);
    pg.all_reduce(t);
    pg.barrier();
  }
  EXPECT_EQ(seen.names, (std::vector<std::string>{"c10d::allreduce_", "c10d::barrier"}));

  profiler::reset();
  profiler::enable(true);
  Tensor p = ones({5});
  pg.all_reduce(p);
  profiler::enable(false);
  bool timed = false;
  for (const auto& s : profiler::op_stats()) timed = timed || s.key.rfind("c10d::allreduce_ [5]", 0) == 0;
  EXPECT_TRUE(timed) << profiler::summary();

  // (x * 2) all-reduced, then + 1: two graphs around the collective; the
  // result equals eager's on every call.
  auto step = [&pg](const Tensor& x) {
    Tensor y = x * 2.0;
    pg.all_reduce(y);
    return y + 1.0;
  };
  auto compiled = compile(step);
  for (int call = 0; call < 2; ++call) {
    const Tensor x = data_of(pg.rank(), {6}, kFloat32, 950 + call);
    test::expect_matches(compiled(x), reduced({6}, kFloat32, 950 + call, ReduceOp::Sum) * 2.0 + 1.0, "compiled step");
  }
  CompileOptions full;
  full.fullgraph = true;
  auto whole = compile(step, full);
  test::expect_error([&] { whole(ones({6})); }, {"graph break: collective 'c10d::allreduce_'"});
  pg.barrier();  // the refused call ran no collective on any rank
}
