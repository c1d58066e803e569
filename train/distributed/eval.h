// Validation losses shared among the ranks of a data-parallel run: rank r scores batches
// r, r + N, r + 2N, ... and the loss sums and target counts are summed over the ranks, so an
// eval takes 1/N of the time and every rank gets the same result.
#pragma once
#include <cstdint>

#include "train/distributed/distributed.h"
#include "train/inference/eval.h"

namespace lat {

/// evaluate_val_batches (train/inference/eval.h) over the ranks of `dist`; with one rank it is
/// that function. Throws lat::Error when batches < 1.
EvalResult evaluate_val_batches(const HybridLM& model, const BatchLoader& loader, int64_t batches,
                                int64_t batch_size, Device device, const Distributed& dist);

/// evaluate_val_split (train/inference/eval.h) over the ranks of `dist`; with one rank it is that function.
EvalResult evaluate_val_split(const HybridLM& model, const Dataset& dataset, int64_t batch_size, Device device,
                              const Distributed& dist);

}  // namespace lat
