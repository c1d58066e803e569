// Qwen3.5 text models (transformers' Qwen3_5ForCausalLM, model_type "qwen3_5_text") in lat's
// Hugging Face family choice (hf_config.h): config.json keys and tensor layout.
#include "train/files/hf_qwen35.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "lat/error.h"
#include "layers/swiglu.h"
#include "train/config/schema.h"
#include "train/files/hf_config_reader.h"
#include "train/files/json_file.h"
#include "train/text/format.h"

namespace lat {
namespace {

constexpr const char* kLinearLayer = "linear_attention";  // gdn
constexpr const char* kFullLayer = "full_attention";      // attn

/// transformers' defaults for the keys a config.json may leave out (Qwen3_5TextConfig).
constexpr double kDefaultPartialRotaryFactor = 0.25;
constexpr int64_t kDefaultFullAttentionInterval = 4;

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

}  // namespace

void check_qwen35_expressible(const ModelConfig& m) {
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string& kind = kinds[i];
    // A switch Qwen3.5's layers of `layer_type` always have on.
    const auto require = [&](bool on, const std::string& key, const char* layer_type, const char* has) {
      if (!on)
        throw ConfigError(hf_layer_feature(i, kind) + key + " false: Qwen3.5's " + layer_type + " layers " + has +
                          " (expected true)");
    };
    if (kind == "attn") {
      if (m.attn.window_size > 0)
        throw ConfigError(hf_layer_feature(i, kind) + "model.attn.window_size " + std::to_string(m.attn.window_size) +
                          ": Qwen3.5's full_attention layers have no sliding window (expected 0)");
      require(m.attn.output_gate, "model.attn.output_gate", "full_attention", "gate their output");
      require(m.attn.qk_norm, "model.attn.qk_norm", "full_attention", "normalize q and k");
    } else if (kind == "gdn") {
      require(m.linear.use_short_conv, "model.linear.use_short_conv", "linear_attention", "have short convolutions");
      require(m.linear.use_gate, "model.linear.use_gate", "linear_attention", "have the gated output norm");
    } else {
      throw ConfigError(hf_layer_feature(i, kind) + "a " + kind +
                        " mixer: Qwen3.5 has gdn (linear_attention) and attn (full_attention) layers only");
    }
  }
}

nlohmann::ordered_json qwen35_config_json(const ModelConfig& m, int64_t vocab_size, SafetensorsDType dtype) {
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
  j["model_type"] = kQwen35ModelType;
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

ModelConfig model_config_from_qwen35(const nlohmann::json& config, const std::string& path) {
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
  // mrope_* place the vision grid's positions; for text all three sections see the same
  // position, which is plain RoPE.
  read_hf_rope(r, m.attn, HfRopeKeys{kDefaultPartialRotaryFactor, {"mrope_section", "mrope_interleaved"}});
  m.norm_eps = r.number_above_zero_up_to("rms_norm_eps", kMaxNormEps, "1", 1e-6);
  r.check_int_in("max_position_embeddings", 1, kMaxPositionEmbeddings, "[1, 2^30]");
  m.tie_embeddings = r.boolean("tie_word_embeddings", false);
  r.require("hidden_act", "silu", "SiLU in the MLP and after the short convolutions");
  r.require("attention_bias", false, "projections without bias");
  r.require_no_attention_dropout();
  // mtp_*: transformers ignores the multi-token-prediction weights, and so does lat.
  r.finish({"mtp_"});
  // What the architecture implies (the rest of model.linear keeps lat's defaults: short
  // convolutions and the gated output norm on).
  m.norm_zero_centered = true;
  m.attn.output_gate = true;
  m.attn.qk_norm = true;
  return m;
}

std::vector<HfTensorSpec> qwen35_tensor_layout(const ModelConfig& m, int64_t vocab_size) {
  const int64_t d = m.d_model;
  const int64_t hidden = swiglu_hidden_size(d, m.mlp_ratio, m.intermediate_size);
  const int64_t key_dim = m.n_heads * m.head_dim;                    // H*K
  const int64_t value_dim = m.linear.n_v_heads * value_head_dim(m);  // Hv*V
  const int64_t Hv = m.linear.n_v_heads, conv = m.linear.conv_size;
  const int64_t Ha = m.attn.n_heads, Da = m.attn.head_dim;
  const int64_t q_rows = Ha * Da * (m.attn.output_gate ? 2 : 1);
  const HfValues norm = HfValues::zero_centred_norm;

  std::vector<HfTensorSpec> specs;
  specs.push_back(hf_renamed("model.embed_tokens.weight", "embeddings.weight", {vocab_size, d}));
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    const std::string lat = "layers." + std::to_string(i) + ".";
    specs.push_back(hf_renamed(hf + "input_layernorm.weight", lat + "attn_norm.weight", {d}, norm));
    if (kinds[i] == "gdn") {
      const std::string h = hf + "linear_attn.", a = lat + "attn.";
      specs.push_back(hf_stacked(h + "in_proj_qkv.weight", {{a + "q_proj.weight", {key_dim, d}},
                                                            {a + "k_proj.weight", {key_dim, d}},
                                                            {a + "v_proj.weight", {value_dim, d}}}));
      specs.push_back(hf_stacked(h + "conv1d.weight", {{a + "q_conv1d.weight", {key_dim, 1, conv}},
                                                       {a + "k_conv1d.weight", {key_dim, 1, conv}},
                                                       {a + "v_conv1d.weight", {value_dim, 1, conv}}}));
      specs.push_back(hf_renamed(h + "in_proj_z.weight", a + "g_proj.weight", {value_dim, d}));
      specs.push_back(hf_renamed(h + "in_proj_a.weight", a + "a_proj.weight", {Hv, d}));
      specs.push_back(hf_renamed(h + "in_proj_b.weight", a + "b_proj.weight", {Hv, d}));
      specs.push_back(hf_renamed(h + "A_log", a + "A_log", {Hv}));
      specs.push_back(hf_renamed(h + "dt_bias", a + "dt_bias", {Hv}));
      specs.push_back(hf_renamed(h + "norm.weight", a + "o_norm.weight", {value_head_dim(m)}));
      specs.push_back(hf_renamed(h + "out_proj.weight", a + "o_proj.weight", {d, value_dim}));
    } else {
      const std::string h = hf + "self_attn.", a = lat + "attn.";
      for (HfTensorSpec& spec : hf_attention_projections(hf, lat, m, q_rows)) specs.push_back(std::move(spec));
      specs.push_back(hf_renamed(h + "q_norm.weight", a + "q_norm.weight", {Da}, norm));
      specs.push_back(hf_renamed(h + "k_norm.weight", a + "k_norm.weight", {Da}, norm));
    }
    specs.push_back(hf_renamed(hf + "post_attention_layernorm.weight", lat + "mlp_norm.weight", {d}, norm));
    specs.push_back(hf_renamed(hf + "mlp.gate_proj.weight", lat + "mlp.gate_proj.weight", {hidden, d}));
    specs.push_back(hf_renamed(hf + "mlp.up_proj.weight", lat + "mlp.up_proj.weight", {hidden, d}));
    specs.push_back(hf_renamed(hf + "mlp.down_proj.weight", lat + "mlp.down_proj.weight", {d, hidden}));
  }
  specs.push_back(hf_renamed("model.norm.weight", "norm.weight", {d}, norm));
  if (!m.tie_embeddings) specs.push_back(hf_renamed("lm_head.weight", "lm_head.weight", {vocab_size, d}));
  return specs;
}

}  // namespace lat
