// config.json of a Qwen3.5 text model <-> lat's model.* keys (hf_config.h).
#include "train/files/hf_config.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "lat/error.h"
#include "layers/swiglu.h"
#include "train/config/schema.h"
#include "train/config/suggest.h"
#include "train/files/json_file.h"
#include "train/text/format.h"

namespace lat {
namespace {

constexpr const char* kLinearLayer = "linear_attention";  // gdn
constexpr const char* kFullLayer = "full_attention";      // attn

/// transformers' defaults for the keys a config.json may leave out (Qwen3_5TextConfig).
constexpr double kDefaultRopeTheta = 10000.0;
constexpr double kDefaultPartialRotaryFactor = 0.25;
constexpr int64_t kDefaultFullAttentionInterval = 4;

/// More layers than lat builds (model.n_layers' bound): no pattern that long is spelled out.
constexpr int64_t kMaxLayerTypes = 1024;

/// The largest max_position_embeddings read (2^30 tokens): lat's context is not bounded by
/// it, but other tools size their position tables from it, so a damaged value is named here.
constexpr int64_t kMaxPositionEmbeddings = int64_t{1} << 30;

/// Keys transformers writes or reads that change nothing lat computes.
const std::set<std::string>& informational_keys() {
  static const std::set<std::string> keys = {
      "architectures", "model_type", "transformers_version", "dtype", "torch_dtype", "initializer_range",
      "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "_name_or_path",
      "output_attentions", "output_hidden_states", "return_dict"};
  return keys;
}

std::string layer_feature(size_t i, const std::string& kind) {
  return "export --format hf: layer " + std::to_string(i) + " (" + kind + "): ";
}

/// Reads config.json values, collecting every key lat cannot honour so that one error names
/// them all.
class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& config, std::string path) : config_(config), path_(std::move(path)) {}

  /// The integer `key` (>= 1); `fallback` when absent, or a problem when there is none.
  int64_t positive_int(const std::string& key, std::optional<int64_t> fallback = std::nullopt) {
    return read_positive_int(key, fallback).value_or(1);
  }

  /// positive_int, but nullopt (and a problem) when neither the value nor a fallback is usable.
  std::optional<int64_t> read_positive_int(const std::string& key, std::optional<int64_t> fallback = std::nullopt) {
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

  double positive_number(const nlohmann::json& v, const std::string& key, double fallback) {
    if (v.is_null()) return fallback;
    if (!v.is_number() || v.get<double>() <= 0) {
      problems_.push_back(key + ": expected a number > 0, got " + json_excerpt(v));
      return fallback;
    }
    return v.get<double>();
  }

  double positive_number(const std::string& key, double fallback) {
    used_.insert(key);
    return config_.contains(key) ? positive_number(config_[key], key, fallback) : fallback;
  }

  /// The number `key` in (0, `high`]; `fallback` when absent. null is refused: transformers
  /// would fail on it, and no fallback is what the file meant.
  double number_above_zero_up_to(const std::string& key, double high, const std::string& high_text, double fallback) {
    used_.insert(key);
    if (!config_.contains(key)) return fallback;
    const nlohmann::json& v = config_[key];
    if (!v.is_number() || !(v.get<double>() > 0 && v.get<double>() <= high)) {
      problems_.push_back(key + ": expected a number in (0, " + high_text + "], got " + json_excerpt(v));
      return fallback;
    }
    return v.get<double>();
  }

  /// Checks that `key`, when present, is an integer in [low, high] (`range_text`); its value
  /// is not used.
  void check_int_in(const std::string& key, int64_t low, int64_t high, const std::string& range_text) {
    used_.insert(key);
    if (!config_.contains(key)) return;
    const nlohmann::json& v = config_[key];
    // An unsigned value above int64's range is a number_unsigned that get<int64_t> would wrap.
    const bool in_range = v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(high)) &&
                          v.get<int64_t>() >= low && v.get<int64_t>() <= high;
    if (!in_range) problems_.push_back(key + ": expected an integer in " + range_text + ", got " + json_excerpt(v));
  }

  bool boolean(const std::string& key, bool fallback) {
    used_.insert(key);
    if (!config_.contains(key)) return fallback;
    if (!config_[key].is_boolean()) {
      problems_.push_back(key + ": expected true or false, got " + json_excerpt(config_[key]));
      return fallback;
    }
    return config_[key].get<bool>();
  }

  /// `key`, when present, must equal `honoured` (what lat computes); `what` says why.
  void require(const std::string& key, const nlohmann::json& honoured, const std::string& what) {
    used_.insert(key);
    if (!config_.contains(key) || config_[key] == honoured) return;
    problems_.push_back(key + ": " + json_excerpt(config_[key]) + " (lat honours only " + json_excerpt(honoured) +
                        ": " + what + ")");
  }

  void problem(const std::string& text) { problems_.push_back(text); }
  void use(const std::string& key) { used_.insert(key); }
  const nlohmann::json& value(const std::string& key) const { return config_[key]; }
  bool has(const std::string& key) const { return config_.contains(key); }

  /// Throws one lat::Error naming every problem and every key neither read nor informational
  /// (with the nearest known key: a typo would otherwise read as a missing dimension).
  void finish() {
    std::vector<std::string> known(used_.begin(), used_.end());
    known.insert(known.end(), informational_keys().begin(), informational_keys().end());
    for (const auto& [key, v] : config_.items()) {
      if (used_.count(key) != 0 || informational_keys().count(key) != 0 || key.rfind("mtp_", 0) == 0) continue;
      problems_.push_back(key + ": " + json_excerpt(v) + " (a key lat does not know" + did_you_mean(key, known) + ")");
    }
    if (problems_.empty()) return;
    throw Error("load_model_weights: '" + path_ + "': keys lat cannot honour: " + join(problems_, "; "));
  }

 private:
  const nlohmann::json& config_;
  std::string path_;
  std::set<std::string> used_;
  std::vector<std::string> problems_;
};

/// model.layers from layer_types (or, when absent, transformers' full_attention_interval rule);
/// layer_types' length is checked only against a num_hidden_layers that was read.
std::string read_layer_types(HfConfigReader& r, std::optional<int64_t> read_n_layers) {
  const int64_t n_layers = read_n_layers.value_or(1);
  std::vector<std::string> kinds;
  r.use("layer_types");
  r.use("full_attention_interval");
  if (!r.has("layer_types") || r.value("layer_types").is_null()) {
    int64_t interval = kDefaultFullAttentionInterval;
    if (r.has("full_attention_interval")) {
      const nlohmann::json& v = r.value("full_attention_interval");
      if (!v.is_number_integer() || v.get<int64_t>() < 1)
        r.problem("full_attention_interval: expected an integer >= 1, got " + json_excerpt(v));
      else
        interval = v.get<int64_t>();
    }
    // One period of the rule; lat repeats model.layers to n_layers.
    const int64_t period = std::min(n_layers, interval);
    if (period > kMaxLayerTypes) return "gdn";  // the validator names num_hidden_layers
    for (int64_t i = 0; i < period; ++i) kinds.push_back((i + 1) % interval != 0 ? "gdn" : "attn");
    return join(kinds, ",");
  }
  const nlohmann::json& types = r.value("layer_types");
  if (!types.is_array()) {
    r.problem("layer_types: expected a list, got " + json_excerpt(types));
    return "gdn";
  }
  if (read_n_layers && static_cast<int64_t>(types.size()) != n_layers)
    r.problem("layer_types: expected num_hidden_layers (" + std::to_string(n_layers) + ") entries, got " +
              std::to_string(types.size()));
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == kLinearLayer) {
      kinds.push_back("gdn");
    } else if (types[i] == kFullLayer) {
      kinds.push_back("attn");
    } else {
      r.problem("layer_types[" + std::to_string(i) + "]: " + json_excerpt(types[i]) + " (lat has " + kLinearLayer +
                " = gdn and " + kFullLayer + " = attn)");
      kinds.push_back("gdn");
    }
  }
  return kinds.empty() ? "gdn" : join(kinds, ",");
}

/// attn.rope_theta and attn.rope_fraction from rope_parameters (transformers 5), or from the
/// top-level rope_theta / partial_rotary_factor of older files.
void read_rope(HfConfigReader& r, AttnConfig& attn) {
  r.use("rope_parameters");
  r.require("rope_scaling", nullptr, "plain RoPE");
  attn.rope_theta = r.positive_number("rope_theta", kDefaultRopeTheta);
  attn.rope_fraction = r.positive_number("partial_rotary_factor", kDefaultPartialRotaryFactor);
  if (!r.has("rope_parameters") || r.value("rope_parameters").is_null()) return;
  const nlohmann::json& rope = r.value("rope_parameters");
  if (!rope.is_object()) {
    r.problem("rope_parameters: expected an object, got " + json_excerpt(rope));
    return;
  }
  for (const auto& [key, v] : rope.items()) {
    const std::string name = "rope_parameters." + key;
    if (key == "rope_theta") {
      attn.rope_theta = r.positive_number(v, name, attn.rope_theta);
    } else if (key == "partial_rotary_factor") {
      attn.rope_fraction = r.positive_number(v, name, attn.rope_fraction);
    } else if (key == "rope_type") {
      if (v != "default") r.problem(name + ": " + json_excerpt(v) + " (lat honours only \"default\": plain RoPE)");
    } else if (key != "mrope_section" && key != "mrope_interleaved") {
      // mrope_* place the vision grid's positions; for text all three sections see the same
      // position, which is plain RoPE.
      r.problem(name + ": " + json_excerpt(v) + " (a key lat does not know)");
    }
  }
}

}  // namespace

void check_hf_expressible(const ModelConfig& m) {
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string& kind = kinds[i];
    // A switch Qwen3.5's layers of `layer_type` always have on.
    const auto require = [&](bool on, const std::string& key, const char* layer_type, const char* has) {
      if (!on)
        throw ConfigError(layer_feature(i, kind) + key + " false: Qwen3.5's " + layer_type + " layers " + has +
                          " (expected true)");
    };
    if (kind == "attn") {
      if (m.attn.window_size > 0)
        throw ConfigError(layer_feature(i, kind) + "model.attn.window_size " + std::to_string(m.attn.window_size) +
                          ": Qwen3.5's full_attention layers have no sliding window (expected 0)");
      require(m.attn.output_gate, "model.attn.output_gate", "full_attention", "gate their output");
      require(m.attn.qk_norm, "model.attn.qk_norm", "full_attention", "normalize q and k");
    } else if (kind == "gdn") {
      require(m.linear.use_short_conv, "model.linear.use_short_conv", "linear_attention", "have short convolutions");
      require(m.linear.use_gate, "model.linear.use_gate", "linear_attention", "have the gated output norm");
    } else {
      throw ConfigError(layer_feature(i, kind) + "a " + kind +
                        " mixer: Qwen3.5 has gdn (linear_attention) and attn (full_attention) layers only");
    }
  }
}

nlohmann::ordered_json hf_config_json(const ModelConfig& m, int64_t vocab_size, SafetensorsDType dtype) {
  nlohmann::ordered_json layer_types = nlohmann::ordered_json::array();
  for (const std::string& kind : layer_mixers(m)) layer_types.push_back(kind == "gdn" ? kLinearLayer : kFullLayer);
  const int64_t intermediate = swiglu_hidden_size(m.d_model, m.mlp_ratio, m.intermediate_size);
  nlohmann::ordered_json j;
  j["architectures"] = {"Qwen3_5ForCausalLM"};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = nullptr;
  j["dtype"] = dtype == SafetensorsDType::bf16 ? "bfloat16" : "float32";
  j["eos_token_id"] = nullptr;
  j["head_dim"] = m.attn.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = m.d_model;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = intermediate;
  j["layer_types"] = layer_types;
  j["linear_conv_kernel_dim"] = m.linear.conv_size;
  j["linear_key_head_dim"] = m.head_dim;
  j["linear_num_key_heads"] = m.n_heads;
  j["linear_num_value_heads"] = m.linear.n_v_heads;
  j["linear_value_head_dim"] = value_head_dim(m);
  j["max_position_embeddings"] = 32768;
  j["model_type"] = kHfModelType;
  j["num_attention_heads"] = m.attn.n_heads;
  j["num_hidden_layers"] = m.n_layers;
  j["num_key_value_heads"] = m.attn.n_kv_heads;
  j["pad_token_id"] = nullptr;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_parameters"] = {{"partial_rotary_factor", m.attn.rope_fraction},
                          {"rope_theta", m.attn.rope_theta},
                          {"rope_type", "default"}};
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["use_cache"] = true;
  j["vocab_size"] = vocab_size;
  return j;
}

bool is_hf_config(const nlohmann::json& config) {
  return config.is_object() && config.contains("model_type") && config["model_type"] == kHfModelType;
}

ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) throw Error("load_model_weights: '" + path + "': expected a JSON object");
  HfConfigReader r(config, path);
  ModelConfig m;
  m.d_model = r.positive_int("hidden_size");
  const std::optional<int64_t> n_layers = r.read_positive_int("num_hidden_layers");
  m.n_layers = n_layers.value_or(1);
  m.vocab_size = r.positive_int("vocab_size");
  m.intermediate_size = r.positive_int("intermediate_size");
  m.layers = read_layer_types(r, n_layers);
  m.n_heads = r.positive_int("linear_num_key_heads");
  m.head_dim = r.positive_int("linear_key_head_dim");
  m.linear.n_v_heads = r.positive_int("linear_num_value_heads");
  const int64_t value_dim = r.positive_int("linear_value_head_dim");
  m.expand_v = static_cast<double>(value_dim) / static_cast<double>(m.head_dim);
  if (value_head_dim(m) != value_dim)
    r.problem("linear_value_head_dim: " + std::to_string(value_dim) + " (lat's value head dim is linear_key_head_dim " +
              std::to_string(m.head_dim) + " x a float ratio, which does not give it exactly)");
  m.linear.conv_size = r.positive_int("linear_conv_kernel_dim", 4);
  m.attn.n_heads = r.positive_int("num_attention_heads");
  m.attn.head_dim = r.positive_int("head_dim");
  m.attn.n_kv_heads = r.positive_int("num_key_value_heads");
  read_rope(r, m.attn);
  m.norm_eps = r.number_above_zero_up_to("rms_norm_eps", kMaxNormEps, "1", 1e-6);
  r.check_int_in("max_position_embeddings", 1, kMaxPositionEmbeddings, "[1, 2^30]");
  m.tie_embeddings = r.boolean("tie_word_embeddings", false);
  r.require("hidden_act", "silu", "SiLU in the MLP and after the short convolutions");
  r.require("attention_bias", false, "projections without bias");
  if (r.has("attention_dropout")) {
    r.use("attention_dropout");
    const nlohmann::json& v = r.value("attention_dropout");
    if (!v.is_number() || v.get<double>() != 0.0)
      r.problem("attention_dropout: " + json_excerpt(v) + " (lat honours only 0: no attention dropout)");
  }
  r.finish();
  // What the architecture implies (the rest of model.linear keeps lat's defaults: short
  // convolutions and the gated output norm on).
  m.norm_zero_centered = true;
  m.attn.output_gate = true;
  m.attn.qk_norm = true;
  return m;
}

}  // namespace lat
