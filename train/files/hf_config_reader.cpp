// Typed reads of a Hugging Face config.json (hf_config_reader.h).
#include "train/files/hf_config_reader.h"

#include <algorithm>

#include "lat/error.h"
#include "train/config/suggest.h"
#include "train/files/json_file.h"
#include "train/text/format.h"

namespace lat {

std::string hf_layer_feature(size_t i, const std::string& kind) {
  return "export --format hf: layer " + std::to_string(i) + " (" + kind + "): ";
}

HfConfigReader::HfConfigReader(const nlohmann::json& config, std::string path,
                               std::set<std::string> family_informational)
    : config_(config), path_(std::move(path)), informational_(std::move(family_informational)) {
  // Keys transformers writes or reads that change nothing lat computes.
  informational_.insert({"architectures", "model_type", "transformers_version", "dtype", "torch_dtype",
                         "initializer_range", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
                         "_name_or_path", "output_attentions", "output_hidden_states", "return_dict"});
}

int64_t HfConfigReader::positive_int(const std::string& key, std::optional<int64_t> fallback) {
  return read_positive_int(key, fallback).value_or(1);
}

std::optional<int64_t> HfConfigReader::read_positive_int(const std::string& key, std::optional<int64_t> fallback) {
  used_.insert(key);
  if (!config_.contains(key)) {
    if (!fallback) problems_.push_back(key + ": missing (a required dimension)");
    return fallback;
  }
  const nlohmann::json& v = config_[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 1) {
    problems_.push_back(key + ": expected an integer >= 1, got " + json_excerpt(v));
    return std::nullopt;
  }
  return v.get<int64_t>();
}

double HfConfigReader::positive_number(const nlohmann::json& v, const std::string& key, double fallback) {
  if (v.is_null()) return fallback;
  if (!v.is_number() || v.get<double>() <= 0) {
    problems_.push_back(key + ": expected a number > 0, got " + json_excerpt(v));
    return fallback;
  }
  return v.get<double>();
}

double HfConfigReader::positive_number(const std::string& key, double fallback) {
  used_.insert(key);
  return config_.contains(key) ? positive_number(config_[key], key, fallback) : fallback;
}

double HfConfigReader::number_above_zero_up_to(const std::string& key, double high, const std::string& high_text,
                                               double fallback) {
  used_.insert(key);
  if (!config_.contains(key)) return fallback;
  const nlohmann::json& v = config_[key];
  if (!v.is_number() || !(v.get<double>() > 0 && v.get<double>() <= high)) {
    problems_.push_back(key + ": expected a number in (0, " + high_text + "], got " + json_excerpt(v));
    return fallback;
  }
  return v.get<double>();
}

void HfConfigReader::check_int_in(const std::string& key, int64_t low, int64_t high, const std::string& range_text) {
  used_.insert(key);
  if (!config_.contains(key)) return;
  const nlohmann::json& v = config_[key];
  // An unsigned value above int64's range is a number_unsigned that get<int64_t> would wrap.
  const bool in_range = v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(high)) &&
                        v.get<int64_t>() >= low && v.get<int64_t>() <= high;
  if (!in_range) problems_.push_back(key + ": expected an integer in " + range_text + ", got " + json_excerpt(v));
}

bool HfConfigReader::boolean(const std::string& key, bool fallback) {
  used_.insert(key);
  if (!config_.contains(key)) return fallback;
  if (!config_[key].is_boolean()) {
    problems_.push_back(key + ": expected true or false, got " + json_excerpt(config_[key]));
    return fallback;
  }
  return config_[key].get<bool>();
}

void HfConfigReader::require(const std::string& key, const nlohmann::json& honoured, const std::string& what) {
  used_.insert(key);
  if (!config_.contains(key) || config_[key] == honoured) return;
  problems_.push_back(key + ": " + json_excerpt(config_[key]) + " (lat honours only " + json_excerpt(honoured) + ": " +
                      what + ")");
}

void HfConfigReader::require_no_attention_dropout() {
  used_.insert("attention_dropout");
  if (!config_.contains("attention_dropout")) return;
  const nlohmann::json& v = config_["attention_dropout"];
  if (!v.is_number() || v.get<double>() != 0.0)
    problems_.push_back("attention_dropout: " + json_excerpt(v) + " (lat honours only 0: no attention dropout)");
}

void HfConfigReader::finish(const std::vector<std::string>& ignored_prefixes) {
  std::vector<std::string> known(used_.begin(), used_.end());
  known.insert(known.end(), informational_.begin(), informational_.end());
  for (const auto& [key, v] : config_.items()) {
    if (used_.count(key) != 0 || informational_.count(key) != 0) continue;
    bool ignored = false;
    for (const std::string& prefix : ignored_prefixes) ignored = ignored || key.rfind(prefix, 0) == 0;
    if (ignored) continue;
    problems_.push_back(key + ": " + json_excerpt(v) + " (a key lat does not know" + did_you_mean(key, known) + ")");
  }
  if (problems_.empty()) return;
  throw Error("load_model_weights: '" + path_ + "': keys lat cannot honour: " + join(problems_, "; "));
}

void read_hf_rope(HfConfigReader& r, AttnConfig& attn, const HfRopeKeys& keys) {
  constexpr double kDefaultRopeTheta = 10000.0;
  r.use("rope_parameters");
  r.require("rope_scaling", nullptr, "plain RoPE");
  attn.rope_theta = r.positive_number("rope_theta", kDefaultRopeTheta);
  attn.rope_fraction = keys.partial_rotary_factor
                           ? r.positive_number("partial_rotary_factor", *keys.partial_rotary_factor)
                           : 1.0;
  if (!r.has("rope_parameters") || r.value("rope_parameters").is_null()) return;
  const nlohmann::json& rope = r.value("rope_parameters");
  if (!rope.is_object()) {
    r.problem("rope_parameters: expected an object, got " + json_excerpt(rope));
    return;
  }
  for (const auto& [key, v] : rope.items()) {
    const std::string name = "rope_parameters." + key;
    const bool plain = std::find(keys.plain_rope_keys.begin(), keys.plain_rope_keys.end(), key) !=
                       keys.plain_rope_keys.end();
    if (key == "rope_theta") {
      attn.rope_theta = r.positive_number(v, name, attn.rope_theta);
    } else if (key == "partial_rotary_factor" && keys.partial_rotary_factor) {
      attn.rope_fraction = r.positive_number(v, name, attn.rope_fraction);
    } else if (key == "rope_type") {
      if (v != "default") r.problem(name + ": " + json_excerpt(v) + " (lat honours only \"default\": plain RoPE)");
    } else if (!plain) {
      r.problem(name + ": " + json_excerpt(v) + " (a key lat does not know)");
    }
  }
}

}  // namespace lat
