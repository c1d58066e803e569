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
/// cu_seqlens (packed documents only, else undefined): i64 [N+1], the offsets of the N
/// sequences of the rows * T tokens of `inputs` read row after row, 0 = c_0 < ... < c_N =
/// rows * T; every row start r * T is one, so a sequence never spans two rows. The model
/// takes it as it is (HybridLM::forward(inputs, cu_seqlens)); no target crosses an offset.
struct Batch {
  Tensor inputs;
  Tensor targets;
  int64_t tokens = 0;
  Tensor cu_seqlens{};  // {}: brace-initialized batches may leave it out
};

/// Rows [begin, end) of a micro-batch.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};

}  // namespace lat
