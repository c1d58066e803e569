// `lat export` (DESIGN.md "The command line"): a checkpoint's weights for other tools, and
// reading them back.
//
//   --format safetensors  DIR/model.safetensors  the checkpoint's tensors under their own names
//                                                (f32, or bf16 on request); with tied embeddings
//                                                also lm_head.weight, a copy of embeddings.weight;
//                                                __metadata__: format=pt, step, tokens_seen, ...
//                         DIR/config.json        the model hyperparameters (lat's names plus the
//                                                usual Hugging Face aliases), architectures,
//                                                model_type, torch_dtype, vocabulary, and
//                                                lat_config: the resolved YAML, to rebuild exactly
//                         DIR/tokenizer.json     {"type": "char", "vocab": [characters in id order]}
//                                                or {"type": "byte", "vocab_size": 256}; absent for a
//                                                model trained on token ids (tokenizer type "none")
//   --format h5-weights   DIR/model.h5           a checkpoint with /model, /config, /tokenizer and
//                                                the root attributes only (no optimizer, rng, data)
//   --check-tokens IDS    DIR/check_logits.safetensors  lat's logits for IDS (ExportOptions)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/files/checkpoint.h"
#include "train/config/config.h"

namespace lat {

/// A model's weights with what is needed to rebuild it.
struct ModelWeights {
  std::string path;  // the file read: a .h5 checkpoint or a model.safetensors
  /// Root attributes, config, tokenizer and model tensors (f32, CPU, module order; no
  /// lm_head.weight copy when the embeddings are tied); optimizer, rng and data empty.
  Checkpoint checkpoint;
};

/// Loads what `--checkpoint` accepts (DESIGN.md): a checkpoint (.h5), an exported
/// model.safetensors (reading config.json and tokenizer.json beside it), an export directory
/// (its model.h5, else its model.safetensors) or a run directory (its latest checkpoint).
/// Throws lat::Error naming the file: missing, unreadable or bad safetensors (see
/// load_safetensors), a checkpoint from a newer layout version, config.json missing or without
/// lat_config, or a bad tokenizer.json.
ModelWeights load_model_weights(const std::string& path);

/// `lat export`'s flags.
struct ExportOptions {
  std::string checkpoint;              // anything load_model_weights accepts
  std::string format = "safetensors";  // safetensors or h5-weights
  std::string out_dir;                 // created when missing
  std::string dtype = "f32";           // f32 or bf16 (safetensors only)
  /// When not empty, also DIR/check_logits.safetensors for tools/check_export.py: "tokens"
  /// [T] (the ids as f32), "logits" [T, vocab] (HybridLM::forward, the training path) and
  /// "logits_step" [T, vocab] (HybridLM::step one token at a time, the generation path), both
  /// computed by lat from the export read back (so bf16 exports are checked as written).
  std::vector<int64_t> check_tokens;
};

/// Writes the export (see the top of this file) and returns the paths written. Throws
/// ConfigError for a bad format or dtype (bf16 with h5-weights) or a check token outside the
/// vocabulary (before anything is written), lat::Error when the checkpoint
/// cannot be read, its tensors do not match its config, or a file cannot be written.
std::vector<std::string> export_model(const ExportOptions& options);

/// config.json for a model: lat's model.* keys (layers expanded to one kind per layer,
/// head_dim, n_kv_heads resolved, mlp_hidden_size), Hugging Face aliases (hidden_size,
/// num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size,
/// rms_norm_eps, tie_word_embeddings), architectures, model_type, torch_dtype ("float32" or
/// "bfloat16"), the tokenizer type and lat_config (the resolved YAML).
nlohmann::ordered_json model_config_json(const Config& config, int64_t vocab_size, const std::string& tokenizer_type,
                                         const std::string& dtype);

}  // namespace lat
