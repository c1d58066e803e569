// Near-miss suggestions (suggest.h).
#include "train/config/suggest.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>

namespace lat {
namespace {

/// Optimal string alignment distance: Levenshtein plus adjacent transpositions, so that
/// "d_modle" is one edit from "d_model".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string last_component(const std::string& key) {
  auto pos = key.rfind('.');
  return pos == std::string::npos ? key : key.substr(pos + 1);
}

/// The candidate nearest to `name`, or "" when none is near.
std::string suggest(const std::string& name, const std::vector<std::string>& candidates) {
  const std::string last = last_component(name);
  const size_t limit = last.size() <= 3 ? 1 : std::max<size_t>(2, last.size() / 3);
  std::string best;
  std::pair<size_t, size_t> best_score{std::numeric_limits<size_t>::max(), 0};
  for (const std::string& candidate : candidates) {
    size_t full = edit_distance(name, candidate);
    size_t tail = edit_distance(last, last_component(candidate));
    std::pair<size_t, size_t> score{std::min(full, tail), full};
    if (score < best_score) {
      best_score = score;
      best = candidate;
    }
  }
  return best_score.first <= limit ? best : "";
}

}  // namespace

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  std::string near = suggest(name, candidates);
  return near.empty() ? "" : ", did you mean '" + near + "'?";
}

}  // namespace lat
