// flip, roll, repeat, tile, repeat_interleave, movedim, take_along_dim, meshgrid and the
// composed products (outer, dot, addmm, addbmm, baddbmm, tensordot, kron)
// against float64 references computed element by element here, in several
// layouts, empty and 0-d; gradcheck; errors.
#include "test_util.h"

namespace kiln::test {
namespace {

// out[i] == f(multi-index of i) for every element.
void expect_each(const Tensor& out, const Shape& shape, const std::function<double(const std::vector<int64_t>&)>& f,
                 const std::string& what) {
  ASSERT_EQ(out.sizes(), shape) << what;
  std::vector<double> want;
  for (int64_t i = 0; i < out.numel(); ++i) want.push_back(f(unravel(i, shape)));
  expect_close(out, want, 1e-12, 1e-12, what);
}

void expect_gradcheck(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const std::string& what) {
  Tensor v = x.to(kFloat64).detach().requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; }, {v}))
      << what;
}

TEST(Rearrange, FlipRollRepeatTileMovedim) {
  manual_seed(80);
  for (Layout layout : all_layouts()) {
    const Tensor x = make_input({3, 4, 5}, layout, kFloat64);
    const std::string l = layout_name(layout);
    expect_each(flip(x, {0, -1}), {3, 4, 5}, [&](auto i) { return at_broadcast(x, {2 - i[0], i[1], 4 - i[2]}); }, "flip " + l);
    expect_each(roll(x, {1, -7}, {1, 2}), {3, 4, 5},
                [&](auto i) { return at_broadcast(x, {i[0], (i[1] + 3) % 4, (i[2] + 7) % 5}); }, "roll " + l);
    expect_each(roll(x, {4}), {3, 4, 5}, [&](auto i) {  // flattened
                  const int64_t flat = ((i[0] * 20 + i[1] * 5 + i[2]) - 4 + 60) % 60;
                  return at_broadcast(x, {flat / 20, flat / 5 % 4, flat % 5});
                }, "roll flat " + l);
    expect_each(repeat(x, {2, 1, 3, 2}), {2, 3, 12, 10}, [&](auto i) { return at_broadcast(x, {i[1], i[2] % 4, i[3] % 5}); },
                "repeat " + l);
    expect_each(tile(x, {2, 1}), {3, 8, 5}, [&](auto i) { return at_broadcast(x, {i[0], i[1] % 4, i[2]}); }, "tile " + l);
    expect_each(movedim(x, {0}, {2}), {4, 5, 3}, [&](auto i) { return at_broadcast(x, {i[2], i[0], i[1]}); }, "movedim " + l);
    expect_each(movedim(x, {-1, 0}, {0, 1}), {5, 3, 4}, [&](auto i) { return at_broadcast(x, {i[1], i[2], i[0]}); },
                "movedim two " + l);
  }
  // Empty, 0-d and size-1 dims; a new tensor even when nothing moves.
  EXPECT_EQ(flip(zeros({0, 3}), {0, 1}).sizes(), (Shape{0, 3}));
  EXPECT_EQ(roll(zeros({0}), {3}).numel(), 0);
  EXPECT_EQ(repeat(full({}, 2.0), {3}).sizes(), (Shape{3}));
  EXPECT_EQ(repeat(ones({2}), {0, 2}).sizes(), (Shape{0, 4}));
  const Tensor one = ones({1, 2});
  EXPECT_FALSE(flip(one, {0}).is_same(one));
  Tensor copy = roll(one, {2}, {1});
  copy.fill_(5.0);
  EXPECT_EQ(values(one), (std::vector<double>{1, 1}));
  const Tensor g = randn({3, 4});
  expect_gradcheck([](const Tensor& t) { return flip(t, {1}); }, g, "flip");
  expect_gradcheck([](const Tensor& t) { return roll(t, {2}, {1}); }, g, "roll");
  expect_gradcheck([](const Tensor& t) { return repeat(t, {2, 1, 2}); }, g, "repeat");
  expect_gradcheck([](const Tensor& t) { return movedim(t, {0}, {1}); }, g, "movedim");
  expect_error([&] { (void)flip(g, {0, -2}); }, {"flip", "more than once"});
  expect_error([&] { (void)flip(g, {2}); }, {"flip", "dim 2", "2-d"});
  expect_error([&] { (void)roll(g, {1, 2}, {0}); }, {"roll", "[1, 2]", "[0]"});
  expect_error([&] { (void)repeat(g, {2}); }, {"repeat", "[2]", "2 dims"});
  expect_error([&] { (void)repeat(g, {2, -1}); }, {"repeat", "non-negative"});
  expect_error([&] { (void)movedim(g, {0}, {1, 0}); }, {"movedim", "same length"});
}

TEST(Rearrange, RepeatInterleave) {
  manual_seed(81);
  // The source index along the repeated dim of each output index, from counts.
  auto sources = [](const std::vector<int64_t>& counts) {
    std::vector<int64_t> src;
    for (size_t i = 0; i < counts.size(); ++i) src.insert(src.end(), static_cast<size_t>(counts[i]), int64_t(i));
    return src;
  };
  for (Layout layout : all_layouts()) {
    const Tensor x = make_input({3, 4, 5}, layout, kFloat64);
    const std::string l = layout_name(layout);
    for (int64_t dim : {0, 1, -1}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Shape out = x.sizes();
      out[static_cast<size_t>(d)] *= 3;
      expect_each(
          repeat_interleave(x, 3, dim), out,
          [&](auto i) {
            i[static_cast<size_t>(d)] /= 3;
            return at_broadcast(x, i);
          },
          "int repeats dim " + std::to_string(dim) + " " + l);
      // Counts per slice, zeros among them.
      std::vector<int64_t> counts;
      for (int64_t k = 0; k < x.size(d); ++k) counts.push_back((k * 7 + 2) % 4);
      const std::vector<int64_t> src = sources(counts);
      out[static_cast<size_t>(d)] = static_cast<int64_t>(src.size());
      expect_each(
          repeat_interleave(x, tensor(counts), dim), out,
          [&](auto i) {
            i[static_cast<size_t>(d)] = src[static_cast<size_t>(i[static_cast<size_t>(d)])];
            return at_broadcast(x, i);
          },
          "tensor repeats dim " + std::to_string(dim) + " " + l);
    }
    // Without dim: x flattened (row-major, whatever its strides).
    expect_each(
        repeat_interleave(x, 2), {120},
        [&](auto i) {
          return at_broadcast(x, unravel(i[0] / 2, {3, 4, 5}));
        },
        "flattened " + l);
  }
  // The indices form, a one-entry count for every slice, int32 counts, 0-d, empty.
  EXPECT_EQ(values(repeat_interleave(tensor<int64_t>({2, 0, 1}))), (std::vector<double>{0, 0, 2}));
  EXPECT_EQ(repeat_interleave(tensor<int64_t>({2, 0, 1})).dtype(), kInt64);
  EXPECT_EQ(values(repeat_interleave(tensor<double>({1, 2}), tensor<int32_t>({2}))), (std::vector<double>{1, 1, 2, 2}));
  EXPECT_EQ(values(repeat_interleave(tensor<double>({1, 2}), tensor<int32_t>({0, 3}), 0, 3)),
            (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(values(repeat_interleave(full({}, 5.0), 3)), (std::vector<double>{5, 5, 5}));
  EXPECT_EQ(repeat_interleave(zeros({2, 0}), 4, 1).sizes(), (Shape{2, 0}));
  EXPECT_EQ(repeat_interleave(zeros({2, 3}), 0, 0).sizes(), (Shape{0, 3}));
  EXPECT_EQ(repeat_interleave(tensor<int64_t>(std::vector<int64_t>{})).numel(), 0);
  // A new tensor even with one repeat.
  const Tensor one = ones({2});
  Tensor copy = repeat_interleave(one, 1);
  copy.fill_(5.0);
  EXPECT_EQ(values(one), (std::vector<double>{1, 1}));
  // Gradients: each slice's copies summed.
  const Tensor g = randn({3, 4});
  expect_gradcheck([](const Tensor& t) { return repeat_interleave(t, 3, 1); }, g, "repeat_interleave int");
  expect_gradcheck(
      [](const Tensor& t) {
        return repeat_interleave(t, tensor<int64_t>({1, 0, 3}), 0);
      },
      g, "repeat_interleave tensor");
  expect_gradcheck([](const Tensor& t) { return repeat_interleave(t, 2); }, g, "repeat_interleave flattened");
  // By name, each overload.
  EXPECT_EQ(values(std::get<Tensor>(call_op("repeat_interleave", {tensor<int64_t>({1, 2})})[0])),
            (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(std::get<Tensor>(call_op("repeat_interleave", {g, IValue(int64_t{2})}, {{"dim", int64_t{0}}})[0]).sizes(),
            (Shape{6, 4}));
  EXPECT_EQ(
      std::get<Tensor>(call_op("repeat_interleave", {g, tensor<int64_t>({1, 0, 3})}, {{"dim", int64_t{0}}})[0]).sizes(),
      (Shape{4, 4}));
  expect_error([&] { (void)repeat_interleave(g, -1); }, {"repeat_interleave", "non-negative", "-1"});
  expect_error(
      [&] {
        (void)repeat_interleave(g, tensor<int64_t>({1, -2, 1}), 0);
      },
      {"repeat_interleave", "entry 1", "-2"});
  expect_error(
      [&] {
        (void)repeat_interleave(g, tensor<int64_t>({1, 2}), 0);
      },
      {"repeat_interleave", "3 entries", "[3, 4]", "[2]"});
  expect_error(
      [&] {
        (void)repeat_interleave(g, tensor<double>({1, 2, 3}), 0);
      },
      {"repeat_interleave", "int64", "float64"});
  expect_error([&] { (void)repeat_interleave(g, 2, 0, 5); }, {"repeat_interleave", "output_size 5", "6"});
  expect_error([&] { (void)repeat_interleave(g, 2, 2); }, {"repeat_interleave", "dim 2"});
}

TEST(Rearrange, TakeAlongDimAndMeshgrid) {
  manual_seed(81);
  const Tensor x = randn({3, 5}, kFloat64), idx = randint(0, 5, {3, 4}), col = randint(0, 3, {1, 5});
  expect_each(take_along_dim(x, idx, 1), {3, 4}, [&](auto i) { return at_broadcast(x, {i[0], static_cast<int64_t>(at_broadcast(idx, i))}); }, "rows");
  expect_each(take_along_dim(x, col, 0), {1, 5}, [&](auto i) { return at_broadcast(x, {static_cast<int64_t>(at_broadcast(col, i)), i[1]}); }, "cols");
  // The other dims broadcast: one index row for every row of x.
  const Tensor shared = randint(0, 5, {1, 2});
  expect_each(take_along_dim(x, shared, 1), {3, 2}, [&](auto i) { return at_broadcast(x, {i[0], static_cast<int64_t>(at_broadcast(shared, {0, i[1]}))}); },
              "broadcast");
  const Tensor flat = randint(0, 15, {6});
  expect_each(take_along_dim(x.t(), flat), {6}, [&](auto i) {
                const int64_t f = static_cast<int64_t>(at_broadcast(flat, i));
                return at_broadcast(x, {f % 3, f / 3});  // x.t() flattened row-major
              }, "flattened");
  expect_gradcheck([&](const Tensor& t) { return take_along_dim(t, idx, 1); }, x, "take_along_dim");
  expect_error([&] { (void)take_along_dim(x, idx.to(kFloat32), 1); }, {"take_along_dim", "integer", "float32"});
  expect_error([&] { (void)take_along_dim(x, randint(0, 3, {2, 5}), 1); }, {"take_along_dim", "[3, 5]", "[2, 5]"});

  const Tensor a = tensor<double>({1, 2, 3}), b = tensor<double>({10, 20});
  const auto ij = meshgrid({a, b});
  expect_each(ij[0], {3, 2}, [&](auto i) { return at_broadcast(a, {i[0]}); }, "ij 0");
  expect_each(ij[1], {3, 2}, [&](auto i) { return at_broadcast(b, {i[1]}); }, "ij 1");
  const auto xy = meshgrid({a, b, full({}, 7.0)}, "xy");
  expect_each(xy[0], {2, 3, 1}, [&](auto i) { return at_broadcast(a, {i[1]}); }, "xy 0");
  expect_each(xy[1], {2, 3, 1}, [&](auto i) { return at_broadcast(b, {i[0]}); }, "xy 1");
  expect_each(xy[2], {2, 3, 1}, [](auto) { return 7.0; }, "xy 2");
  expect_error([&] { (void)meshgrid({a, x}); }, {"meshgrid", "[3, 5]"});
  expect_error([&] { (void)meshgrid({a}, "yx"); }, {"meshgrid", "'yx'"});
}

TEST(Rearrange, ComposedProducts) {
  manual_seed(82);
  const Tensor u = randn({4}, kFloat64), v = randn({3}, kFloat64), w = randn({4}, kFloat64);
  expect_each(outer(u, v), {4, 3}, [&](auto i) { return at_broadcast(u, {i[0]}) * at_broadcast(v, {i[1]}); }, "outer");
  double d = 0;
  for (int64_t i = 0; i < 4; ++i) d += at_broadcast(u, {i}) * at_broadcast(w, {i});
  expect_close(dot(u, w), {d}, 1e-12, 1e-12, "dot");
  expect_close(vdot(u, w), {d}, 1e-12, 1e-12, "vdot");
  EXPECT_EQ(dot(zeros({0}), zeros({0})).item<double>(), 0.0);
  expect_error([&] { (void)dot(u, v); }, {"dot", "4", "3"});
  expect_error([&] { (void)dot(u, w.to(kFloat32)); }, {"dot", "float64", "float32"});
  expect_error([&] { (void)outer(u, v.view({3, 1})); }, {"outer", "1-D", "[3, 1]"});

  const Tensor m1 = make_input({3, 4}, Layout::Transposed, kFloat64), m2 = randn({4, 2}, kFloat64),
               in = randn({2}, kFloat64);  // broadcast over rows
  auto mm = [&](const Tensor& p, const Tensor& q, int64_t i, int64_t j, std::vector<int64_t> lead = {}) {
    double s = 0;
    for (int64_t k = 0; k < p.size(-1); ++k) {
      auto pi = lead, qi = lead;
      pi.insert(pi.end(), {i, k}), qi.insert(qi.end(), {k, j});
      s += at_broadcast(p, pi) * at_broadcast(q, qi);
    }
    return s;
  };
  expect_each(addmm(in, m1, m2, 0.5, 2.0), {3, 2}, [&](auto i) { return 0.5 * at_broadcast(in, {i[1]}) + 2 * mm(m1, m2, i[0], i[1]); }, "addmm");
  const Tensor nan_in = full({3, 2}, std::numeric_limits<double>::quiet_NaN());
  expect_each(addmm(nan_in, m1, m2, 0.0), {3, 2}, [&](auto i) { return mm(m1, m2, i[0], i[1]); }, "addmm beta 0 ignores NaN");
  const Tensor b1 = randn({2, 3, 4}, kFloat64), b2 = randn({2, 4, 5}, kFloat64), bin = randn({3, 5}, kFloat64);
  expect_each(baddbmm(bin, b1, b2, 2.0, -1.0), {2, 3, 5},
              [&](auto i) { return 2 * at_broadcast(bin, {i[1], i[2]}) - mm(b1, b2, i[1], i[2], {i[0]}); }, "baddbmm");
  expect_each(addbmm(bin, b1, b2), {3, 5},
              [&](auto i) { return at_broadcast(bin, i) + mm(b1, b2, i[0], i[1], {0}) + mm(b1, b2, i[0], i[1], {1}); }, "addbmm");
  expect_error([&] { (void)addmm(in, m1, m1); }, {"addmm", "[3, 4]", "cannot be multiplied"});
  expect_error([&] { (void)baddbmm(bin, b1, b1); }, {"baddbmm", "[2, 3, 4]"});

  // tensordot: a (2, 3, 4) with b (4, 3, 5) over a's dims (1, 2) and b's (1, 0).
  const Tensor ta = randn({2, 3, 4}, kFloat64), tb = make_input({4, 3, 5}, Layout::Strided, kFloat64);
  expect_each(tensordot(ta, tb, {1, 2}, {1, 0}), {2, 5}, [&](auto i) {
                double s = 0;
                for (int64_t j = 0; j < 3; ++j)
                  for (int64_t k = 0; k < 4; ++k) s += at_broadcast(ta, {i[0], j, k}) * at_broadcast(tb, {k, j, i[1]});
                return s;
              }, "tensordot");
  const Tensor tc = randn({4, 6}, kFloat64);
  expect_each(tensordot(ta, tc, 1), {2, 3, 6}, [&](auto i) {
                double s = 0;
                for (int64_t k = 0; k < 4; ++k) s += at_broadcast(ta, {i[0], i[1], k}) * at_broadcast(tc, {k, i[2]});
                return s;
              }, "tensordot int");
  expect_error([&] { (void)tensordot(ta, tb, {1}, {2}); }, {"tensordot", "differ in size", "3", "5"});
  expect_error([&] { (void)tensordot(ta, tc, 4); }, {"tensordot", "cannot contract 4"});

  const Tensor ka = randn({2, 3}, kFloat64), kb = randn({4}, kFloat64);
  expect_each(kron(ka, kb), {2, 12}, [&](auto i) { return at_broadcast(ka, {i[0], i[1] / 4}) * at_broadcast(kb, {i[1] % 4}); }, "kron");
  const Tensor g1 = randn({3, 2}), g2 = randn({2, 4});
  Tensor a = g1.to(kFloat64).requires_grad_(), b = g2.to(kFloat64).requires_grad_(), c = randn({4}, kFloat64).requires_grad_();
  auto grads = [&](const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> in, const char* what) {
    EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& v) { return std::vector<Tensor>{f(v)}; }, in)) << what;
  };
  grads([](auto& v) { return addmm(v[2], v[0], v[1], 0.5, 2.0); }, {a, b, c}, "addmm");
  grads([](auto& v) { return tensordot(v[0], v[1], 1); }, {a, b}, "tensordot");
  grads([](auto& v) { return kron(v[0], v[1]); }, {a, b}, "kron");
  grads([](auto& v) { return outer(v[0], v[1]); }, {c, randn({2}, kFloat64).requires_grad_()}, "outer");
}


TEST(Rearrange, PixelShuffleDiagEmbedCrossCdist) {
  manual_seed(84);
  auto grads = [](const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> in, const char* what) {
    EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& v) { return std::vector<Tensor>{f(v)}; }, in)) << what;
  };
  for (Layout layout : all_layouts()) {
    const std::string l = layout_name(layout);
    // pixel_shuffle (2, 2 * 4, 3, 5) with r = 2: out[n][c][h*2+i][w*2+j] = x[n][c*4+i*2+j][h][w].
    const Tensor x = make_input({2, 8, 3, 5}, layout, kFloat64);
    const Tensor ps = pixel_shuffle(x, 2);
    expect_each(ps, {2, 2, 6, 10}, [&](auto i) {
      return at_broadcast(x, {i[0], i[1] * 4 + (i[2] % 2) * 2 + i[3] % 2, i[2] / 2, i[3] / 2});
    }, "pixel_shuffle " + l);
    expect_close(pixel_unshuffle(ps, 2), values(x.contiguous()), 0, 0, "pixel_unshuffle " + l);
    // diag_embed of (3, 4) with offset 1 into planes (dim1 0, dim2 2): out[a][b][c] = x[b][a] where c == a + 1.
    const Tensor v = make_input({3, 4}, layout, kFloat64);
    expect_each(diag_embed(v, 1, 0, 2), {5, 3, 5}, [&](auto i) {
      return i[2] == i[0] + 1 && i[0] < 4 ? at_broadcast(v, {i[1], i[0]}) : 0.0;
    }, "diag_embed " + l);
    expect_each(diag_embed(v, -2), {3, 6, 6}, [&](auto i) {
      return i[1] == i[2] + 2 ? at_broadcast(v, {i[0], i[2]}) : 0.0;
    }, "diag_embed below " + l);
    // cross along dim 0 of (3, 4) with b broadcast from (3, 1).
    const Tensor a = make_input({3, 4}, layout, kFloat64), b = randn({3, 1}, kFloat64);
    expect_each(cross(a, b, 0), {3, 4}, [&](auto i) {
      const int64_t p = (i[0] + 1) % 3, q = (i[0] + 2) % 3;
      return at_broadcast(a, {p, i[1]}) * at_broadcast(b, {q, 0}) - at_broadcast(a, {q, i[1]}) * at_broadcast(b, {p, 0});
    }, "cross " + l);
    // cdist of (4, 3) rows against (5, 3) rows, p = 2 and 1.
    const Tensor c = make_input({4, 3}, layout, kFloat64), d = randn({5, 3}, kFloat64);
    for (double p : {2.0, 1.0})
      expect_each(cdist(c, d, p), {4, 5}, [&](auto i) {
        double s = 0;
        for (int64_t k = 0; k < 3; ++k) s += std::pow(std::abs(at_broadcast(c, {i[0], k}) - at_broadcast(d, {i[1], k})), p);
        return std::pow(s, 1 / p);
      }, "cdist " + l);
  }
  expect_close(diag(tensor(std::vector<double>{1, 2})), {1, 0, 0, 2}, 0, 0, "diag of a vector");
  expect_close(diag(arange(9.0).reshape({3, 3}), 1), {1, 5}, 0, 0, "diag of a matrix");
  EXPECT_EQ(diag_embed(empty({2, 0})).sizes(), (Shape{2, 0, 0}));
  EXPECT_EQ(cdist(empty({0, 3}), randn({2, 3})).sizes(), (Shape{0, 2}));
  grads([](auto& t) { return pixel_shuffle(t[0], 2); }, {randn({1, 4, 2, 3}, kFloat64).requires_grad_()}, "pixel_shuffle");
  grads([](auto& t) { return diag_embed(t[0], 1); }, {randn({2, 3}, kFloat64).requires_grad_()}, "diag_embed");
  grads([](auto& t) { return cross(t[0], t[1]); },
        {randn({2, 3}, kFloat64).requires_grad_(), randn({3}, kFloat64).requires_grad_()}, "cross");
  grads([](auto& t) { return cdist(t[0], t[1]); },
        {randn({3, 2}, kFloat64).requires_grad_(), randn({4, 2}, kFloat64).requires_grad_()}, "cdist");
  expect_error([] { pixel_shuffle(randn({1, 3, 2, 2}), 2); }, {"[pixel_shuffle]", "C * 4", "[1, 3, 2, 2]"});
  expect_error([] { pixel_unshuffle(randn({1, 1, 3, 4}), 2); }, {"[pixel_unshuffle]", "multiples of 2", "[1, 1, 3, 4]"});
  expect_error([] { diag(randn({2, 2, 2})); }, {"[diag]", "1-d or 2-d", "[2, 2, 2]"});
  expect_error([] { diag_embed(randn({3}), 0, 1, -1); }, {"[diag_embed]", "must differ"});
  expect_error([] { cross(randn({4}), randn({4})); }, {"[cross]", "size 3", "[4]"});
  expect_error([] { cdist(randn({2, 3}), randn({2, 4})); }, {"[cdist]", "[2, 3]", "[2, 4]"});
}
}  // namespace
}  // namespace kiln::test
