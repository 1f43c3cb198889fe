// einsum: Einstein summation as PyTorch's torch.einsum (explicit "->" or
// implicit output, "..." broadcast dims, repeated subscripts as diagonals,
// size-1 dims broadcasting). A composite: per operand, diagonals and sums of
// the subscripts no one else needs; then operands combined left to right,
// each pair as one batched matmul (batch, kept, contracted dims); autograd
// and kiln::compile come from those ops.
#include <algorithm>
#include <cctype>
#include <map>
#include <string>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "ops/boxing.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

constexpr const char* kOp = "einsum";
constexpr int kEllipsisBase = 52;  // label ids: A-Z 0..25, a-z 26..51 (ASCII order), "..." dims after

using Labels = std::vector<int>;

struct Term {
  Tensor t;
  Labels labels;  // one per dim of t
};

// One side of the equation: letters and at most one "...", as label ids;
// the "..." stands for `ellipsis_dims` ids, right-aligned among `total`.
Labels parse_term(const std::string& term, int64_t ndim, int64_t total_ellipsis, bool is_output,
                  const std::string& equation) {
  Labels out;
  bool seen_ellipsis = false;
  int64_t letters = 0;
  for (char ch : term) letters += std::isalpha(static_cast<unsigned char>(ch)) ? 1 : 0;
  for (size_t i = 0; i < term.size(); ++i) {
    const char ch = term[i];
    if (ch == '.') {
      check(term.compare(i, 3, "...") == 0 && !seen_ellipsis, kOp, "'", equation,
            "': '.' must come as one '...' per term");
      seen_ellipsis = true;
      const int64_t k = is_output ? total_ellipsis : ndim - letters;
      for (int64_t e = total_ellipsis - k; e < total_ellipsis; ++e) out.push_back(kEllipsisBase + static_cast<int>(e));
      i += 2;
    } else {
      check(std::isalpha(static_cast<unsigned char>(ch)), kOp, "'", equation, "': '", std::string(1, ch),
            "' is not a subscript (letters a-z, A-Z)");
      out.push_back(std::isupper(static_cast<unsigned char>(ch)) ? ch - 'A' : 26 + (ch - 'a'));
    }
  }
  if (!is_output)
    check(static_cast<int64_t>(out.size()) == ndim, kOp, "'", equation, "': the term '", term, "' has ", out.size(),
          " subscripts for an operand of ", ndim, " dims");
  return out;
}

bool has(const Labels& l, int x) { return std::find(l.begin(), l.end(), x) != l.end(); }

// Takes the diagonal of every repeated subscript.
void fold_repeats(Term& term) {
  for (size_t p = 0; p < term.labels.size(); ++p)
    for (size_t q = p + 1; q < term.labels.size(); ++q)
      if (term.labels[p] == term.labels[q]) {
        const int label = term.labels[p];
        term.t = diagonal(term.t, 0, static_cast<int64_t>(p), static_cast<int64_t>(q));  // the diagonal goes last
        term.labels.erase(term.labels.begin() + static_cast<std::ptrdiff_t>(q));
        term.labels.erase(term.labels.begin() + static_cast<std::ptrdiff_t>(p));
        term.labels.push_back(label);
        p = static_cast<size_t>(-1);  // start over: positions moved
        break;
      }
}

// Sums the dims whose subscripts are not in `keep`.
void sum_unkept(Term& term, const Labels& keep) {
  Shape dims;
  Labels left;
  for (size_t d = 0; d < term.labels.size(); ++d) {
    if (has(keep, term.labels[d])) left.push_back(term.labels[d]);
    else dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return;
  term.t = sum(term.t, dims);
  term.labels = left;
}

int64_t size_of(const Term& term, int label) {
  const auto it = std::find(term.labels.begin(), term.labels.end(), label);
  return term.t.size(it - term.labels.begin());
}

// term's dims in the order of `order`, each expanded to sizes[label] (size-1
// broadcasting), as one tensor of shape (product of each group).
Tensor arrange(const Term& term, const std::vector<Labels>& groups, const std::map<int, int64_t>& sizes) {
  Shape perm, expanded, grouped;
  for (const Labels& g : groups) {
    int64_t n = 1;
    for (int label : g) {
      perm.push_back(std::find(term.labels.begin(), term.labels.end(), label) - term.labels.begin());
      expanded.push_back(sizes.at(label));
      n *= sizes.at(label);
    }
    grouped.push_back(n);
  }
  return term.t.permute(perm).expand(expanded).reshape(grouped);
}

// a and b contracted over their shared subscripts not in keep: one matmul of
// (batch, a's own, shared) by (batch, shared, b's own).
Term combine(Term a, Term b, const Labels& keep) {
  Labels keep_a = keep, keep_b = keep;
  keep_a.insert(keep_a.end(), b.labels.begin(), b.labels.end());
  keep_b.insert(keep_b.end(), a.labels.begin(), a.labels.end());
  sum_unkept(a, keep_a);
  sum_unkept(b, keep_b);
  Labels batch, contracted, own_a, own_b;
  std::map<int, int64_t> sizes;
  for (int l : a.labels) {
    sizes[l] = size_of(a, l);
    if (!has(b.labels, l)) own_a.push_back(l);
    else (has(keep, l) ? batch : contracted).push_back(l);
  }
  for (int l : b.labels) {
    const int64_t n = size_of(b, l);
    if (!has(a.labels, l)) own_b.push_back(l), sizes[l] = n;
    else {
      check(sizes[l] == n || sizes[l] == 1 || n == 1, kOp, "subscript sizes ", sizes[l], " and ", n,
            " do not broadcast");
      sizes[l] = std::max(sizes[l], n);
    }
  }
  const Tensor ta = arrange(a, {batch, own_a, contracted}, sizes);
  const Tensor tb = arrange(b, {batch, contracted, own_b}, sizes);
  Shape out_sizes;
  Labels out_labels;
  for (const Labels* g : {&batch, &own_a, &own_b})
    for (int l : *g) out_sizes.push_back(sizes[l]), out_labels.push_back(l);
  return Term{matmul(ta, tb).reshape(out_sizes), out_labels};
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  check(!operands.empty(), kOp, "expected at least one operand");
  std::string eq;
  for (char ch : equation)
    if (!std::isspace(static_cast<unsigned char>(ch))) eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  check(terms.size() == operands.size(), kOp, "'", equation, "' has ", terms.size(), " terms for ", operands.size(),
        " operands");
  // The "..." of every term stand for the same dims, right-aligned.
  int64_t total_ellipsis = 0;
  for (size_t i = 0; i < terms.size(); ++i)
    if (terms[i].find("...") != std::string::npos) {
      int64_t letters = 0;
      for (char ch : terms[i]) letters += std::isalpha(static_cast<unsigned char>(ch)) ? 1 : 0;
      check(operands[i].dim() >= letters, kOp, "'", equation, "': the term '", terms[i], "' has more subscripts than ",
            "its operand's ", operands[i].dim(), " dims");
      total_ellipsis = std::max(total_ellipsis, operands[i].dim() - letters);
    }
  std::vector<Term> ts;
  const DType dtype = result_type(operands);
  std::map<int, int> count;
  for (size_t i = 0; i < terms.size(); ++i) {
    ts.push_back(Term{operands[i].to(dtype), parse_term(terms[i], operands[i].dim(), total_ellipsis, false, equation)});
    for (int l : ts.back().labels) ++count[l];
  }
  Labels output;
  if (arrow != std::string::npos) {
    output = parse_term(eq.substr(arrow + 2), 0, total_ellipsis, true, equation);
    for (size_t i = 0; i < output.size(); ++i) {
      check(count.count(output[i]), kOp, "'", equation, "': an output subscript appears in no operand");
      check(std::count(output.begin(), output.end(), output[i]) == 1, kOp, "'", equation,
            "': an output subscript appears twice");
    }
  } else {
    for (int e = 0; e < total_ellipsis; ++e) output.push_back(kEllipsisBase + e);
    for (const auto& [l, c] : count)
      if (c == 1 && l < kEllipsisBase) output.push_back(l);
  }
  // Every operand alone: diagonals, then sums of what no one else needs.
  for (size_t i = 0; i < ts.size(); ++i) {
    fold_repeats(ts[i]);
    Labels keep = output;
    for (size_t j = 0; j < ts.size(); ++j)
      if (j != i) keep.insert(keep.end(), ts[j].labels.begin(), ts[j].labels.end());
    sum_unkept(ts[i], keep);
  }
  Term acc = ts[0];
  for (size_t i = 1; i < ts.size(); ++i) {
    Labels keep = output;
    for (size_t j = i + 1; j < ts.size(); ++j) keep.insert(keep.end(), ts[j].labels.begin(), ts[j].labels.end());
    acc = combine(acc, ts[i], keep);
  }
  sum_unkept(acc, output);
  Shape perm;
  for (int l : output) perm.push_back(std::find(acc.labels.begin(), acc.labels.end(), l) - acc.labels.begin());
  return acc.t.permute(perm).contiguous();
}

namespace {
const bool registered = [] {
  ops::def<&einsum>("einsum(str equation, Tensor[] tensors) -> Tensor");
  return true;
}();
}  // namespace

}  // namespace kiln
