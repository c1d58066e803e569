// config.json of an export: the model's hyperparameters for other tools, and lat_config (the
// resolved YAML) from which lat rebuilds the model exactly.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "train/config/config.h"

namespace lat {

/// config.json for a model: lat's model.* keys (layers expanded to one kind per layer,
/// head_dim, n_kv_heads resolved, mlp_hidden_size), Hugging Face aliases (hidden_size,
/// num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size,
/// rms_norm_eps, tie_word_embeddings), architectures, model_type, torch_dtype ("float32" or
/// "bfloat16"), the tokenizer type and lat_config (the resolved YAML).
nlohmann::ordered_json model_config_json(const Config& config, int64_t vocab_size, const std::string& tokenizer_type,
                                         const std::string& dtype);

/// The config.json at `path`, which sits beside the exported model `model_path`: a JSON
/// object with a string lat_config. Throws lat::Error naming the file when it cannot be read,
/// is not JSON, or has no string lat_config.
nlohmann::json read_export_config_json(const std::string& path, const std::string& model_path);

/// The lat_config string of the config.json at `path` (read_export_config_json).
std::string read_lat_config(const std::string& path, const std::string& model_path);

/// Compares the export's config.json `config_json` (read from `path`) with what
/// model_config_json writes for `config` (its lat_config, resolved), `vocab_size` (the
/// embeddings' rows) and `tokenizer_type`: other tools read the former, lat the latter, so a
/// difference would have them run different models. Every key model_config_json writes is
/// compared where the file has it (nested ones as "attn.n_kv_heads"), except lat_version and
/// torch_dtype. Throws lat::Error "load_model_weights: '<path>': '<key>': <value>, but the
/// model lat reads (lat_config, the weights, tokenizer.json) has <expected>: ..." for the
/// first that differs.
void check_config_json_agrees(const nlohmann::json& config_json, const std::string& path, const Config& config,
                              int64_t vocab_size, const std::string& tokenizer_type);

}  // namespace lat
