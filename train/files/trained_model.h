// From model files to a HybridLM: the model its config describes, with the weights copied in
// by name, plus the config and tokenizer needed to use it (`lat generate`, `lat eval`).
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
#include "train/files/model_reader.h"

namespace lat {

/// Copies `weights` (name, tensor) into the parameters of `model` with the same names.
/// Throws lat::Error naming `source` and the parameter when one is missing, unexpected, or
/// of another shape.
void load_weights(const Module& model, const std::vector<std::pair<std::string, Tensor>>& weights,
                  const std::string& source);

/// The vocabulary size of `w`'s model: the rows of its 2-D embeddings.weight; nullopt when it
/// has none.
std::optional<int64_t> vocab_size_of(const ModelWeights& w);

/// The HybridLM of `w.config`'s model.* keys, sized to `w`'s vocabulary, holding `w`'s weights
/// (on the CPU). Before the model is built (it allocates every parameter), the sizes the
/// config asks for are compared with the tensors that hold them: model.vocab_size and
/// model.d_model with embeddings.weight [vocab, d_model], model.n_layers with the layers.{i}
/// in the tensor names, and in each layer n_heads * head_dim with attn.q_proj.weight's rows,
/// the value heads' width with attn.o_proj.weight's columns, the SwiGLU width
/// (model.intermediate_size, or of model.mlp_ratio) with mlp.gate_proj.weight's rows and model.linear.conv_size with a present
/// attn.q_conv1d.weight's taps. Throws lat::Error naming the file, the key, the tensor,
/// expected and found (or a tensor that is absent); then an export's config.json against the
/// config (check_config_json_agrees), and load_weights compares every shape.
std::unique_ptr<HybridLM> model_from_weights(const ModelWeights& w);

/// A trained model with what is needed to use it.
struct TrainedModel {
  std::string path;                    // the checkpoint file read
  Config config;                       // its resolved config
  std::optional<Tokenizer> tokenizer;  // none for a model trained on token ids (bin/h5 data)
  int64_t step = 0;
  std::unique_ptr<HybridLM> model;
};

/// Loads what `--checkpoint` accepts (load_model_weights): its config, tokenizer and weights
/// (on the CPU). Throws what load_model_weights and model_from_weights throw: lat::Error
/// naming the file when it is missing, not a checkpoint, or does not match its own config;
/// ConfigError for a stored config the validator rejects.
TrainedModel load_trained_model(const std::string& checkpoint);

}  // namespace lat
