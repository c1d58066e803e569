// The forward and backward of one optimizer step over its micro-batches (gradient
// accumulation), shared by the trainer and the training benchmark.
#pragma once
#include <cstdint>
#include <vector>

#include "data/loader.h"
#include "layers/hybrid_lm.h"

namespace lat {

/// Runs each micro-batch through `model` on `device` and backpropagates its mean
/// cross-entropy weighted by its share of `total_tokens` targets, so the accumulated
/// gradients are those of the mean over all of them (`total_tokens` may count other ranks'
/// targets too). Returns this process's part of that mean loss (nats per target). Throws
/// lat::Error from the ops (e.g. a kernel's input check on diverged weights).
double accumulate_gradients(const HybridLM& model, const std::vector<Batch>& micro, int64_t total_tokens,
                            Device device);

}  // namespace lat
