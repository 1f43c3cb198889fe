// Data sets and the DataLoader: every sample once per epoch, orders from the
// seed, workers ahead of the consumer, errors and early exits.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "test_util.h"

namespace kiln::test {
namespace {

using data::DataLoader;
using data::DataLoaderOptions;
using data::Example;

// Sample i is (i as float32 [2] = {i, -i}, i as int64 0-dim).
std::shared_ptr<data::TensorDataset> numbered(int64_t n) {
  const Tensor i = arange(n, kInt64);
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{stack({i, -i}, 1).to(kFloat32), i});
}

// The sample numbers of every batch of one epoch, checking each batch's fields agree.
std::vector<std::vector<int64_t>> epoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const Example& b : loader) {
    EXPECT_EQ(b.size(), 2u);
    std::vector<int64_t> ids;
    for (double v : values(b[1])) ids.push_back(static_cast<int64_t>(v));
    std::vector<double> want;
    for (int64_t id : ids) want.push_back(static_cast<double>(id)), want.push_back(-static_cast<double>(id));
    EXPECT_EQ(values(b[0]), want);
    EXPECT_EQ(b[0].sizes(), (Shape{static_cast<int64_t>(ids.size()), 2}));
    out.push_back(ids);
  }
  return out;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

TEST(DataLoader, EverySampleOncePerEpochInOrderOrShuffled) {
  for (int workers : {0, 3}) {
    for (bool shuffle : {false, true}) {
      for (bool drop_last : {false, true}) {
        DataLoaderOptions o;
        o.batch_size = 4, o.shuffle = shuffle, o.drop_last = drop_last, o.num_workers = workers;
        DataLoader loader(numbered(11), o);
        EXPECT_EQ(loader.size(), drop_last ? 2 : 3);
        const auto batches = epoch(loader);
        ASSERT_EQ(static_cast<int64_t>(batches.size()), loader.size());
        EXPECT_EQ(batches.back().size(), drop_last ? 4u : 3u);
        auto all = flat(batches);
        if (!shuffle) {
          for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<int64_t>(i));
        }
        std::sort(all.begin(), all.end());
        EXPECT_EQ(std::unique(all.begin(), all.end()), all.end()) << "a sample came twice";
        if (!drop_last) {
          EXPECT_EQ(all.size(), 11u);
        }
      }
    }
  }
}

TEST(DataLoader, ShuffledOrdersComeFromTheSeed) {
  DataLoaderOptions o;
  o.batch_size = 5, o.shuffle = true;
  DataLoader loader(numbered(40), o);
  manual_seed(3);
  const auto a1 = flat(epoch(loader)), a2 = flat(epoch(loader));
  EXPECT_NE(a1, a2);  // each epoch its own order
  manual_seed(3);
  EXPECT_EQ(flat(epoch(loader)), a1);
  EXPECT_EQ(flat(epoch(loader)), a2);
  // A generator of the loader's own, with workers: the same orders again
  // from the same seed, and the default stream untouched.
  Generator g(17);
  o.generator = &g, o.num_workers = 2;
  DataLoader own(numbered(40), o);
  const Tensor before = get_rng_state();
  const auto b1 = flat(epoch(own));
  EXPECT_EQ(values(get_rng_state()), values(before));
  g.manual_seed(17);
  EXPECT_EQ(flat(epoch(own)), b1);
}

// get() sleeps: with workers the sleeps overlap, without they add up.
class SlowDataset : public data::Dataset {
 public:
  int64_t size() const override { return 12; }
  Example get(int64_t index) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    return {full({}, static_cast<double>(index))};
  }
};

TEST(DataLoader, WorkersBuildBatchesAhead) {
  auto seconds = [](int workers) {
    DataLoaderOptions o;
    o.batch_size = 1, o.num_workers = workers;
    DataLoader loader(std::make_shared<SlowDataset>(), o);
    const auto t0 = std::chrono::steady_clock::now();
    int64_t count = 0;
    for (const Example& b : loader) EXPECT_EQ(b[0].item<double>(), static_cast<double>(count++));
    EXPECT_EQ(count, 12);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double serial = seconds(0), parallel = seconds(4);
  EXPECT_GE(serial, 12 * 0.015);
  EXPECT_LT(parallel, 0.6 * serial) << "4 workers: " << parallel << " s, none: " << serial << " s";
}

TEST(DataLoader, LeavingAnEpochEarlyStopsTheWorkers) {
  std::atomic<int> gets{0};
  class Counting : public data::Dataset {
   public:
    explicit Counting(std::atomic<int>& n) : n_(n) {}
    int64_t size() const override { return 1000; }
    Example get(int64_t index) const override {
      ++n_;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return {full({}, static_cast<double>(index))};
    }
   private:
    std::atomic<int>& n_;
  };
  for (int round = 0; round < 20; ++round) {
    DataLoaderOptions o;
    o.batch_size = 2, o.num_workers = 3, o.prefetch_factor = 2;
    DataLoader loader(std::make_shared<Counting>(gets), o);
    int taken = 0;
    for (const Example& b : loader) {
      (void)b;
      if (++taken == 2) break;
    }
  }
  // Each round builds at most the 2 batches taken plus 3 * 2 ahead.
  EXPECT_LE(gets.load(), 20 * 2 * (2 + 3 * 2 + 1));
}

TEST(DataLoader, ErrorsReachTheConsumerAtTheirBatch) {
  class Failing : public data::Dataset {
   public:
    int64_t size() const override { return 10; }
    Example get(int64_t index) const override {
      check(index != 6, "Failing", "sample ", index, " is unreadable");
      return {full({}, 1.0)};
    }
  };
  for (int workers : {0, 2}) {
    DataLoaderOptions o;
    o.batch_size = 2, o.num_workers = workers;
    DataLoader loader(std::make_shared<Failing>(), o);
    int taken = 0;
    expect_error([&] { for (const Example& b : loader) (void)b, ++taken; }, {"Failing", "sample 6 is unreadable"});
    EXPECT_EQ(taken, 3);
  }
  // Samples that cannot be stacked name the field and both shapes.
  class Ragged : public data::Dataset {
   public:
    int64_t size() const override { return 2; }
    Example get(int64_t index) const override { return {zeros({index + 1})}; }
  };
  DataLoaderOptions o;
  o.batch_size = 2;
  DataLoader ragged(std::make_shared<Ragged>(), o);
  expect_error([&] { (void)ragged.begin(); }, {"default_collate", "field 0", "[2]", "[1]"});
  expect_error([] { DataLoaderOptions b; b.batch_size = 0; DataLoader l(numbered(3), b); }, {"DataLoader", "batch_size", "0"});
  expect_error([] { DataLoaderOptions b; b.num_workers = -1; DataLoader l(numbered(3), b); }, {"DataLoader", "num_workers"});
  expect_error([] { DataLoader l(nullptr); }, {"DataLoader", "data set"});
}

TEST(DataLoader, ACollateFunctionOfTheUsersOwn) {
  DataLoaderOptions o;
  o.batch_size = 3;
  o.collate_fn = [](const std::vector<Example>& samples) {  // concatenates the first fields, drops the rest
    std::vector<Tensor> firsts;
    for (const Example& s : samples) firsts.push_back(s[0]);
    return Example{cat(firsts, 0)};
  };
  DataLoader loader(numbered(5), o);
  std::vector<Shape> shapes;
  for (const Example& b : loader) shapes.push_back(b.at(0).sizes());
  EXPECT_EQ(shapes, (std::vector<Shape>{{6}, {4}}));
}

TEST(Datasets, TensorDatasetSubsetConcatAndRandomSplit) {
  auto d = numbered(10);
  EXPECT_EQ(d->size(), 10);
  EXPECT_EQ(values(d->get(3)[0]), (std::vector<double>{3, -3}));
  expect_error([&] { (void)d->get(10); }, {"TensorDataset", "index 10", "10 samples"});
  expect_error([] { data::TensorDataset t({zeros({3}), zeros({4, 2})}); }, {"TensorDataset", "[3]", "[4, 2]"});
  expect_error([] { data::TensorDataset t({zeros({})}); }, {"TensorDataset", "0-dim"});

  data::Subset s(d, {7, 2, 2});
  EXPECT_EQ(s.size(), 3);
  EXPECT_EQ(s.get(0)[1].item<int64_t>(), 7);
  expect_error([&] { data::Subset bad(d, {11}); }, {"Subset", "index 11"});

  data::ConcatDataset c({d, std::make_shared<data::Subset>(s)});
  EXPECT_EQ(c.size(), 13);
  EXPECT_EQ(c.get(9)[1].item<int64_t>(), 9);
  EXPECT_EQ(c.get(10)[1].item<int64_t>(), 7);
  EXPECT_EQ(c.get(12)[1].item<int64_t>(), 2);
  expect_error([&] { (void)c.get(13); }, {"ConcatDataset", "13"});

  Generator g(5);
  const auto parts = data::random_split(d, std::vector<int64_t>{6, 0, 4}, g);
  ASSERT_EQ(parts.size(), 3u);
  std::vector<int64_t> all;
  for (const auto& p : parts) all.insert(all.end(), p->indices().begin(), p->indices().end());
  EXPECT_EQ(parts[0]->size(), 6);
  EXPECT_EQ(parts[1]->size(), 0);
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], i);  // disjoint, covering
  g.manual_seed(5);
  EXPECT_EQ(data::random_split(d, std::vector<int64_t>{6, 0, 4}, g)[0]->indices(), parts[0]->indices());
  // Fractions: 10 * (0.33, 0.33, 0.34) = 3, 3, 3 and the remaining one to the first.
  const auto thirds = data::random_split(d, std::vector<double>{0.33, 0.33, 0.34}, g);
  EXPECT_EQ(thirds[0]->size(), 4);
  EXPECT_EQ(thirds[1]->size(), 3);
  EXPECT_EQ(thirds[2]->size(), 3);
  expect_error([&] { (void)data::random_split(d, std::vector<int64_t>{5, 4}, g); }, {"random_split", "sum to 9", "10 samples"});
  expect_error([&] { (void)data::random_split(d, std::vector<double>{0.5, 0.6}, g); }, {"random_split", "sum to 1.1"});
}

}  // namespace
}  // namespace kiln::test
