// `kiln demo`: a short tour of the op set, run by `make demo` until the
// training job exists. It checks a few identities as it goes, so a broken
// build shows up here too.
#include <chrono>
#include <iostream>

#include "commands.h"
#include "kiln/kiln.h"

namespace kiln::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_demo() {
  manual_seed(0);
  std::cout << "== tensors and views\n";
  Tensor a = arange(12, kFloat32).view({3, 4});
  std::cout << "a = arange(12).view({3, 4}):\n" << a << "\n";
  std::cout << "a.t():\n" << a.t() << "\n";
  std::cout << "a.slice(1, 0, 4, 2) (a view, step 2):\n" << a.slice(1, 0, 4, 2) << "\n";

  std::cout << "\n== broadcasting and type promotion\n";
  Tensor col = tensor<int32_t>({1, 2, 3}).view({3, 1});
  std::cout << "a + int32 column:\n" << a + col << "\n";
  std::cout << "int32 column / 2 (true division promotes):\n" << col / 2 << "\n";

  std::cout << "\n== reductions\n";
  std::cout << "a.sum({1}) = " << a.sum({1}) << "\n";
  std::cout << "var(a, {0}) = " << var(a, {0}) << "\n";
  auto [values, indices] = max(a, 1);
  std::cout << "max(a, 1) = " << values << ", indices " << indices << "\n";

  std::cout << "\n== nn functions\n";
  Tensor x = randn({2, 5});
  std::cout << "softmax(randn(2, 5), -1):\n" << softmax(x, -1) << "\n";
  std::cout << "layer_norm(...).mean(-1) ~ 0: " << layer_norm(x, {5}).mean({-1}) << "\n";
  std::cout << "gelu(tanh form):\n" << gelu(x, "tanh") << "\n";

  std::cout << "\n== matmul through OpenBLAS\n";
  const int64_t n = 1024;
  Tensor m1 = randn({n, n}), m2 = randn({n, n});
  auto t0 = std::chrono::steady_clock::now();
  Tensor prod = matmul(m1, m2);
  const double s = seconds_since(t0);
  std::cout << "1024x1024 matmul: " << 2.0 * n * n * n / s / 1e9 << " GFLOP/s\n";
  const double err = (matmul(m1, eye(n)) - m1).abs().max().item<double>();
  std::cout << "max |m1 @ I - m1| = " << err << "\n";

  std::cout << "\n== sampling\n";
  Tensor probs = softmax(tensor<float>({1.0f, 2.0f, 3.0f}), 0);
  std::cout << "multinomial(softmax([1, 2, 3]), 10, replacement) = " << multinomial(probs, 10, true) << "\n";
  auto [top, top_idx] = topk(x.view({-1}), 3);
  std::cout << "topk(x, 3) = " << top << " at " << top_idx << "\n";
  return err < 1e-5 ? 0 : 1;
}

}  // namespace

void add_demo(CLI::App& app, bool execute) {
  auto* cmd = app.add_subcommand("demo", "a short tour of the op set");
  cmd->callback([execute] {
    if (!execute) return;
    if (run_demo() != 0) throw CLI::RuntimeError("demo identity check failed", 1);
  });
}

}  // namespace kiln::cli
