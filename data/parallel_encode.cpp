// Cut, encode the pieces on OpenMP threads, concatenate (parallel_encode.h).
#include "data/parallel_encode.h"

#include <algorithm>
#include <exception>
#include <string>

#include "lat/ops.h"

namespace lat {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Below this many bytes a piece costs more in threads than it saves.
constexpr size_t kMinPieceBytes = size_t{1} << 16;

// The first offset at or after `from` (>= 1) just after a '\n' and at a character that is not
// whitespace; text.size() when there is none.
size_t next_cut(std::string_view text, size_t from) {
  for (size_t at = from; at < text.size();) {
    const size_t newline = text.find('\n', at - 1);
    if (newline == std::string_view::npos || newline + 1 >= text.size()) break;
    if (!is_space(text[newline + 1])) return newline + 1;
    at = newline + 2;
  }
  return text.size();
}

}  // namespace

std::vector<size_t> newline_cuts(std::string_view text, int64_t pieces) {
  const size_t n = text.size();
  const size_t step = n / static_cast<size_t>(std::max<int64_t>(pieces, 1));
  std::vector<size_t> cuts{0};
  for (size_t from = step; step > 0 && from < n;) {
    const size_t cut = next_cut(text, from);
    if (cut >= n) break;
    cuts.push_back(cut);
    from = cut + step;
  }
  cuts.push_back(n);
  return cuts;
}

std::vector<int64_t> parallel_encode(const Tokenizer& tokenizer, std::string_view text) {
  const SubwordModel* model = tokenizer.subword_model();
  const int threads = get_num_threads();
  if (model == nullptr || !model->splits_after_newline() || threads <= 1 || text.size() < 2 * kMinPieceBytes)
    return tokenizer.encode(std::string(text));
  const int64_t pieces = std::min<int64_t>(threads, static_cast<int64_t>(text.size() / kMinPieceBytes));
  const std::vector<size_t> cuts = newline_cuts(text, pieces);
  const int64_t n = static_cast<int64_t>(cuts.size()) - 1;
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    try {
      ids[i] = model->encode(text.substr(cuts[i], cuts[i + 1] - cuts[i]));
    } catch (...) {  // an exception may not leave an OpenMP region
      errors[i] = std::current_exception();
    }
  }
  // A piece's error names an offset inside the piece: the whole text names it in the text.
  if (std::any_of(errors.begin(), errors.end(), [](const std::exception_ptr& e) { return e != nullptr; }))
    return tokenizer.encode(std::string(text));
  size_t total = 0;
  for (const std::vector<int64_t>& piece : ids) total += piece.size();
  std::vector<int64_t> out;
  out.reserve(total);
  for (const std::vector<int64_t>& piece : ids) out.insert(out.end(), piece.begin(), piece.end());
  return out;
}

}  // namespace lat
