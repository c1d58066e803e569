// One training step's host memory, estimated from the config before the model is built: a
// config within the schema's bounds (data.block_size 2^20, a vocabulary of 2^24) can ask for
// more memory than the machine has, and would otherwise fail or swap minutes into the step.
#pragma once
#include <cstdint>
#include <string>

#include "train/config/config.h"

namespace lat {

/// Bytes one optimizer step holds at its peak (the start of backward), by part. Each part
/// counts f32 values; the estimate is an upper bound for bf16 precision.
struct StepMemory {
  double parameters = 0;   // weights, gradients and optimizer moments
  double embeddings = 0;   // the part of `parameters` of embeddings and lm_head (vocab x d_model)
  double activations = 0;  // what every layer saves for backward, over rows x data.block_size tokens,
                           // plus two layers' worth of gradients and scratch during backward
  double mla_activations = 0;  // the part of `activations` the mla layers' attention saves
  double logits = 0;       // logits over model.vocab_size and their gradient
  double runtime = 0;      // the process without the model: its peak resident memory so far,
                           // and what it maps once training starts
  double total() const { return parameters + activations + logits + runtime; }
};

/// The estimate for `config`, a vocabulary of `vocab_size` tokens (the resolved one) and
/// `rows` sequences per micro-batch on this rank. Throws lat::Error as hybrid_lm_config's
/// sizes do (an invalid mlp_ratio).
StepMemory estimate_step_memory(const Config& config, int64_t vocab_size, int64_t rows);

/// Throws ConfigError when `estimate` exceeds 90% of `physical_bytes`: one line with the
/// estimate and its parts in GiB, naming the keys (with their values) of the parts that make
/// it large; where the mla layers save a quarter of the activations or more, also the
/// model.mla.* keys that each grow a quarter or more of what an mla layer saves.
void check_step_memory(const Config& config, const StepMemory& estimate, int64_t vocab_size, double physical_bytes);

}  // namespace lat
