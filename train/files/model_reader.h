// The one reader of model files: everything `--checkpoint` accepts (DESIGN.md "The command
// line"): a checkpoint (.h5), a run directory (its latest checkpoint), an export directory
// (its model.h5, else its model.safetensors) or an exported model.safetensors with the
// config.json and tokenizer.json beside it (export_layout.h), read into one form.
#pragma once
#include <string>

#include "train/files/checkpoint.h"

namespace lat {

/// A model's weights with what is needed to rebuild it.
struct ModelWeights {
  std::string path;  // the file read: a .h5 checkpoint or a model.safetensors
  /// Root attributes, config, tokenizer and model tensors (f32, CPU, module order; no
  /// lm_head.weight copy when the embeddings are tied); optimizer, rng and data empty.
  Checkpoint checkpoint;
};

/// Loads what `--checkpoint` accepts (see the top of this file). Throws lat::Error naming the
/// file: missing, unreadable or bad safetensors (see load_safetensors), a checkpoint from a
/// newer layout version, config.json missing or without lat_config, or a bad tokenizer.json;
/// ConfigError for a path that does not exist or a run directory without a checkpoint.
ModelWeights load_model_weights(const std::string& path);

}  // namespace lat
