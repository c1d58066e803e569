// lat's Hugging Face format is a family choice: config.json and tensors translate through one
// family file each, picked by config.json's model_type on import and by the model's mixer
// kinds on export:
//   qwen3_5_text      Qwen3_5ForCausalLM: gdn and attn layers (hf_qwen35.h)
//   granitemoehybrid  GraniteMoeHybridForCausalLM: mamba2 and attn layers (hf_granite.h)
//   kimi_linear       KimiLinearForCausalLM: kda and mla layers (hf_kimi.h)
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "train/config/config_types.h"
#include "train/files/safetensors.h"

namespace lat {

/// The Hugging Face model families lat reads and writes.
enum class HfFamily { qwen3_5, granite, kimi };

/// The model_type of `family`'s config.json: "qwen3_5_text", "granitemoehybrid" or "kimi_linear".
const char* hf_model_type(HfFamily family);

/// The family that writes `model` (resolved): kimi for a model with a kda or mla layer (whose
/// check names any other layer); granite for a model with a mamba2 layer, or of
/// attn layers only without output_gate and qk_norm; Qwen3.5 otherwise (whose check names any
/// layer it cannot express).
HfFamily hf_family_of(const ModelConfig& model);

/// The family whose model_type `config` (a JSON object) names; nullopt for any other.
std::optional<HfFamily> hf_family_of_config(const nlohmann::json& config);

/// Throws ConfigError "export --format hf: layer <i> (<kind>): <feature> ..." for the first
/// feature of `model` (resolved) that its family (hf_family_of) cannot express
/// (check_qwen35_expressible, check_granite_expressible, check_kimi_expressible).
void check_hf_expressible(const ModelConfig& model);

/// The config.json transformers writes for `model` (resolved; check_hf_expressible first) with
/// `vocab_size` tokens in its family's keys, sorted as save_pretrained sorts them; "dtype" is
/// "float32" or "bfloat16" after `dtype`.
nlohmann::ordered_json hf_config_json(const ModelConfig& model, int64_t vocab_size, SafetensorsDType dtype);

/// True when `config` is a JSON object whose model_type is one of the families'.
bool is_hf_config(const nlohmann::json& config);

/// lat's model.* keys (other keys at their defaults, not yet resolved or validated) from the
/// config.json `config` read from `path`, by its family (model_config_from_granite for
/// granitemoehybrid, model_config_from_kimi for kimi_linear, model_config_from_qwen35 for any
/// other model_type). Throws lat::Error
/// "load_model_weights: '<path>': keys lat cannot honour: ..." naming every key lat cannot
/// honour with its value.
ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& path);

}  // namespace lat
