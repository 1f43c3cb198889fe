// Random programs for the differential test of kiln::compile (issue #24):
// graphs of elementwise, reduction, broadcast, view, GEMM, norm and in-place
// ops, with inputs that require grad or not, non-contiguous layouts, special
// values, detach, dead code, graph breaks and several outputs. Each program
// runs eagerly and compiled, and everything a user can observe must agree.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/compile.h"

namespace kiln::test {

// Dims are symbols so that one program can run at two sets of sizes
// (dynamic shapes): symbol 0 is always 1, the others are > 1 in every table.
constexpr int kSymbols = 5;
using SymShape = std::vector<int>;

struct InputSpec {
  SymShape shape;
  bool requires_grad = false;
  int layout = 0;        // 0 contiguous, 1 transposed (last two dims), 2 every other element, 3 expanded
  bool special = false;  // sprinkled with 0, -0, +-inf, NaN, huge and denormal values
};

enum class StepKind { Input, Unary, Binary, Scalar, Reduce, Transpose, Unsqueeze, Narrow, Expand, Reshape, Matmul, LayerNorm,
                      Softmax, InPlace, Detach, Break, Item };

struct Step {
  explicit Step(StepKind k) : kind(k) {}
  StepKind kind;
  int op = 0;           // which input / unary / binary / reduction / in-place op
  int a = -1, b = -1, c = -1;  // operand value ids (c: a norm's bias)
  int dim = 0;
  bool keepdim = false;
  double scalar = 0;
  SymShape shape;       // Expand's target / Reshape's
};

struct Program {
  uint64_t seed = 0;
  std::vector<InputSpec> inputs;
  std::vector<Step> steps;        // step i makes value i (InPlace, Break: the value it touched)
  std::vector<int> outputs;       // value ids returned
  std::vector<bool> loss_outputs; // which outputs the backward differentiates
  bool dynamic = false;
  std::string backend = "cpp";
  int64_t sizes[2][kSymbols];     // the two size tables
  // Symbol kSymbols + i is the product of products[i]'s two symbols (a flatten).
  std::vector<std::pair<int, int>> products;
  std::string to_string() const;
};

Program random_program(uint64_t seed);

// Runs the program eagerly and compiled (twice at table 0, and at table 1
// when dynamic) and returns how they differ: empty when they agree.
std::vector<std::string> differences(const Program& p);

}  // namespace kiln::test
