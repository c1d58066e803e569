// kimi_linear (KimiLinearForCausalLM with a dense MLP in every layer) in lat's Hugging Face
// family choice (hf_kimi.h): config.json keys and tensor layout.
#include "train/files/hf_kimi.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "lat/error.h"
#include "layers/swiglu.h"
#include "train/config/schema.h"
#include "train/files/hf_config_reader.h"
#include "train/files/json_file.h"
#include "train/text/format.h"

namespace lat {
namespace {

constexpr const char* kLinearLayer = "linear_attention";  // kda
constexpr const char* kFullLayer = "full_attention";      // mla
constexpr const char* kDenseMlp = "dense";

/// transformers' defaults for the keys a config.json may leave out (KimiLinearConfig).
constexpr int64_t kDefaultIntermediate = 9216;
constexpr int64_t kDefaultAttentionHeads = 32;
constexpr int64_t kDefaultKvLoraRank = 512;
constexpr int64_t kDefaultQkRopeHeadDim = 64;
constexpr int64_t kDefaultQkNopeHeadDim = 128;
constexpr int64_t kDefaultVHeadDim = 128;
constexpr int64_t kDefaultLinearHeadDim = 128;
constexpr int64_t kDefaultLinearHeads = 32;
constexpr int64_t kDefaultConvKernel = 4;
constexpr double kDefaultRmsNormEps = 1e-5;
constexpr int64_t kDefaultFirstKDense = 1;
/// transformers' default pattern: full_attention at layers 4, 8, ... (0-based), as in
/// KimiLinearConfig.__post_init__.
constexpr int64_t kDefaultFullAttentionInterval = 4;
/// What export writes as the context length: transformers' default, Kimi Linear's 1M tokens
/// (NoPE: nothing in the model depends on it).
constexpr int64_t kWrittenMaxLength = 1048576;

/// Keys of the experts and of the MoE router (a dense model never uses them), of the
/// multi-token-prediction layers transformers does not build, keys transformers derives from
/// others (head_dim = qk_rope_head_dim, qk_head_dim = qk_nope + qk_rope), and RoPE's keys,
/// which a model without position encoding never reads.
const std::set<std::string>& kimi_informational_keys() {
  static const std::set<std::string> keys = {"num_experts",
                                             "num_local_experts",
                                             "moe_intermediate_size",
                                             "moe_renormalize",
                                             "norm_topk_prob",
                                             "num_expert_group",
                                             "n_group",
                                             "topk_group",
                                             "num_experts_per_token",
                                             "num_experts_per_tok",
                                             "num_shared_experts",
                                             "n_shared_experts",
                                             "routed_scaling_factor",
                                             "output_router_logits",
                                             "router_aux_loss_coef",
                                             "moe_layer_freq",
                                             "moe_router_activation_func",
                                             "use_grouped_topk",
                                             "pretraining_tp",
                                             "num_nextn_predict_layers",
                                             "auto_map",
                                             "head_dim",
                                             "qk_head_dim",
                                             "rope_theta",
                                             "rope_scaling",
                                             "rope_parameters"};
  return keys;
}

/// The non-negative integer `key` (qk_nope_head_dim and qk_rope_head_dim may be 0).
int64_t non_negative_int(HfConfigReader& r, const std::string& key, int64_t fallback) {
  r.use(key);
  if (!r.has(key)) return fallback;
  const nlohmann::json& v = r.value(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0) {
    r.problem(key + ": expected an integer >= 0, got " + json_excerpt(v));
    return fallback;
  }
  return v.get<int64_t>();
}

/// Layer numbers (1-based) of `key` in linear_attn_config, into kinds[n - 1] = kind.
void place_layers(HfConfigReader& r, const nlohmann::json& list, const std::string& key, const char* kind,
                  std::vector<std::string>& kinds) {
  if (!list.is_array()) {
    r.problem("linear_attn_config." + key + ": expected a list of layer numbers, got " + json_excerpt(list));
    return;
  }
  for (const nlohmann::json& n : list) {
    const int64_t count = static_cast<int64_t>(kinds.size());
    if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > count) {
      r.problem("linear_attn_config." + key + ": " + json_excerpt(n) + " (expected a layer number in [1, " +
                std::to_string(count) + "], 1-based)");
      continue;
    }
    std::string& placed = kinds[static_cast<size_t>(n.get<int64_t>() - 1)];
    if (!placed.empty() && placed != kind)
      r.problem("linear_attn_config: layer " + std::to_string(n.get<int64_t>()) +
                " (1-based) is in both kda_layers and full_attn_layers");
    placed = kind;
  }
}

/// m.n_heads, head_dim, linear.conv_size from the linear_* keys, overridden by
/// linear_attn_config's (the form of Moonshot's checkpoints, which transformers reads first);
/// the layer kinds its kda_layers and full_attn_layers give when both are present.
std::optional<std::vector<std::string>> read_linear(HfConfigReader& r, int64_t n_layers, ModelConfig& m) {
  m.n_heads = r.positive_int("linear_num_heads", kDefaultLinearHeads);
  m.head_dim = r.positive_int("linear_head_dim", kDefaultLinearHeadDim);
  m.linear.conv_size = r.positive_int("linear_conv_kernel_dim", kDefaultConvKernel);
  r.use("linear_attn_config");
  if (!r.has("linear_attn_config") || r.value("linear_attn_config").is_null()) return std::nullopt;
  const nlohmann::json& c = r.value("linear_attn_config");
  if (!c.is_object()) {
    r.problem("linear_attn_config: expected an object, got " + json_excerpt(c));
    return std::nullopt;
  }
  const auto positive = [&](const char* key, int64_t& out) {
    if (!c.contains(key)) return;
    if (c[key].is_number_integer() && c[key].get<int64_t>() >= 1)
      out = c[key].get<int64_t>();
    else
      r.problem(std::string("linear_attn_config.") + key + ": expected an integer >= 1, got " + json_excerpt(c[key]));
  };
  positive("num_heads", m.n_heads);
  positive("head_dim", m.head_dim);
  positive("short_conv_kernel_size", m.linear.conv_size);
  for (const auto& [key, v] : c.items())
    if (key != "num_heads" && key != "head_dim" && key != "short_conv_kernel_size" && key != "kda_layers" &&
        key != "full_attn_layers")
      r.problem("linear_attn_config." + key + ": " + json_excerpt(v) + " (a key lat does not know)");
  if (!c.contains("kda_layers") || !c.contains("full_attn_layers") || n_layers > kMaxLayerTypes) return std::nullopt;
  std::vector<std::string> kinds(static_cast<size_t>(n_layers));
  place_layers(r, c["full_attn_layers"], "full_attn_layers", "mla", kinds);
  place_layers(r, c["kda_layers"], "kda_layers", "kda", kinds);
  for (size_t i = 0; i < kinds.size(); ++i)
    if (kinds[i].empty()) {
      r.problem("linear_attn_config: layer " + std::to_string(i + 1) +
                " (1-based) is in neither kda_layers nor full_attn_layers");
      kinds[i] = "kda";
    }
  return kinds;
}

/// model.layers from layer_types, else the kinds of linear_attn_config, else transformers'
/// default rule; layer_types' length is checked only against a num_hidden_layers that was read.
std::string read_layer_types(HfConfigReader& r, std::optional<int64_t> read_n_layers,
                             std::optional<std::vector<std::string>> from_linear_attn_config) {
  const int64_t n_layers = read_n_layers.value_or(1);
  r.use("layer_types");
  if (!r.has("layer_types") || r.value("layer_types").is_null()) {
    if (from_linear_attn_config) return join(*from_linear_attn_config, ",");
    if (n_layers > kMaxLayerTypes) return "kda";  // the validator names num_hidden_layers
    std::vector<std::string> kinds;
    for (int64_t i = 0; i < n_layers; ++i)
      kinds.push_back(i > 0 && i % kDefaultFullAttentionInterval == 0 ? "mla" : "kda");
    return join(kinds, ",");
  }
  const nlohmann::json& types = r.value("layer_types");
  if (!types.is_array()) {
    r.problem("layer_types: expected a list, got " + json_excerpt(types));
    return "kda";
  }
  if (read_n_layers && static_cast<int64_t>(types.size()) != n_layers)
    r.problem("layer_types: expected num_hidden_layers (" + std::to_string(n_layers) + ") entries, got " +
              std::to_string(types.size()));
  if (static_cast<int64_t>(types.size()) > kMaxLayerTypes) return "kda";
  std::vector<std::string> kinds;
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == kLinearLayer) {
      kinds.push_back("kda");
    } else if (types[i] == kFullLayer) {
      kinds.push_back("mla");
    } else {
      r.problem("layer_types[" + std::to_string(i) + "]: " + json_excerpt(types[i]) + " (lat has " + kLinearLayer +
                " = kda and " + kFullLayer + " = mla)");
      kinds.push_back("kda");
    }
  }
  return kinds.empty() ? "kda" : join(kinds, ",");
}

/// Every layer's MLP must be dense: mlp_layer_types, or without it transformers' rule (the
/// first first_k_dense_replace layers dense, the rest MoE).
void require_dense_mlps(HfConfigReader& r, std::optional<int64_t> read_n_layers) {
  r.use("mlp_layer_types");
  r.use("first_k_dense_replace");
  if (r.has("mlp_layer_types") && !r.value("mlp_layer_types").is_null()) {
    const nlohmann::json& types = r.value("mlp_layer_types");
    if (!types.is_array()) {
      r.problem("mlp_layer_types: expected a list, got " + json_excerpt(types));
      return;
    }
    if (read_n_layers && static_cast<int64_t>(types.size()) != *read_n_layers)
      r.problem("mlp_layer_types: expected num_hidden_layers (" + std::to_string(*read_n_layers) + ") entries, got " +
                std::to_string(types.size()));
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i] != kDenseMlp) {
        r.problem("mlp_layer_types[" + std::to_string(i) + "]: " + json_excerpt(types[i]) +
                  " (lat honours only \"dense\": a dense MLP in every layer, no experts)");
        return;
      }
    return;
  }
  const nlohmann::json k = r.has("first_k_dense_replace") ? r.value("first_k_dense_replace")
                                                          : nlohmann::json(kDefaultFirstKDense);
  if (!read_n_layers) return;
  if (!k.is_number_integer() || k.get<int64_t>() < *read_n_layers)
    r.problem("first_k_dense_replace: " + json_excerpt(k) +
              (r.has("first_k_dense_replace") ? std::string() : std::string(" (transformers' default)")) +
              " without mlp_layer_types makes layers from it on MoE (lat honours only a dense MLP in every layer: "
              "expected num_hidden_layers " +
              std::to_string(*read_n_layers) + " or more)");
}

}  // namespace

void check_kimi_expressible(const ModelConfig& m) {
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string& kind = kinds[i];
    const std::string at = hf_layer_feature(i, kind);
    if (kind == "kda") {
      if (!m.linear.use_short_conv)
        throw ConfigError(at +
                          "model.linear.use_short_conv false: kimi_linear's linear_attention layers have short "
                          "convolutions (expected true)");
      if (!m.linear.use_gate)
        throw ConfigError(at +
                          "model.linear.use_gate false: kimi_linear's linear_attention layers have the gated "
                          "output norm (expected true)");
      if (value_head_dim(m) != m.head_dim)
        throw ConfigError(at + "model.expand_v " + format_significant(m.expand_v) +
                          ": kimi_linear's "
                          "linear_attention layers have value head dim = key head dim (expected 1)");
    } else if (kind == "mla") {
      if (m.mla.rope)
        throw ConfigError(at +
                          "model.mla.rope true: kimi_linear's full_attention layers have no position "
                          "encoding (expected false)");
      if (m.attn.window_size > 0)
        throw ConfigError(at + "model.attn.window_size " + std::to_string(m.attn.window_size) +
                          ": kimi_linear's full_attention layers have no sliding window (expected 0)");
    } else {
      throw ConfigError(at + "a " + kind +
                        " mixer: kimi_linear has kda (linear_attention) and mla (full_attention) layers only");
    }
  }
}

nlohmann::ordered_json kimi_config_json(const ModelConfig& m, int64_t vocab_size, SafetensorsDType dtype) {
  nlohmann::ordered_json layer_types = nlohmann::ordered_json::array();
  nlohmann::ordered_json mlp_layer_types = nlohmann::ordered_json::array();
  for (const std::string& kind : layer_mixers(m)) {
    layer_types.push_back(kind == "kda" ? kLinearLayer : kFullLayer);
    mlp_layer_types.push_back(kDenseMlp);
  }
  nlohmann::ordered_json j;
  j["architectures"] = {"KimiLinearForCausalLM"};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = nullptr;
  j["dtype"] = dtype == SafetensorsDType::bf16 ? "bfloat16" : "float32";
  j["eos_token_id"] = nullptr;
  j["hidden_act"] = "silu";
  j["hidden_size"] = m.d_model;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = swiglu_hidden_size(m.d_model, m.mlp_ratio, m.intermediate_size);
  j["kv_lora_rank"] = m.mla.kv_lora_rank;
  j["layer_types"] = layer_types;
  j["linear_conv_kernel_dim"] = m.linear.conv_size;
  j["linear_head_dim"] = m.head_dim;
  j["linear_num_heads"] = m.n_heads;
  j["mlp_layer_types"] = mlp_layer_types;
  j["model_max_length"] = kWrittenMaxLength;
  j["model_type"] = kKimiModelType;
  j["num_attention_heads"] = m.attn.n_heads;
  j["num_experts"] = 0;
  j["num_hidden_layers"] = m.n_layers;
  j["num_key_value_heads"] = m.attn.n_heads;
  j["pad_token_id"] = nullptr;
  j["q_lora_rank"] = m.mla.q_lora_rank > 0 ? nlohmann::ordered_json(m.mla.q_lora_rank)
                                           : nlohmann::ordered_json(nullptr);
  j["qk_nope_head_dim"] = m.mla.qk_nope_head_dim;
  j["qk_rope_head_dim"] = m.mla.qk_rope_head_dim;
  j["rms_norm_eps"] = m.norm_eps;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["use_cache"] = true;
  j["v_head_dim"] = m.mla.v_head_dim;
  j["vocab_size"] = vocab_size;
  return j;
}

ModelConfig model_config_from_kimi(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) throw Error("load_model_weights: '" + path + "': expected a JSON object");
  HfConfigReader r(config, path, kimi_informational_keys());
  ModelConfig m;
  m.d_model = r.positive_int("hidden_size");
  const std::optional<int64_t> n_layers = r.read_positive_int("num_hidden_layers");
  m.n_layers = n_layers.value_or(1);
  m.vocab_size = r.positive_int("vocab_size");
  m.intermediate_size = r.positive_int("intermediate_size", kDefaultIntermediate);
  std::optional<std::vector<std::string>> kinds = read_linear(r, m.n_layers, m);
  m.layers = read_layer_types(r, n_layers, std::move(kinds));
  require_dense_mlps(r, n_layers);
  m.attn.n_heads = r.positive_int("num_attention_heads", kDefaultAttentionHeads);
  r.use("num_key_value_heads");
  if (r.has("num_key_value_heads") && !r.value("num_key_value_heads").is_null() &&
      r.value("num_key_value_heads") != m.attn.n_heads)
    r.problem("num_key_value_heads: " + json_excerpt(r.value("num_key_value_heads")) +
              " (lat honours only num_attention_heads " + std::to_string(m.attn.n_heads) +
              (r.has("num_attention_heads") ? std::string()
                                            : std::string(", transformers' default as config.json has no "
                                                          "num_attention_heads")) +
              ": every mla head expands its own key and value from the latent)");
  m.mla.kv_lora_rank = r.positive_int("kv_lora_rank", kDefaultKvLoraRank);
  r.use("q_lora_rank");
  m.mla.q_lora_rank = r.has("q_lora_rank") && !r.value("q_lora_rank").is_null() ? r.positive_int("q_lora_rank") : 0;
  m.mla.qk_nope_head_dim = non_negative_int(r, "qk_nope_head_dim", kDefaultQkNopeHeadDim);
  m.mla.qk_rope_head_dim = non_negative_int(r, "qk_rope_head_dim", kDefaultQkRopeHeadDim);
  m.mla.v_head_dim = r.positive_int("v_head_dim", kDefaultVHeadDim);
  m.norm_eps = r.number_above_zero_up_to("rms_norm_eps", kMaxNormEps, "1", kDefaultRmsNormEps);
  r.check_int_in("model_max_length", 1, kMaxPositionEmbeddings, "[1, 2^30]");
  r.check_int_in("max_position_embeddings", 1, kMaxPositionEmbeddings, "[1, 2^30]");
  m.tie_embeddings = r.boolean("tie_word_embeddings", false);
  r.require("hidden_act", "silu", "SiLU in the MLP and after the short convolutions");
  r.require("attention_bias", false, "projections without bias");
  r.require("mla_use_nope", true, "no position encoding in the full_attention layers");
  r.require_no_attention_dropout();
  r.finish();
  m.norm_zero_centered = false;
  m.expand_v = 1.0;
  m.linear.use_short_conv = true;
  m.linear.use_gate = true;
  m.mla.rope = false;
  return m;
}

std::vector<HfTensorSpec> kimi_tensor_layout(const ModelConfig& m, int64_t vocab_size) {
  const int64_t d = m.d_model;
  const int64_t hidden = swiglu_hidden_size(d, m.mlp_ratio, m.intermediate_size);
  const int64_t H = m.n_heads, K = m.head_dim, HK = H * K, conv = m.linear.conv_size;
  const MlaConfig& mla = m.mla;
  const int64_t Ha = m.attn.n_heads, Dq = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
  const int64_t C = mla.kv_lora_rank, R = mla.q_lora_rank;
  const HfValues norm = HfValues::plain_norm;

  std::vector<HfTensorSpec> specs;
  specs.push_back(hf_renamed("model.embed_tokens.weight", "embeddings.weight", {vocab_size, d}));
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    const std::string lat = "layers." + std::to_string(i) + ".";
    const std::string h = hf + "self_attn.", a = lat + "attn.";
    const auto same = [&](const std::string& name, std::vector<int64_t> shape) {
      specs.push_back(hf_renamed(h + name, a + name, std::move(shape)));
    };
    specs.push_back(hf_renamed(hf + "input_layernorm.weight", lat + "attn_norm.weight", {d}, norm));
    if (kinds[i] == "kda") {
      same("q_proj.weight", {HK, d});
      same("k_proj.weight", {HK, d});
      same("v_proj.weight", {HK, d});
      same("q_conv1d.weight", {HK, 1, conv});
      same("k_conv1d.weight", {HK, 1, conv});
      same("v_conv1d.weight", {HK, 1, conv});
      same("f_a_proj.weight", {K, d});
      same("f_b_proj.weight", {HK, K});
      // transformers keeps A_log broadcastable over [B, T, H, K].
      specs.push_back({h + "A_log", {1, 1, H, 1}, {{a + "A_log", {H}}}, HfValues::same});
      same("dt_bias", {HK});
      same("b_proj.weight", {H, d});
      same("g_a_proj.weight", {K, d});
      same("g_b_proj.weight", {HK, K});
      same("o_norm.weight", {K});
      same("o_proj.weight", {d, HK});
    } else {
      if (R > 0) {
        same("q_a_proj.weight", {R, d});
        same("q_a_layernorm.weight", {R});
        same("q_b_proj.weight", {Ha * Dq, R});
      } else {
        same("q_proj.weight", {Ha * Dq, d});
      }
      same("kv_a_proj_with_mqa.weight", {C + mla.qk_rope_head_dim, d});
      same("kv_a_layernorm.weight", {C});
      same("kv_b_proj.weight", {Ha * (mla.qk_nope_head_dim + mla.v_head_dim), C});
      same("o_proj.weight", {d, Ha * mla.v_head_dim});
    }
    specs.push_back(hf_renamed(hf + "post_attention_layernorm.weight", lat + "mlp_norm.weight", {d}, norm));
    const std::string mlp = hf + "block_sparse_moe.";
    specs.push_back(hf_renamed(mlp + "gate_proj.weight", lat + "mlp.gate_proj.weight", {hidden, d}));
    specs.push_back(hf_renamed(mlp + "up_proj.weight", lat + "mlp.up_proj.weight", {hidden, d}));
    specs.push_back(hf_renamed(mlp + "down_proj.weight", lat + "mlp.down_proj.weight", {d, hidden}));
  }
  specs.push_back(hf_renamed("model.norm.weight", "norm.weight", {d}, norm));
  specs.push_back(
      hf_renamed("lm_head.weight", m.tie_embeddings ? "embeddings.weight" : "lm_head.weight", {vocab_size, d}));
  return specs;
}

void check_kimi_default_sizes(const nlohmann::json& config, const std::string& config_path, const ModelConfig& model,
                              const NamedTensors& file_tensors, const std::string& weights_path) {
  // The config.json sizes of each mla tensor's shape, with transformers' defaults.
  struct Size {
    const char* key;
    int64_t transformers_default;
  };
  const Size heads{"num_attention_heads", kDefaultAttentionHeads}, latent{"kv_lora_rank", kDefaultKvLoraRank},
      nope{"qk_nope_head_dim", kDefaultQkNopeHeadDim}, rope{"qk_rope_head_dim", kDefaultQkRopeHeadDim},
      value{"v_head_dim", kDefaultVHeadDim};
  struct Rule {
    const char* tensor;
    const char* rows;
    std::vector<Size> sizes;
  };
  const std::vector<Rule> rules = {
      {"self_attn.q_proj.weight", "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim) rows",
       {heads, nope, rope}},
      {"self_attn.q_b_proj.weight", "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim) rows",
       {heads, nope, rope}},
      {"self_attn.kv_a_proj_with_mqa.weight", "kv_lora_rank + qk_rope_head_dim rows", {latent, rope}},
      {"self_attn.kv_a_layernorm.weight", "kv_lora_rank", {latent}},
      {"self_attn.kv_b_proj.weight",
       "num_attention_heads x (qk_nope_head_dim + v_head_dim) rows, kv_lora_rank columns", {heads, nope, value, latent}},
      {"self_attn.o_proj.weight", "num_attention_heads x v_head_dim columns", {heads, value}},
  };
  const auto ends_with = [](const std::string& name, const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  const auto missing = [&](const std::string& key) { return !config.contains(key) || config[key].is_null(); };
  const NamedTensors tensors = kimi_saved_names(file_tensors);
  const std::vector<std::string> kinds = layer_mixers(model);
  for (const HfTensorSpec& spec : kimi_tensor_layout(model, model.vocab_size)) {
    for (const Rule& rule : rules) {
      // kda layers have a q_proj and an o_proj too: only the mla layers' depend on these sizes.
      const std::string layer = "model.layers.";
      if (!ends_with(spec.hf_name, rule.tensor) || spec.hf_name.rfind(layer, 0) != 0) continue;
      const size_t i = std::stoul(spec.hf_name.substr(layer.size()));
      if (i >= kinds.size() || kinds[i] != "mla") continue;
      const auto found = std::find_if(tensors.begin(), tensors.end(),
                                      [&](const auto& named) { return named.first == spec.hf_name; });
      if (found == tensors.end() || found->second.shape() == spec.shape) continue;
      std::vector<std::string> defaulted;
      std::vector<std::string> keys;
      for (const Size& size : rule.sizes)
        if (missing(size.key)) {
          defaulted.push_back(std::string(size.key) + " (transformers' default " +
                              std::to_string(size.transformers_default) + ")");
          keys.push_back(size.key);
        }
      if (defaulted.empty()) continue;
      throw Error("load_model_weights: '" + config_path + "' has no " + join(defaulted, " or ") + ", but tensor '" +
                  spec.hf_name + "' of '" + weights_path + "' is " + shape_str(found->second.shape()) + ", expected " +
                  shape_str(spec.shape) + " (" + rule.rows + "): set " + join(keys, " and ") + " in config.json");
    }
  }
}

void check_kimi_default_layer_types(const nlohmann::json& config, const std::string& config_path,
                                   const ModelConfig& model, const NamedTensors& file_tensors,
                                   const std::string& weights_path) {
  // As read_linear and read_layer_types: either form of the layer kinds, else the default.
  if (config.contains("layer_types") && !config["layer_types"].is_null()) return;
  const auto linear_attn_config = config.find("linear_attn_config");
  if (linear_attn_config != config.end() && linear_attn_config->is_object() &&
      linear_attn_config->contains("kda_layers") && linear_attn_config->contains("full_attn_layers"))
    return;
  std::set<std::string> names;
  for (const auto& [name, t] : kimi_saved_names(file_tensors)) names.insert(name);
  // A tensor only the other kind has: kv_a_proj_with_mqa is mla's, A_log kda's.
  const std::vector<std::string> kinds = layer_mixers(model);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const bool defaulted_to_kda = kinds[i] == "kda";
    const std::string other_kinds_tensor = "model.layers." + std::to_string(i) + ".self_attn." +
                                           (defaulted_to_kda ? "kv_a_proj_with_mqa.weight" : "A_log");
    if (names.count(other_kinds_tensor) == 0) continue;
    const std::string defaulted = defaulted_to_kda ? std::string(kLinearLayer) + " (kda)"
                                                   : std::string(kFullLayer) + " (mla)";
    const std::string found = defaulted_to_kda ? std::string(kFullLayer) + " (mla)"
                                               : std::string(kLinearLayer) + " (kda)";
    throw Error("load_model_weights: '" + config_path +
                "' has no layer_types (nor both of linear_attn_config's kda_layers and full_attn_layers), so "
                "transformers' default makes layer " + std::to_string(i) + " " + defaulted + " (" + kFullLayer +
                " at 0-based layers " + std::to_string(kDefaultFullAttentionInterval) + ", " +
                std::to_string(2 * kDefaultFullAttentionInterval) + ", ...), but tensor '" + other_kinds_tensor +
                "' of '" + weights_path + "' is a " + found + " layer's: set layer_types in config.json");
  }
}

bool kimi_lm_head_is_separate(const NamedTensors& file_tensors) {
  const Tensor* lm_head = nullptr;
  const Tensor* embeddings = nullptr;
  for (const auto& [name, t] : file_tensors) {
    if (name == "lm_head.weight") lm_head = &t;
    if (name == "model.embed_tokens.weight") embeddings = &t;
  }
  if (lm_head == nullptr || embeddings == nullptr) return false;
  if (lm_head->shape() != embeddings->shape()) return true;
  const std::vector<float> a = lm_head->to_vector<float>(), b = embeddings->to_vector<float>();
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0;
}

NamedTensors kimi_saved_names(const NamedTensors& tensors) {
  const auto replaced = [](std::string name, const std::string& from, const std::string& to) {
    const size_t at = name.find(from);
    if (at != std::string::npos) name.replace(at, from.size(), to);
    return name;
  };
  const std::string conv = "self_attn.conv1d.weight";
  NamedTensors out;
  for (const auto& [name, t] : tensors) {
    const bool is_fused_conv = name.size() >= conv.size() &&
                               name.compare(name.size() - conv.size(), conv.size(), conv) == 0;
    if (is_fused_conv && t.dim() == 3 && t.size(0) % 3 == 0) {
      // q, k and v each have H K channels (kimi_linear's value head dim is its key head dim).
      const std::string prefix = name.substr(0, name.size() - std::string("conv1d.weight").size());
      const int64_t rows = t.size(0) / 3;
      const std::vector<float> values = t.to_vector<float>();
      const size_t n = static_cast<size_t>(rows * t.size(1) * t.size(2));
      const char* parts[] = {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"};
      for (size_t p = 0; p < 3; ++p)
        out.emplace_back(
            prefix + parts[p],
            Tensor::from_vector(std::vector<float>(values.begin() + static_cast<std::ptrdiff_t>(p * n),
                                                   values.begin() + static_cast<std::ptrdiff_t>((p + 1) * n)),
                                {rows, t.size(1), t.size(2)}));
      continue;
    }
    out.emplace_back(replaced(replaced(name, ".mlp.", ".block_sparse_moe."), "self_attn.forget_gate.", "self_attn."),
                     t);
  }
  return out;
}

}  // namespace lat
