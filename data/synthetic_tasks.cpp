// MQAR and copy sequences from a 64-bit key; the definitions are in synthetic_tasks.h.
#include "data/synthetic_tasks.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "data/batch.h"
#include "data/splitmix64.h"
#include "lat/error.h"

namespace lat {
namespace {

// `count` distinct ids drawn uniformly from [low, high), in draw order. Rejection against the
// ids drawn so far: count is at most a few hundred here, far below the range in practice.
std::vector<int64_t> distinct_ids(SplitMix64& rng, int64_t count, int64_t low, int64_t high) {
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(count));
  while (static_cast<int64_t>(ids.size()) < count) {
    const int64_t id = low + static_cast<int64_t>(rng.below(static_cast<uint64_t>(high - low)));
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

// `count` distinct slots drawn one after another, each with probability proportional to its
// weight among the slots not drawn yet (successive sampling without replacement, as
// numpy's choice(replace=False, p=...) that Zoology uses).
std::vector<int64_t> successive_sample(SplitMix64& rng, std::vector<double> weights, int64_t count) {
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(count));
  for (int64_t n = 0; n < count; ++n) {
    double total = 0.0;
    for (double w : weights) total += w;
    const double u = rng.uniform() * total;
    // The first slot whose cumulative weight exceeds u; the last slot with weight left
    // catches the rounding of the sum.
    double cumulative = 0.0;
    int64_t chosen = -1;
    for (size_t g = 0; g < weights.size(); ++g) {
      if (weights[g] == 0.0) continue;
      chosen = static_cast<int64_t>(g);
      cumulative += weights[g];
      if (u < cumulative) break;
    }
    weights[static_cast<size_t>(chosen)] = 0.0;
    slots.push_back(chosen);
  }
  return slots;
}

}  // namespace

int64_t mqar_max_pairs(int64_t vocab, int64_t seq_len) {
  return std::max<int64_t>(0, std::min(seq_len / 4, vocab / 2 - 1));
}

int64_t copy_max_length(int64_t seq_len) { return std::max<int64_t>(0, seq_len / 2); }

SyntheticTask SyntheticTask::mqar(const MqarOptions& options, int64_t seq_len) {
  LAT_CHECK(seq_len >= 1, "SyntheticTask::mqar: seq_len: expected >= 1, got " << seq_len);
  LAT_CHECK(options.vocab >= 4, "SyntheticTask::mqar: vocab: expected >= 4, got " << options.vocab);
  LAT_CHECK(std::isfinite(options.alpha) && options.alpha > 0,
            "SyntheticTask::mqar: alpha: expected a finite number > 0, got " << options.alpha);
  LAT_CHECK(!options.pairs.empty(), "SyntheticTask::mqar: pairs: expected at least one entry");
  const int64_t most = mqar_max_pairs(options.vocab, seq_len);
  SyntheticTask task("mqar", seq_len);
  task.mqar_ = options;
  for (int64_t pairs : options.pairs) {
    LAT_CHECK(pairs >= 1 && pairs <= most, "SyntheticTask::mqar: pairs: " << pairs << " pairs do not fit a sequence of "
                                                                           << seq_len << " tokens over " << options.vocab
                                                                           << " ids (expected 1 .. " << most << ")");
    std::vector<double> weights(static_cast<size_t>((seq_len - 2 * pairs) / 2));
    for (size_t g = 0; g < weights.size(); ++g) weights[g] = std::pow(static_cast<double>(g + 1), options.alpha - 1.0);
    task.gap_weights_.push_back(std::move(weights));
  }
  return task;
}

SyntheticTask SyntheticTask::copy(const CopyOptions& options, int64_t seq_len) {
  LAT_CHECK(seq_len >= 1, "SyntheticTask::copy: seq_len: expected >= 1, got " << seq_len);
  const int64_t most = copy_max_length(seq_len);
  LAT_CHECK(options.length >= 1 && options.length <= most,
            "SyntheticTask::copy: length: a string of " << options.length << " tokens does not fit a sequence of "
                                                        << seq_len << " tokens (expected 1 .. " << most << ")");
  SyntheticTask task("copy", seq_len);
  task.copy_ = options;
  return task;
}

SyntheticTask SyntheticTask::named(const std::string& task, const MqarOptions& mqar, const CopyOptions& copy,
                                   int64_t seq_len) {
  if (task == "mqar") return SyntheticTask::mqar(mqar, seq_len);
  if (task == "copy") return SyntheticTask::copy(copy, seq_len);
  throw Error("SyntheticTask::named: task: expected mqar or copy, got '" + task + "'");
}

int64_t SyntheticTask::vocab_size() const { return name_ == "mqar" ? mqar_.vocab : kCopyVocab; }

std::string SyntheticTask::describe() const {
  std::ostringstream os;
  if (name_ == "mqar") {
    os << "mqar (pairs ";
    for (size_t i = 0; i < mqar_.pairs.size(); ++i) os << (i ? "," : "") << mqar_.pairs[i];
    os << "; vocab " << mqar_.vocab << "; alpha " << mqar_.alpha << ")";
  } else {
    os << "copy (length " << copy_.length << ")";
  }
  return os.str();
}

std::string SyntheticTask::sampler() const { return "splitmix64-" + name_ + "-v1"; }

int64_t SyntheticTask::sample(uint64_t key, int64_t* inputs, int64_t* targets) const {
  std::fill(targets, targets + seq_len_, kIgnoreIndex);
  return name_ == "mqar" ? sample_mqar(key, inputs, targets) : sample_copy(key, inputs, targets);
}

int64_t SyntheticTask::sample_mqar(uint64_t key, int64_t* inputs, int64_t* targets) const {
  SplitMix64 rng(key);
  const size_t mix_entry = static_cast<size_t>(rng.below(mqar_.pairs.size()));
  const int64_t N = mqar_.pairs[mix_entry], V = mqar_.vocab, T = seq_len_, C = 2 * N;
  const std::vector<int64_t> keys = distinct_ids(rng, N, 1, V / 2);
  const std::vector<int64_t> values = distinct_ids(rng, N, V / 2, V);
  const std::vector<int64_t> gaps = successive_sample(rng, gap_weights_[mix_entry], N);
  // Filler first, then the pairs and the queries over it.
  for (int64_t t = 0; t < T; ++t) inputs[t] = static_cast<int64_t>(rng.below(static_cast<uint64_t>(V)));
  for (int64_t j = 0; j < N; ++j) {
    inputs[2 * j] = keys[j];
    inputs[2 * j + 1] = values[j];
    const int64_t query = C + 2 * gaps[j];
    inputs[query] = keys[j];
    targets[query] = values[j];
  }
  return N;
}

int64_t SyntheticTask::sample_copy(uint64_t key, int64_t* inputs, int64_t* targets) const {
  SplitMix64 rng(key);
  const int64_t L = copy_.length, T = seq_len_;
  std::fill(inputs, inputs + T, kCopyPadding);
  for (int64_t i = 0; i < L; ++i) {
    const int64_t symbol = 2 + static_cast<int64_t>(rng.below(kCopyAlphabet));
    inputs[i] = symbol;
    if (L + 1 + i < T) inputs[L + 1 + i] = symbol;  // the copy as input, teacher-forced
    targets[L + i] = symbol;                        // predicted from the separator on
  }
  inputs[L] = kCopySeparator;
  return L;
}

}  // namespace lat
