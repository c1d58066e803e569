// From a config or a checkpoint to a HybridLM: the model.* keys as a HybridLMConfig,
// loading weights by name, moving parameters to a device, and loading a trained model
// (with its config and tokenizer) for `lat generate` and `lat eval`.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer.h"
#include "layers/hybrid_lm.h"
#include "train/config/config.h"

namespace lat {

/// The HybridLM of the model.* keys with `vocab_size` tokens (model.vocab_size when it is
/// set, else the caller's: the tokenizer's or the data's).
HybridLMConfig hybrid_lm_config(const ModelConfig& model, int64_t vocab_size);

/// Copies `weights` (name, tensor) into the parameters of `model` with the same names.
/// Throws lat::Error naming `source` and the parameter when one is missing, unexpected, or
/// of another shape.
void load_weights(const Module& model, const std::vector<std::pair<std::string, Tensor>>& weights,
                  const std::string& source);

/// Moves every parameter of `model` to `device` in place: the parameter handles the model
/// and its optimizer hold keep working, now pointing at device storage.
void move_parameters(const Module& model, Device device);

/// "cpu", "cuda" (= cuda:0) or "cuda:N" as a Device. Throws ConfigError naming
/// train.device for anything else, for CUDA when this build has no CUDA backend, and for a
/// CUDA device this process cannot see (none on a machine without a GPU).
Device parse_device(const std::string& device);

/// A trained model with what is needed to use it.
struct TrainedModel {
  std::string path;                  // the checkpoint file read
  Config config;                     // its resolved config
  std::optional<Tokenizer> tokenizer;  // none for a model trained on token ids (bin/h5 data)
  int64_t step = 0;
  std::unique_ptr<HybridLM> model;
};

/// Loads what `--checkpoint` accepts (load_model_weights: a checkpoint (.h5), a run
/// directory's latest checkpoint, an exported model.safetensors or model.h5, or an export
/// directory): its config, tokenizer and weights (on the CPU). Throws lat::Error naming the file when it is missing, not a
/// checkpoint, or does not match its own config.
TrainedModel load_trained_model(const std::string& checkpoint);

}  // namespace lat
