// Batches of token windows. A training sample is a pure function of (seed, split, step,
// micro-batch, row): no hidden cursor, so a resumed run draws exactly the batches of an
// uninterrupted one, and N ranks of a data-parallel run can each take a contiguous share of
// the same global micro-batch.
#pragma once
#include <cstdint>
#include <string>
#include <variant>

#include "data/batch.h"
#include "data/dataset.h"
#include "data/synthetic_tasks.h"

namespace lat {

/// Rank `rank`'s contiguous share of a micro-batch of `batch_size` rows over `world_size`
/// ranks: [rank * B / N, (rank + 1) * B / N). Throws lat::Error naming train.batch_size
/// when B is not divisible by N, or when rank is outside [0, N).
RowRange rank_rows(int64_t batch_size, int rank, int world_size);

/// Training and random val batches, a pure function of (seed, split, step, micro-batch, row):
/// the row's key h is a splitmix64-chained hash of those five. From a dataset, random
/// windows of block_size + 1 tokens: the row starts at offset floor(h * (n - T) / 2^64) of
/// the split (n tokens, T = block_size), uniform over every valid start. From a synthetic
/// task (data.task), the task's sequence of key h (SyntheticTask::sample), so the train and
/// val splits are two disjoint streams of generated sequences.
///
/// A packed dataset (Dataset::documents(), data.packing) is the stream of its documents back
/// to back; its windows are the same windows, at the same starts, of that stream, each cut into
/// sequences where a document starts (the dataset's index of document starts, found once, so
/// cutting a row is a binary search and the batch stays a pure function of its key). A row
/// usually starts inside a document, which then continues from the row's first token as a
/// sequence of its own; a document longer than the window continues past it. Uniform starts
/// keep every token equally likely to be trained on, whatever the documents' lengths (starts
/// aligned to documents would favour short ones). No target crosses a boundary: the separator
/// stays the last token(s) of the document it ends and is predicted from inside it, and the
/// target of a document's last token (the next document's first token) is kIgnoreIndex.
/// Batch::cu_seqlens then holds the boundaries; it is undefined for an unpacked dataset and a
/// synthetic task, whose batches are exactly those of before packing existed.
/// The dataset must outlive the loader; the task is copied.
class BatchLoader {
 public:
  BatchLoader(const Dataset& dataset, uint64_t seed);
  BatchLoader(const SyntheticTask& task, uint64_t seed);

  /// Name and version of the sampling rule ("splitmix64-windows-v1" for a dataset,
  /// "splitmix64-packed-v1" for a packed one, SyntheticTask::sampler() for a task), saved in
  /// the checkpoint's /data so that a resume under a different rule is detected.
  std::string sampler() const;
  uint64_t seed() const { return seed_; }
  int64_t block_size() const;

  /// Start offset, within `split`, of row `row` of micro-batch `micro` of step `step`.
  /// Throws lat::Error for a loader over a synthetic task (it has no windows).
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
  uint64_t row_key(Split split, int64_t step, int64_t micro, int64_t row) const;

  std::variant<const Dataset*, SyntheticTask> source_;
  uint64_t seed_;
};

/// The whole val split as consecutive non-overlapping windows: window w has inputs
/// val[w*T, w*T + T) and targets val[w*T + 1, w*T + T + 1), so every val token after the
/// first is a target exactly once. The last window is padded where the split ends
/// (targets kIgnoreIndex, inputs 0 past the last token). Batch i holds windows [i*B, min((i+1)*B, W)).
/// A packed dataset's windows are cut at document starts as BatchLoader's are (a document
/// cut by a window's end continues in the next window as a new sequence), and the first token
/// of each document is no target.
class SequentialEval {
 public:
  /// Throws lat::Error when batch_size < 1. The dataset must outlive this object.
  SequentialEval(const Dataset& dataset, int64_t batch_size);
  int64_t num_windows() const { return num_windows_; }
  int64_t num_batches() const { return (num_windows_ + batch_size_ - 1) / batch_size_; }
  /// Targets over all batches: the val split's size minus one, minus (packed) the documents
  /// that start in the val split after its first token.
  int64_t num_targets() const;
  /// Batch `index` in [0, num_batches()); its last batch may have fewer rows.
  Batch batch(int64_t index) const;

 private:
  const Dataset* dataset_;
  int64_t batch_size_;
  int64_t num_windows_;
};

}  // namespace lat
