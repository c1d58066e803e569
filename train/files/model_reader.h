// The one reader of model files: everything `--checkpoint` accepts (DESIGN.md "The command
// line"): a checkpoint (.h5), a run directory (its latest checkpoint), an export directory
// (its model.h5, else its model.safetensors) or an exported model.safetensors with the
// config.json and tokenizer.json beside it (export_layout.h), or a Hugging Face Qwen3.5
// directory (or its config.json, model.safetensors or model.safetensors.index.json; read by
// hf_import.h), read into one form.
#pragma once
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "train/config/config.h"
#include "train/files/checkpoint.h"

namespace lat {

/// Where a model's config came from.
enum class ModelFormat {
  lat,  // lat's own config (a checkpoint's /config, an export's lat_config)
  hf,   // translated from a Hugging Face config.json (model.* only; the rest defaults)
};

/// A model's weights with what is needed to rebuild it.
struct ModelWeights {
  std::string path;  // the file read: a .h5 checkpoint, a model.safetensors or a weight index
  ModelFormat format = ModelFormat::lat;
  /// The config stored with the weights (a checkpoint's /config, an export's lat_config),
  /// through the same schema, bounds and validator as a config file (parse_config).
  Config config;
  /// Root attributes, config, tokenizer and model tensors (f32, CPU, finite, module order; no
  /// lm_head.weight copy when the embeddings are tied); optimizer, rng and data empty.
  Checkpoint checkpoint;
  /// An export's config.json as read (what other tools see); model_from_weights compares it
  /// with `config` once the tensors are known to match the config (check_config_json_agrees).
  std::optional<nlohmann::json> export_config_json;
  std::string export_config_path;  // that config.json
  /// lat tensor name -> how the file names it, where the file uses other names (a Hugging
  /// Face directory: hf_tensor_labels); empty for lat's own files.
  std::map<std::string, std::string> tensor_labels;
};

/// The lat tensor `name` of `w` as an error message names it: "'<name>'", or how the file
/// names it ("'model.embed_tokens.weight'", "'...in_proj_qkv.weight' rows [0, 16)").
std::string tensor_label(const ModelWeights& w, const std::string& name);

/// Loads what `--checkpoint` accepts (see the top of this file) and checks the parts against
/// each other; the model is not built (model_from_weights, trained_model.h, compares the sizes
/// and shapes). Throws lat::Error naming the file: missing, unreadable or bad safetensors (see
/// load_safetensors), an export's __metadata__ step or tokens_seen that is not an integer >= 0
/// or world_size not one >= 1 (naming the key), an export's model.safetensors without its
/// crc32 checksums, a checkpoint from a newer layout version, config.json missing or without
/// lat_config, a bad tokenizer.json (model_from_weights then compares config.json's keys:
/// check_config_json_agrees); a tensor holding NaN or inf
/// (naming the tensor); for a Hugging Face directory what load_hf_model throws; a char or byte
/// tokenizer with more tokens than embeddings.weight has rows, or fewer when model.vocab_size
/// is 0 (the size taken from the tokenizer); model.tie_embeddings beside an lm_head.weight that
/// is not an exact copy of embeddings.weight (an export's copy for other tools is dropped).
/// Throws ConfigError naming the file for a stored config the validator rejects ("'<file>':
/// <key>: <problem> (/config:<line>)", or lat_config:<line> for an export), for a path that
/// does not exist or a run directory without a checkpoint.
ModelWeights load_model_weights(const std::string& path);

}  // namespace lat
