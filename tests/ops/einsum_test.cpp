// einsum against loops over every index assignment in float64, for the
// common forms (matmul, batch matmul, outer, trace, diagonal, transpose,
// sums, bilinear), "..." broadcasting, size-1 broadcasting, implicit output;
// gradcheck; errors.
#include <functional>
#include <map>

#include "test_util.h"

namespace kiln::test {
namespace {

// The reference: sums, over every assignment of the subscripts' values, the
// product of the operands' elements, into the output's element. Letters only.
std::vector<double> einsum_ref(const std::string& lhs, const std::string& out, const std::vector<Tensor>& ops) {
  std::vector<std::string> terms;
  std::string cur;
  for (char ch : lhs) {
    if (ch == ',') terms.push_back(cur), cur.clear();
    else cur += ch;
  }
  terms.push_back(cur);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = std::max(size[terms[i][d]], ops[i].size(d));
  std::vector<char> letters;
  for (const auto& [c, n] : size) letters.push_back(c);
  int64_t out_n = 1;
  for (char c : out) out_n *= size[c];
  std::vector<double> result(static_cast<size_t>(out_n), 0.0);
  std::map<char, int64_t> at;
  std::function<void(size_t)> visit = [&](size_t k) {
    if (k == letters.size()) {
      double p = 1;
      for (size_t i = 0; i < terms.size(); ++i) {
        std::vector<int64_t> idx;
        for (size_t d = 0; d < terms[i].size(); ++d) idx.push_back(ops[i].size(d) == 1 ? 0 : at[terms[i][d]]);
        p *= at_broadcast(ops[i], idx);
      }
      int64_t o = 0;
      for (char c : out) o = o * size[c] + at[c];
      result[static_cast<size_t>(o)] += p;
      return;
    }
    for (int64_t v = 0; v < size[letters[k]]; ++v) at[letters[k]] = v, visit(k + 1);
  };
  visit(0);
  return result;
}

TEST(Einsum, CommonFormsMatchLoops) {
  manual_seed(7101);
  struct Case {
    std::string eq;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}},         {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"i,j->ij", {{3}, {4}}},                 {"ii->", {{4, 4}}},
      {"ii->i", {{4, 4}}},                     {"ij->ji", {{3, 5}}},
      {"ijk->j", {{2, 3, 4}}},                 {"ij,ij->", {{3, 4}, {3, 4}}},
      {"bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}}, {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}},
      {"iij->ij", {{3, 3, 2}}},                {"i,i->i", {{5}, {5}}},
      {"ij,kj->ik", {{3, 1}, {2, 4}}},          {"bij,jk->bik", {{1, 3, 4}, {4, 2}}},
      {"ab,ab,ab->a", {{3, 2}, {3, 2}, {1, 2}}}, {"i->", {{0}}},
      {"ij,jk->ik", {{3, 0}, {0, 2}}},
  };
  for (const Case& c : cases)
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      std::vector<Tensor> ops;
      for (const Shape& s : c.shapes) ops.push_back(make_input(s, layout, kFloat64));
      const size_t arrow = c.eq.find("->");
      expect_close(einsum(c.eq, ops), einsum_ref(c.eq.substr(0, arrow), c.eq.substr(arrow + 2), ops), 1e-12, 1e-12,
                   c.eq + " " + layout_name(layout));
    }
  // Implicit output: the subscripts used once, in ASCII order (B before a).
  const Tensor a = randn({3, 4}, kFloat64), b = randn({4, 2}, kFloat64);
  expect_close(einsum("ij,jk", {a, b}), values(mm(a, b)), 1e-12, 1e-12, "implicit matmul");
  expect_close(einsum("ba", {a}), values(a.t()), 0, 0, "implicit: a then b, so a transpose");
  EXPECT_EQ(einsum("aB", {a}).sizes(), (Shape{4, 3}));
  // "..." broadcasting: batch dims on the left, broadcast between operands.
  const Tensor x = randn({2, 1, 3, 4}, kFloat64), y = randn({5, 4, 2}, kFloat64);
  expect_close(einsum("...ij,...jk->...ik", {x, y}), values(matmul(x, y)), 1e-12, 1e-12, "ellipsis batch matmul");
  const Tensor stack = randn({2, 3, 3}, kFloat64);
  expect_close(einsum("...ii->...i", {stack}), values(diagonal(stack, 0, 1, 2)), 0, 0, "ellipsis diagonal");
  expect_close(einsum("i...->...", {x.reshape({2, 12})}), values(sum(x.reshape({2, 12}), {0})), 1e-12, 1e-12,
               "ellipsis sum");
  // float32 with float64 promotes; integers work.
  EXPECT_EQ(einsum("i,i->", {randn({3}), randn({3}, kFloat64)}).dtype(), kFloat64);
  EXPECT_EQ(einsum("ij->", {arange(6).reshape({2, 3})}).item<int64_t>(), 15);
}

TEST(Einsum, Gradients) {
  manual_seed(7102);
  const Tensor a = randn({2, 3}, kFloat64).requires_grad_(), b = randn({4, 3, 5}, kFloat64).requires_grad_();
  const Tensor c = randn({2, 5}, kFloat64).requires_grad_(), d = randn({3, 3}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& t) { return std::vector<Tensor>{einsum("bn,anm,bm->ba", t)}; }, {a, b, c}));
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& t) { return std::vector<Tensor>{einsum("ii,ij->j", t)}; }, {d, a.t().contiguous().detach().requires_grad_()}));
}

TEST(Einsum, Errors) {
  const Tensor m = randn({3, 4});
  expect_error([&] { einsum("ij,jk->ik", {m}); }, {"[einsum]", "2 terms for 1 operands"});
  expect_error([&] { einsum("ijk->i", {m}); }, {"[einsum]", "'ijk' has 3 subscripts", "2 dims"});
  expect_error([&] { einsum("ij->iz", {m}); }, {"[einsum]", "appears in no operand"});
  expect_error([&] { einsum("ij->ii", {m}); }, {"[einsum]", "appears twice"});
  expect_error([&] { einsum("i1->i", {m}); }, {"[einsum]", "'1' is not a subscript"});
  expect_error([&] { einsum("ij,jk->ik", {m, randn({3, 2})}); }, {"[einsum]", "4 and 3", "do not broadcast"});
  expect_error([&] { einsum("..i..->i", {m}); }, {"[einsum]", "'...'"});
  expect_error([] { einsum("i->i", {}); }, {"[einsum]", "at least one operand"});
}

}  // namespace
}  // namespace kiln::test
