// The Hugging Face family choice (hf_config.h).
#include "train/files/hf_config.h"

#include <algorithm>
#include <vector>

#include "train/files/hf_granite.h"
#include "train/files/hf_kimi.h"
#include "train/files/hf_qwen35.h"

namespace lat {

const char* hf_model_type(HfFamily family) {
  if (family == HfFamily::kimi) return kKimiModelType;
  return family == HfFamily::granite ? kGraniteModelType : kQwen35ModelType;
}

HfFamily hf_family_of(const ModelConfig& m) {
  const std::vector<std::string> kinds = layer_mixers(m);
  const auto has = [&](const char* kind) { return std::find(kinds.begin(), kinds.end(), kind) != kinds.end(); };
  if (has("kda") || has("mla")) return HfFamily::kimi;
  if (has("mamba2")) return HfFamily::granite;
  const bool plain_attention_only = std::all_of(kinds.begin(), kinds.end(),
                                                [](const std::string& k) { return k == "attn"; }) &&
                                    !m.attn.output_gate && !m.attn.qk_norm;
  return plain_attention_only ? HfFamily::granite : HfFamily::qwen3_5;
}

std::optional<HfFamily> hf_family_of_config(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("model_type")) return std::nullopt;
  if (config["model_type"] == kQwen35ModelType) return HfFamily::qwen3_5;
  if (config["model_type"] == kGraniteModelType) return HfFamily::granite;
  if (config["model_type"] == kKimiModelType) return HfFamily::kimi;
  return std::nullopt;
}

void check_hf_expressible(const ModelConfig& m) {
  if (hf_family_of(m) == HfFamily::kimi)
    check_kimi_expressible(m);
  else if (hf_family_of(m) == HfFamily::granite)
    check_granite_expressible(m);
  else
    check_qwen35_expressible(m);
}

nlohmann::ordered_json hf_config_json(const ModelConfig& m, int64_t vocab_size, SafetensorsDType dtype) {
  if (hf_family_of(m) == HfFamily::kimi) return kimi_config_json(m, vocab_size, dtype);
  return hf_family_of(m) == HfFamily::granite ? granite_config_json(m, vocab_size, dtype)
                                              : qwen35_config_json(m, vocab_size, dtype);
}

bool is_hf_config(const nlohmann::json& config) { return hf_family_of_config(config).has_value(); }

ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& path) {
  if (hf_family_of_config(config) == HfFamily::kimi) return model_config_from_kimi(config, path);
  return hf_family_of_config(config) == HfFamily::granite ? model_config_from_granite(config, path)
                                                          : model_config_from_qwen35(config, path);
}

}  // namespace lat
