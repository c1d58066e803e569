// Token sampling over a probability vector sorted by decreasing probability.
#include "train/inference/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace lat {

void validate(const SamplingOptions& options) {
  LAT_CHECK(options.temperature >= 0 && std::isfinite(options.temperature),
            "generate: --temperature: expected a number >= 0, got " << options.temperature);
  LAT_CHECK(options.top_k >= 0, "generate: --top-k: expected >= 0 (0 = off), got " << options.top_k);
  LAT_CHECK(options.top_p > 0 && options.top_p <= 1, "generate: --top-p: expected a number in (0, 1], got "
                                                         << options.top_p);
  LAT_CHECK(options.drawable_ids >= 0,
            "generate: drawable_ids: expected >= 0 (0 = every id), got " << options.drawable_ids);
}

int64_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options, Generator& gen) {
  validate(options);
  LAT_CHECK(vocab >= 1, "sample_token: vocab: expected >= 1, got " << vocab);
  if (options.temperature == 0) return std::max_element(logits, logits + vocab) - logits;

  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  int64_t keep = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;

  // Softmax of the kept logits / temperature, shifted by the maximum for stability.
  std::vector<double> p(static_cast<size_t>(keep));
  const double max_logit = logits[order[0]];
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    p[i] = std::exp((static_cast<double>(logits[order[i]]) - max_logit) / options.temperature);
    total += p[i];
  }
  if (options.top_p < 1.0) {
    double mass = 0.0;
    int64_t n = 0;
    while (n < keep && mass < options.top_p * total) mass += p[n++];
    keep = std::max<int64_t>(n, 1);
    total = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  double u = gen.uniform() * total;
  for (int64_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace lat
