// What the data sources hand the trainer: a batch of inputs and next-token targets, the
// ignored-target id, and a rank's rows of a micro-batch.
#pragma once
#include <cstdint>

#include "lat/tensor.h"

namespace lat {

/// Target id that the loss skips (cross_entropy's default ignore_index): the padding
/// of the last sequential eval window, and every position of a synthetic task that is
/// not an answer.
constexpr int64_t kIgnoreIndex = -100;

/// inputs, targets: [rows, T] i64 (T = block_size), targets[r, t] = the token after
/// inputs[r, t] (or kIgnoreIndex). `tokens` counts the targets that are not kIgnoreIndex.
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

}  // namespace lat
