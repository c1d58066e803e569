// config.json of an export (config_json.h).
#include "train/files/config_json.h"

#include "lat/error.h"
#include "lat/version.h"
#include "layers/swiglu.h"
#include "train/files/hf_granite.h"
#include "train/files/hf_kimi.h"
#include "train/files/hf_qwen35.h"
#include "train/files/json_file.h"

namespace lat {

nlohmann::ordered_json model_config_json(const Config& config, int64_t vocab_size, const std::string& tokenizer_type,
                                         const std::string& dtype) {
  const ModelConfig& m = config.model;
  const int64_t mlp_hidden = swiglu_hidden_size(m.d_model, m.mlp_ratio, m.intermediate_size);
  nlohmann::ordered_json j;
  j["architectures"] = {"HybridLMForCausalLM"};
  j["model_type"] = "lat_hybrid";
  j["torch_dtype"] = dtype == "bf16" ? "bfloat16" : "float32";
  j["vocab_size"] = vocab_size;
  j["d_model"] = m.d_model;
  j["n_layers"] = m.n_layers;
  j["n_heads"] = m.n_heads;
  j["head_dim"] = m.head_dim;
  j["expand_v"] = m.expand_v;
  j["value_head_dim"] = value_head_dim(m);
  j["layers"] = layer_mixers(m);
  j["mlp_ratio"] = m.mlp_ratio;
  j["mlp_hidden_size"] = mlp_hidden;
  j["norm_eps"] = m.norm_eps;
  j["tie_embeddings"] = m.tie_embeddings;
  j["attn"] = {{"window_size", m.attn.window_size}, {"n_kv_heads", m.attn.n_kv_heads}, {"rope_theta", m.attn.rope_theta}};
  j["linear"] = {{"feature_map", m.linear.feature_map}, {"normalize", m.linear.normalize},
                 {"use_short_conv", m.linear.use_short_conv}, {"conv_size", m.linear.conv_size},
                 {"use_gate", m.linear.use_gate}, {"chunk_size", m.linear.chunk_size}};
  // The names Hugging Face configs use for the same numbers.
  j["hidden_size"] = m.d_model;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.attn.n_kv_heads;
  j["intermediate_size"] = mlp_hidden;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.attn.rope_theta;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["tokenizer_type"] = tokenizer_type;
  j["lat_version"] = version();
  j["lat_config"] = to_yaml(config);
  return j;
}

nlohmann::json read_export_config_json(const std::string& path, const std::string& model_path) {
  nlohmann::json config = read_json_file(path, "the config beside '" + model_path + "'");
  // A Hugging Face config.json of another architecture reaches here too (hf_model_dir takes
  // only its families'): name its model_type rather than lat's key, which its writer never heard of.
  if (config.is_object() && !config.contains("lat_config") && config.contains("model_type"))
    throw Error("load_model_weights: '" + path + "': model_type " + json_excerpt(config["model_type"]) +
                ": expected \"" + kQwen35ModelType +
                "\" (a Hugging Face Qwen3_5ForCausalLM, the text model), \"" + kGraniteModelType +
                "\" (GraniteMoeHybridForCausalLM), \"" + kKimiModelType +
                "\" (KimiLinearForCausalLM) or lat's own export (with 'lat_config')");
  if (!config.is_object() || !config.contains("lat_config") || !config["lat_config"].is_string())
    throw Error("load_model_weights: '" + path +
                "': no string 'lat_config' (the resolved lat config; written by lat export)");
  return config;
}

std::string read_lat_config(const std::string& path, const std::string& model_path) {
  return read_export_config_json(path, model_path)["lat_config"].get<std::string>();
}

namespace {

/// The first key of `expected` (with its `prefix`) whose value `found` has and differs,
/// descending into objects; throws naming it.
void compare_keys(const nlohmann::ordered_json& expected, const nlohmann::json& found, const std::string& prefix,
                  const std::string& path) {
  for (const auto& [key, want] : expected.items()) {
    if (!found.contains(key)) continue;
    const nlohmann::json& got = found[key];
    const std::string name = prefix + key;
    if (want.is_object() && got.is_object()) {
      compare_keys(want, got, name + ".", path);
      continue;
    }
    if (got == nlohmann::json(want)) continue;
    throw Error("load_model_weights: '" + path + "': '" + name + "': " + json_excerpt(got) +
                ", but the model lat reads (lat_config, the weights, tokenizer.json) has " +
                json_excerpt(nlohmann::json(want)) + ": expected config.json to describe it (other tools read it)");
  }
}

}  // namespace

void check_config_json_agrees(const nlohmann::json& config_json, const std::string& path, const Config& config,
                              int64_t vocab_size, const std::string& tokenizer_type) {
  nlohmann::ordered_json expected = model_config_json(config, vocab_size, tokenizer_type, "f32");
  // Which lat wrote it and the stored dtype describe the file, not the model.
  expected.erase("lat_version");
  expected.erase("torch_dtype");
  expected.erase("lat_config");  // the source of the rest
  compare_keys(expected, config_json, "", path);
}

}  // namespace lat
