// The byte-level tokenizer and TextDataset: documents are deduplicated
// (fortune files repeat some fortunes verbatim) and split into train and
// validation, whole or by position (see io.h), so validation text is never
// seen in training.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string_view>

#include "io/files.h"
#include "kiln/error.h"
#include "kiln/io.h"

namespace kiln::io {

std::vector<int64_t> encode(const std::string& text) {
  std::vector<int64_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string decode(const std::vector<int64_t>& tokens) {
  std::string out;
  out.reserve(tokens.size());
  for (int64_t t : tokens) {
    check(t >= 0 && t < 256, "decode", "token ", t, " is outside the byte vocabulary [0, 256)");
    out.push_back(static_cast<char>(t));
  }
  return out;
}

std::string read_file(const std::string& path) {
  const detail::RegularFile file(path, "read_file");
  std::string out(file.size(), '\0');
  file.read_all(out.data(), path, "read_file");
  return out;
}

namespace {

// The separator to split at: the given one, else "%" if some line is exactly
// "%" (fortune files), else none (one document).
std::string separator_for(const std::string& text, const std::string& given) {
  if (!given.empty()) return given;
  const bool fortune = text.rfind("%\n", 0) == 0 || text.find("\n%\n") != std::string::npos ||
                       (text.size() >= 2 && text.compare(text.size() - 2, 2, "\n%") == 0) || text == "%";
  return fortune ? "%" : "";
}

std::vector<std::string> split_documents(const std::string& text, const std::string& separator) {
  if (separator.empty()) return text.empty() ? std::vector<std::string>{} : std::vector<std::string>{text};
  std::vector<std::string> docs;
  std::istringstream in(text);
  std::string line, cur;
  while (std::getline(in, line)) {
    if (line == separator) {
      if (!cur.empty()) docs.push_back(cur);
      cur.clear();
    } else {
      cur += line + "\n";
    }
  }
  if (!cur.empty()) docs.push_back(cur);
  return docs;
}

void append_tokens(std::vector<uint8_t>& dst, std::string_view text) {
  dst.insert(dst.end(), text.begin(), text.end());
}

}  // namespace

TextDataset::TextDataset(const std::string& text, double val_fraction, uint64_t seed, const std::string& separator) {
  check(val_fraction > 0 && val_fraction < 1, "TextDataset", "val_fraction must be in (0, 1) but got ", val_fraction);
  // Duplicates found by sorting the documents' places (stable: the first of
  // equal documents stays), not by a set of copies: memory stays near twice
  // the text's size (the text, its documents, then their tokens).
  std::vector<std::string> docs = split_documents(text, separator_for(text, separator));
  std::vector<size_t> by_text(docs.size());
  std::iota(by_text.begin(), by_text.end(), 0);
  std::stable_sort(by_text.begin(), by_text.end(), [&](size_t a, size_t b) { return docs[a] < docs[b]; });
  std::vector<bool> duplicate(docs.size(), false);
  for (size_t i = 1; i < by_text.size(); ++i) duplicate[by_text[i]] = docs[by_text[i]] == docs[by_text[i - 1]];
  std::vector<std::string> unique;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (duplicate[i]) ++duplicates_;
    else unique.push_back(std::move(docs[i]));
  }
  docs = {};
  check(!unique.empty(), "TextDataset", "the text holds no document (it is empty, or only separator lines)");
  documents_ = static_cast<int64_t>(unique.size());
  by_position_ = unique.size() < kMinDocumentsToSplit;
  if (by_position_) {
    for (const std::string& d : unique) {
      const size_t cut = d.size() - static_cast<size_t>(val_fraction * static_cast<double>(d.size()));
      append_tokens(train_, std::string_view(d).substr(0, cut));
      append_tokens(val_, std::string_view(d).substr(cut));
    }
    return;
  }
  // A seeded shuffle decides which documents are validation.
  std::vector<size_t> order(unique.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const size_t n_val = std::max<size_t>(1, static_cast<size_t>(val_fraction * static_cast<double>(unique.size())));
  for (size_t i = 0; i < order.size(); ++i) append_tokens(i < n_val ? val_ : train_, unique[order[i]]);
}

std::pair<Tensor, Tensor> TextDataset::batch(bool validation, int64_t batch, int64_t context) const {
  return this->batch(validation, batch, context, default_generator());
}

std::pair<Tensor, Tensor> TextDataset::batch(bool validation, int64_t batch, int64_t context,
                                             Generator& generator) const {
  const auto& src = validation ? val_ : train_;
  check(static_cast<int64_t>(src.size()) > context + 1, "TextDataset", "the ", validation ? "validation" : "training",
        " split has ", src.size(), " tokens, too few for context ", context);
  const Tensor starts = randint(0, static_cast<int64_t>(src.size()) - context - 1, {batch}, generator);
  Tensor x = empty({batch, context}, kInt64), y = empty({batch, context}, kInt64);
  int64_t* xp = x.data_ptr<int64_t>();
  int64_t* yp = y.data_ptr<int64_t>();
  const int64_t* sp = starts.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < context; ++t) {
      xp[b * context + t] = src[sp[b] + t];
      yp[b * context + t] = src[sp[b] + t + 1];
    }
  return {x, y};
}

}  // namespace kiln::io
