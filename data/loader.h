// Batches of token windows. A training sample is a pure function of (seed, split, step,
// micro-batch, row): no hidden cursor, so a resumed run draws exactly the batches of an
// uninterrupted one, and N ranks of a data-parallel run can each take a contiguous share of
// the same global micro-batch.
#pragma once
#include <cstdint>
#include <string>

#include "data/dataset.h"
#include "lat/tensor.h"

namespace lat {

/// Target id that the loss skips (cross_entropy's default ignore_index): the padding
/// of the last sequential eval window.
constexpr int64_t kIgnoreIndex = -100;

/// inputs, targets: [rows, T] i64 (T = block_size), targets[r, t] = the token after
/// inputs[r, t]. `tokens` counts the targets that are not kIgnoreIndex.
struct Batch {
  Tensor inputs;
  Tensor targets;
  int64_t tokens = 0;
};

/// Rows [begin, end) of a micro-batch.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};

/// Rank `rank`'s contiguous share of a micro-batch of `batch_size` rows over `world_size`
/// ranks: [rank * B / N, (rank + 1) * B / N). Throws lat::Error naming train.batch_size
/// when B is not divisible by N, or when rank is outside [0, N).
RowRange rank_rows(int64_t batch_size, int rank, int world_size);

/// Random windows of block_size + 1 tokens. Row r of micro-batch m of step s starts at
/// offset floor(h * (n - T) / 2^64) of the split (n tokens, T = block_size), h = a
/// splitmix64-chained hash of (seed, split, s, m, r): uniform over every valid start.
/// The dataset must outlive the loader.
class BatchLoader {
 public:
  BatchLoader(const Dataset& dataset, uint64_t seed);

  /// Name and version of the sampling rule, saved in the checkpoint's /data so that a
  /// resume under a different rule is detected.
  static const char* sampler() { return "splitmix64-windows-v1"; }
  uint64_t seed() const { return seed_; }
  int64_t block_size() const { return dataset_->block_size(); }

  /// Start offset, within `split`, of row `row` of micro-batch `micro` of step `step`.
  int64_t window_start(Split split, int64_t step, int64_t micro, int64_t row) const;
  /// Rows [rows.begin, rows.end) of micro-batch `micro` of step `step` (train: the step
  /// counter as in metrics.jsonl; any integer is a valid key). Throws on rows.begin < 0
  /// or rows.end <= rows.begin.
  Batch batch(Split split, int64_t step, int64_t micro, RowRange rows) const;
  /// Rows [0, batch_size) of micro-batch `micro` of step `step` of the train split.
  Batch train_batch(int64_t step, int64_t micro, int64_t batch_size) const;
  /// Random val batch number `index` (0 .. eval_batches-1); the same batches at every
  /// eval, so periodic val losses are comparable.
  Batch eval_batch(int64_t index, int64_t batch_size) const;

 private:
  const Dataset* dataset_;
  uint64_t seed_;
};

/// The whole val split as consecutive non-overlapping windows: window w has inputs
/// val[w*T, w*T + T) and targets val[w*T + 1, w*T + T + 1), so every val token after the
/// first is a target exactly once. The last window is padded where the split ends
/// (targets kIgnoreIndex, inputs 0 past the last token). Batch i holds windows [i*B, min((i+1)*B, W)).
class SequentialEval {
 public:
  /// Throws lat::Error when batch_size < 1. The dataset must outlive this object.
  SequentialEval(const Dataset& dataset, int64_t batch_size);
  int64_t num_windows() const { return num_windows_; }
  int64_t num_batches() const { return (num_windows_ + batch_size_ - 1) / batch_size_; }
  /// Targets over all batches: the val split's size minus one.
  int64_t num_targets() const { return dataset_->split_size(Split::val) - 1; }
  /// Batch `index` in [0, num_batches()); its last batch may have fewer rows.
  Batch batch(int64_t index) const;

 private:
  const Dataset* dataset_;
  int64_t batch_size_;
  int64_t num_windows_;
};

}  // namespace lat
