// granitemoehybrid (GraniteMoeHybridForCausalLM without experts) in lat's Hugging Face family
// choice (hf_granite.h): config.json keys and tensor layout.
#include "train/files/hf_granite.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <optional>

#include "lat/error.h"
#include "layers/swiglu.h"
#include "train/config/schema.h"
#include "train/files/hf_config_reader.h"
#include "train/files/json_file.h"
#include "train/text/format.h"

namespace lat {
namespace {

constexpr const char* kMambaLayer = "mamba";          // mamba2
constexpr const char* kAttentionLayer = "attention";  // attn
// transformers 5's spellings of the same two kinds.
constexpr const char* kLinearLayer = "linear_attention";
constexpr const char* kFullLayer = "full_attention";

/// transformers' defaults for the keys a config.json may leave out (GraniteMoeHybridConfig).
constexpr int64_t kDefaultSharedIntermediate = 1024;
constexpr int64_t kDefaultMambaHeads = 128;
constexpr int64_t kDefaultMambaGroups = 1;
constexpr int64_t kDefaultMambaState = 256;
constexpr int64_t kDefaultMambaConv = 4;
constexpr int64_t kDefaultMambaExpand = 2;
constexpr int64_t kDefaultMambaChunk = 256;

/// How transformers writes an infinite float in config.json (PreTrainedConfig's float tag).
const nlohmann::ordered_json& json_infinity() {
  static const nlohmann::ordered_json inf = {{"__float__", "Infinity"}};
  return inf;
}

/// lat's attention scale, which attention_multiplier must equal.
double attention_scale(int64_t head_dim) { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

/// model.layers from layer_types (or layers_block_type, its older name); transformers' default
/// when both are absent is mamba layers only.
std::string read_layer_types(HfConfigReader& r, std::optional<int64_t> read_n_layers) {
  r.use("layer_types");
  r.use("layers_block_type");
  const char* key = r.has("layer_types") ? "layer_types" : "layers_block_type";
  if (!r.has(key) || r.value(key).is_null()) return "mamba2";
  const nlohmann::json& types = r.value(key);
  if (!types.is_array()) {
    r.problem(std::string(key) + ": expected a list, got " + json_excerpt(types));
    return "mamba2";
  }
  if (read_n_layers && static_cast<int64_t>(types.size()) != *read_n_layers)
    r.problem(std::string(key) + ": expected num_hidden_layers (" + std::to_string(*read_n_layers) + ") entries, got " +
              std::to_string(types.size()));
  if (static_cast<int64_t>(types.size()) > kMaxLayerTypes) return "mamba2";  // the validator names num_hidden_layers
  std::vector<std::string> kinds;
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == kMambaLayer || types[i] == kLinearLayer) {
      kinds.push_back("mamba2");
    } else if (types[i] == kAttentionLayer || types[i] == kFullLayer) {
      kinds.push_back("attn");
    } else {
      r.problem(std::string(key) + "[" + std::to_string(i) + "]: " + json_excerpt(types[i]) + " (lat has " +
                kMambaLayer + " = mamba2 and " + kAttentionLayer + " = attn)");
      kinds.push_back("mamba2");
    }
  }
  return kinds.empty() ? "mamba2" : join(kinds, ",");
}

/// `key` must be absent or the number 1 (what lat computes: no scaling).
void require_one(HfConfigReader& r, const std::string& key, const std::string& what) {
  r.use(key);
  if (!r.has(key)) return;
  const nlohmann::json& v = r.value(key);
  if (!v.is_number() || v.get<double>() != 1.0)
    r.problem(key + ": " + json_excerpt(v) + " (lat honours only 1: " + what + ")");
}

/// attention_multiplier must be lat's attention scale 1/sqrt(head_dim), to the last bits a
/// writer's rounding may differ by; transformers' default when absent is 1.
void check_attention_multiplier(HfConfigReader& r, int64_t head_dim) {
  const std::string key = "attention_multiplier";
  r.use(key);
  const double scale = attention_scale(head_dim);
  const std::string expected = " (lat's attention scales by 1/sqrt(head_dim " + std::to_string(head_dim) +
                               ") = " + format_significant(scale) + ")";
  if (!r.has(key)) {
    if (head_dim != 1) r.problem(key + ": missing: transformers' default 1" + expected);
    return;
  }
  const nlohmann::json& v = r.value(key);
  if (!v.is_number() || !(std::abs(v.get<double>() / scale - 1.0) <= 4 * DBL_EPSILON))
    r.problem(key + ": " + json_excerpt(v) + expected);
}

/// One bound of time_step_limit: a number, or transformers' tagged infinity.
std::optional<double> time_step_bound(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  // Compared as the tagged object's one member: json and ordered_json do not compare directly.
  if (v.is_object() && v.size() == 1 && v.value("__float__", "") == "Infinity")
    return std::numeric_limits<double>::infinity();
  return std::nullopt;
}

void read_time_step_limit(HfConfigReader& r, MambaConfig& mamba) {
  r.use("time_step_limit");
  if (!r.has("time_step_limit")) return;
  const nlohmann::json& v = r.value("time_step_limit");
  if (v.is_array() && v.size() == 2) {
    const std::optional<double> lo = time_step_bound(v[0]), hi = time_step_bound(v[1]);
    if (lo && hi) {
      mamba.time_step_limit = {*lo, *hi};
      return;
    }
  }
  r.problem("time_step_limit: expected [lo, hi] (numbers; hi may be {\"__float__\": \"Infinity\"}), got " +
            json_excerpt(v));
}

/// model.mamba.* from the mamba_* keys; mamba_d_head "auto" is d_inner / mamba_n_heads.
void read_mamba(HfConfigReader& r, int64_t d_model, MambaConfig& mamba) {
  const int64_t heads = r.positive_int("mamba_n_heads", kDefaultMambaHeads);
  mamba.expand = r.positive_int("mamba_expand", kDefaultMambaExpand);
  const int64_t d_inner = mamba.expand * d_model;
  r.use("mamba_d_head");
  if (r.has("mamba_d_head") && r.value("mamba_d_head") != "auto")
    mamba.head_dim = r.positive_int("mamba_d_head");
  else
    mamba.head_dim = std::max<int64_t>(1, d_inner / heads);
  if (mamba.head_dim * heads != d_inner)
    r.problem("mamba_n_heads: " + std::to_string(heads) + " heads of mamba_d_head " + std::to_string(mamba.head_dim) +
              " (expected mamba_expand * hidden_size = " + std::to_string(d_inner) + " channels)");
  mamba.n_groups = r.positive_int("mamba_n_groups", kDefaultMambaGroups);
  mamba.d_state = r.positive_int("mamba_d_state", kDefaultMambaState);
  mamba.conv_size = r.positive_int("mamba_d_conv", kDefaultMambaConv);
  mamba.chunk_size = r.positive_int("mamba_chunk_size", kDefaultMambaChunk);
  mamba.conv_bias = r.boolean("mamba_conv_bias", true);
  mamba.proj_bias = r.boolean("mamba_proj_bias", false);
  read_time_step_limit(r, mamba);
}

}  // namespace

void check_granite_expressible(const ModelConfig& m) {
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string& kind = kinds[i];
    // A feature granitemoehybrid's attention layers never have.
    const auto refuse_on = [&](bool on, const std::string& key, const std::string& feature) {
      if (on)
        throw ConfigError(hf_layer_feature(i, kind) + key + " true: granitemoehybrid's attention layers have no " +
                          feature + " (expected false)");
    };
    if (kind == "attn") {
      if (m.attn.window_size > 0)
        throw ConfigError(hf_layer_feature(i, kind) + "model.attn.window_size " + std::to_string(m.attn.window_size) +
                          ": granitemoehybrid's attention layers have no sliding window (expected 0)");
      refuse_on(m.attn.output_gate, "model.attn.output_gate", "output gate");
      refuse_on(m.attn.qk_norm, "model.attn.qk_norm", "q/k norms");
      if (m.attn.rope_fraction != 1.0)
        throw ConfigError(hf_layer_feature(i, kind) + "model.attn.rope_fraction " +
                          format_significant(m.attn.rope_fraction) +
                          ": granitemoehybrid's attention layers rotate the whole head (expected 1)");
    } else if (kind != "mamba2") {
      throw ConfigError(hf_layer_feature(i, kind) + "a " + kind +
                        " mixer: granitemoehybrid has mamba2 (mamba) and attn (attention) layers only");
    }
  }
}

nlohmann::ordered_json granite_config_json(const ModelConfig& m, int64_t vocab_size, SafetensorsDType dtype) {
  const std::vector<std::string> kinds = layer_mixers(m);
  nlohmann::ordered_json layer_types = nlohmann::ordered_json::array();
  for (const std::string& kind : kinds) layer_types.push_back(kind == "mamba2" ? kMambaLayer : kAttentionLayer);
  const bool has_mamba = std::find(kinds.begin(), kinds.end(), "mamba2") != kinds.end();
  const bool has_attention = std::find(kinds.begin(), kinds.end(), "attn") != kinds.end();
  const int64_t d_inner = m.mamba.expand * m.d_model;
  const int64_t mamba_head_dim = has_mamba ? m.mamba.head_dim : d_inner;
  const int64_t intermediate = swiglu_hidden_size(m.d_model, m.mlp_ratio, m.intermediate_size);
  const auto [step_lo, step_hi] = m.mamba.time_step_limit;
  const auto bound = [](double x) { return std::isinf(x) ? json_infinity() : nlohmann::ordered_json(x); };
  nlohmann::ordered_json j;
  j["architectures"] = {"GraniteMoeHybridForCausalLM"};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["attention_multiplier"] = attention_scale(m.attn.head_dim);
  j["bos_token_id"] = nullptr;
  j["dtype"] = dtype == SafetensorsDType::bf16 ? "bfloat16" : "float32";
  j["embedding_multiplier"] = 1.0;
  j["eos_token_id"] = nullptr;
  j["head_dim"] = m.attn.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = m.d_model;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = intermediate;
  j["layer_types"] = layer_types;
  j["logits_scaling"] = 1.0;
  j["mamba_chunk_size"] = m.mamba.chunk_size;
  j["mamba_conv_bias"] = m.mamba.conv_bias;
  j["mamba_d_conv"] = m.mamba.conv_size;
  j["mamba_d_head"] = mamba_head_dim;
  j["mamba_d_state"] = m.mamba.d_state;
  j["mamba_expand"] = m.mamba.expand;
  j["mamba_n_groups"] = has_mamba ? m.mamba.n_groups : 1;
  j["mamba_n_heads"] = d_inner / mamba_head_dim;
  j["mamba_proj_bias"] = m.mamba.proj_bias;
  j["max_position_embeddings"] = 32768;
  j["model_type"] = kGraniteModelType;
  j["num_attention_heads"] = m.attn.n_heads;
  j["num_hidden_layers"] = m.n_layers;
  j["num_key_value_heads"] = m.attn.n_kv_heads;
  j["num_local_experts"] = 0;
  j["pad_token_id"] = nullptr;
  // transformers builds no rotary embedding for null; lat's attention layers always rotate.
  j["position_embedding_type"] = has_attention ? nlohmann::ordered_json("rope") : nlohmann::ordered_json(nullptr);
  j["residual_multiplier"] = 1.0;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_parameters"] = {{"rope_theta", m.attn.rope_theta}, {"rope_type", "default"}};
  j["shared_intermediate_size"] = intermediate;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["time_step_limit"] = {bound(step_lo), bound(step_hi)};
  j["use_cache"] = true;
  j["vocab_size"] = vocab_size;
  return j;
}

ModelConfig model_config_from_granite(const nlohmann::json& config, const std::string& path) {
  // Keys of the experts, which a dense model (num_local_experts 0) never uses.
  HfConfigReader r(config, path,
                   {"intermediate_size", "num_experts_per_tok", "output_router_logits", "router_aux_loss_coef"});
  ModelConfig m;
  m.d_model = r.positive_int("hidden_size");
  const std::optional<int64_t> n_layers = r.read_positive_int("num_hidden_layers");
  m.n_layers = n_layers.value_or(1);
  m.vocab_size = r.positive_int("vocab_size");
  m.intermediate_size = r.positive_int("shared_intermediate_size", kDefaultSharedIntermediate);
  m.layers = read_layer_types(r, n_layers);
  m.attn.n_heads = r.positive_int("num_attention_heads");
  m.attn.n_kv_heads = r.positive_int("num_key_value_heads", m.attn.n_heads);
  m.attn.head_dim = r.positive_int("head_dim", std::max<int64_t>(1, m.d_model / m.attn.n_heads));
  // model.n_heads / head_dim size no granite layer; the attention's keep them valid.
  m.n_heads = m.attn.n_heads;
  m.head_dim = m.attn.head_dim;
  read_hf_rope(r, m.attn, HfRopeKeys{});  // granite turns the whole head
  const std::vector<std::string> pattern = mixer_pattern(m.layers);
  const bool has_attention = std::find(pattern.begin(), pattern.end(), "attn") != pattern.end();
  r.use("position_embedding_type");
  const nlohmann::json rope_kind = r.has("position_embedding_type") ? r.value("position_embedding_type") : nullptr;
  if (rope_kind != "rope" && (has_attention || !rope_kind.is_null()))
    r.problem("position_embedding_type: " + json_excerpt(rope_kind) +
              " (lat's attention layers always apply RoPE; lat honours only \"rope\"" +
              (rope_kind.is_null() ? std::string(" in a model with attention layers") : std::string()) + ")");
  read_mamba(r, m.d_model, m.mamba);
  r.use("num_local_experts");
  if (!r.has("num_local_experts"))
    r.problem("num_local_experts: missing: transformers' default 8 (lat honours only 0: a dense shared_mlp)");
  else if (r.value("num_local_experts") != 0)
    r.problem("num_local_experts: " + json_excerpt(r.value("num_local_experts")) +
              " (lat honours only 0: a dense shared_mlp)");
  require_one(r, "embedding_multiplier", "embeddings unscaled");
  require_one(r, "residual_multiplier", "residual branches unscaled");
  require_one(r, "logits_scaling", "logits unscaled");
  check_attention_multiplier(r, m.attn.head_dim);
  m.norm_eps = r.number_above_zero_up_to("rms_norm_eps", kMaxNormEps, "1", 1e-6);
  r.check_int_in("max_position_embeddings", 1, kMaxPositionEmbeddings, "[1, 2^30]");
  m.tie_embeddings = r.boolean("tie_word_embeddings", false);
  r.require("hidden_act", "silu", "SiLU in the MLP and the mamba layers");
  r.require("attention_bias", false, "projections without bias");
  r.require_no_attention_dropout();
  r.finish();
  m.norm_zero_centered = false;
  m.attn.output_gate = false;
  m.attn.qk_norm = false;
  return m;
}

std::vector<HfTensorSpec> granite_tensor_layout(const ModelConfig& m, int64_t vocab_size) {
  const int64_t d = m.d_model;
  const int64_t hidden = swiglu_hidden_size(d, m.mlp_ratio, m.intermediate_size);
  const MambaConfig& mb = m.mamba;
  const int64_t I = mb.expand * d, H = I / mb.head_dim, conv_dim = I + 2 * mb.n_groups * mb.d_state;
  const int64_t Ha = m.attn.n_heads, Da = m.attn.head_dim;
  const HfValues norm = HfValues::plain_norm;

  std::vector<HfTensorSpec> specs;
  specs.push_back(hf_renamed("model.embed_tokens.weight", "embeddings.weight", {vocab_size, d}));
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    const std::string lat = "layers." + std::to_string(i) + ".";
    specs.push_back(hf_renamed(hf + "input_layernorm.weight", lat + "attn_norm.weight", {d}, norm));
    if (kinds[i] == "mamba2") {
      const std::string h = hf + "mamba.", a = lat + "attn.";
      const auto same = [&](const std::string& name, std::vector<int64_t> shape) {
        specs.push_back(hf_renamed(h + name, a + name, std::move(shape)));
      };
      same("in_proj.weight", {2 * I + 2 * mb.n_groups * mb.d_state + H, d});
      if (mb.proj_bias) same("in_proj.bias", {2 * I + 2 * mb.n_groups * mb.d_state + H});
      same("conv1d.weight", {conv_dim, 1, mb.conv_size});
      if (mb.conv_bias) same("conv1d.bias", {conv_dim});
      same("dt_bias", {H});
      same("A_log", {H});
      same("D", {H});
      same("norm.weight", {I});
      same("out_proj.weight", {d, I});
      if (mb.proj_bias) same("out_proj.bias", {d});
    } else {
      for (HfTensorSpec& spec : hf_attention_projections(hf, lat, m, Ha * Da)) specs.push_back(std::move(spec));
    }
    specs.push_back(hf_renamed(hf + "post_attention_layernorm.weight", lat + "mlp_norm.weight", {d}, norm));
    specs.push_back(hf_stacked(hf + "shared_mlp.input_linear.weight", {{lat + "mlp.gate_proj.weight", {hidden, d}},
                                                                       {lat + "mlp.up_proj.weight", {hidden, d}}}));
    specs.push_back(hf_renamed(hf + "shared_mlp.output_linear.weight", lat + "mlp.down_proj.weight", {d, hidden}));
  }
  specs.push_back(hf_renamed("model.norm.weight", "norm.weight", {d}, norm));
  if (!m.tie_embeddings) specs.push_back(hf_renamed("lm_head.weight", "lm_head.weight", {vocab_size, d}));
  return specs;
}

}  // namespace lat
