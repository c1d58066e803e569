// The model.* keys as the HybridLM's own config: the one translation from the config's
// sections (model, model.attn, model.linear, model.mamba) to the layers' options.
#pragma once
#include <cstdint>

#include "layers/hybrid_lm.h"
#include "train/config/config.h"

namespace lat {

/// The HybridLM of the model.* keys with `vocab_size` tokens (model.vocab_size when it is
/// set, else the caller's: the tokenizer's or the data's).
HybridLMConfig hybrid_lm_config(const ModelConfig& model, int64_t vocab_size);

}  // namespace lat
