// The Hugging Face granitemoehybrid family (train/files/hf_granite.h): config.json both ways
// with known values, the keys lat cannot honour named, export refusals naming the layer and
// the feature; tensors lat -> transformers -> lat bit for bit with input_linear = gate | up and
// norms shifted for zero-centred models; a hand-written config.json + model.safetensors (as
// transformers lays them out) read by --checkpoint and init_from; and the CLI: a mamba2 + attn
// checkpoint exported, read back bit for bit, exported again to the same bytes, generating the
// same text.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lat/tape.h"
#include "layers/hybrid_lm.h"
#include "tests/expect_error.h"
#include "tests/hf_test_model.h"
#include "tests/lat_command.h"
#include "tests/test_files.h"
#include "train/config/config.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/hf_config.h"
#include "train/files/hf_weights.h"
#include "train/files/model_reader.h"
#include "train/files/safetensors.h"
#include "train/files/trained_model.h"
#include "train/run/finetune.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

// 2 mamba2 layers (4 heads of 8, 2 groups of B and C, d_state 8, biased projections) around a
// grouped-query attention layer (4 heads of 8, 2 kv heads).
const std::string kGraniteShape =
    "  d_model: 16\n  n_layers: 3\n  n_heads: 2\n  layers: \"mamba2,attn,mamba2\"\n  intermediate_size: 24\n"
    "  mamba: {d_state: 8, head_dim: 8, n_groups: 2, chunk_size: 4, proj_bias: true}\n"
    "  attn: {n_heads: 4, head_dim: 8, n_kv_heads: 2}\n";

bool bit_equal(const lat::Tensor& a, const lat::Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

const lat::Tensor& find(const lat::NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw lat::Error("test: no tensor '" + name + "'");
}

/// `j` through the config.json reader into a resolved model config.
lat::ModelConfig resolved_from_hf(const nlohmann::json& j) {
  lat::Config c;
  c.model = lat::model_config_from_hf(j, "d/config.json");
  c.data.path = "none";
  c.train.out_dir = "runs/t";
  return lat::parse_config(lat::to_yaml(c), "test").model;
}

// ---- config.json -------------------------------------------------------------------------

TEST(GraniteConfig, WritesGraniteKeysAndReadsThemBack) {
  const lat::ModelConfig m = model_config(kGraniteShape).model;
  EXPECT_EQ(lat::hf_family_of(m), lat::HfFamily::granite);
  const nlohmann::ordered_json j = lat::hf_config_json(m, 50, lat::SafetensorsDType::f32);
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "architectures": ["GraniteMoeHybridForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attention_multiplier": 0.35355339059327373, "bos_token_id": null, "dtype": "float32",
    "embedding_multiplier": 1.0, "eos_token_id": null, "head_dim": 8, "hidden_act": "silu", "hidden_size": 16,
    "initializer_range": 0.02, "intermediate_size": 24, "layer_types": ["mamba", "attention", "mamba"],
    "logits_scaling": 1.0, "mamba_chunk_size": 4, "mamba_conv_bias": true, "mamba_d_conv": 4, "mamba_d_head": 8,
    "mamba_d_state": 8, "mamba_expand": 2, "mamba_n_groups": 2, "mamba_n_heads": 4, "mamba_proj_bias": true,
    "max_position_embeddings": 32768, "model_type": "granitemoehybrid", "num_attention_heads": 4,
    "num_hidden_layers": 3, "num_key_value_heads": 2, "num_local_experts": 0, "pad_token_id": null,
    "position_embedding_type": "rope", "residual_multiplier": 1.0, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "shared_intermediate_size": 24,
    "tie_word_embeddings": false, "time_step_limit": [0.0, {"__float__": "Infinity"}], "use_cache": true,
    "vocab_size": 50})");
  EXPECT_EQ(nlohmann::json::parse(j.dump()), expected) << j.dump(2);
  std::vector<std::string> keys;
  for (const auto& [key, v] : j.items()) keys.push_back(key);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));  // as save_pretrained writes them

  lat::ModelConfig back = resolved_from_hf(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back.vocab_size, 50);
  EXPECT_EQ(back.n_heads, 4);  // model.n_heads and head_dim size no granite layer: the attention's
  EXPECT_EQ(back.head_dim, 8);
  back.vocab_size = m.vocab_size;  // the shape's own is 0: from the tokenizer
  back.n_heads = m.n_heads;
  back.linear.n_v_heads = m.linear.n_v_heads;
  EXPECT_EQ(back, m);

  // Without attention layers no rotary embedding: transformers builds none for null.
  const lat::ModelConfig mamba_only =
      model_config("  d_model: 16\n  n_layers: 2\n  layers: \"mamba2\"\n  mamba: {head_dim: 8, d_state: 8}\n").model;
  const nlohmann::json plain = nlohmann::json::parse(
      lat::hf_config_json(mamba_only, 50, lat::SafetensorsDType::f32).dump());
  EXPECT_TRUE(plain["position_embedding_type"].is_null());
  EXPECT_EQ(plain["layer_types"], nlohmann::json::parse(R"(["mamba", "mamba"])"));
  EXPECT_EQ(resolved_from_hf(plain).layers, "mamba2,mamba2");
}

TEST(GraniteConfig, TransformersSpellingsAndDefaultsAreRead) {
  // transformers 5's layer names, mamba_d_head "auto", no head_dim (hidden_size / heads), the
  // older top-level rope_theta, an attention_multiplier written as head_dim ** -0.5 in Python.
  const nlohmann::json j = nlohmann::json::parse(R"({
    "model_type": "granitemoehybrid", "hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 40,
    "layer_types": ["linear_attention", "full_attention"], "num_attention_heads": 4, "num_key_value_heads": 1,
    "attention_multiplier": 0.3535533905932738, "mamba_n_heads": 8, "mamba_d_head": "auto", "mamba_n_groups": 4,
    "mamba_d_state": 16, "num_local_experts": 0, "position_embedding_type": "rope", "rope_theta": 500.0,
    "shared_intermediate_size": 48, "intermediate_size": 4096, "num_experts_per_tok": 2,
    "time_step_limit": [0.001, 100.0], "tie_word_embeddings": true})");
  const lat::ModelConfig m = resolved_from_hf(j);
  EXPECT_EQ(m.layers, "mamba2,attn");
  EXPECT_EQ(m.attn.head_dim, 8);
  EXPECT_EQ(m.attn.n_kv_heads, 1);
  EXPECT_EQ(m.attn.rope_theta, 500.0);
  EXPECT_EQ(m.attn.rope_fraction, 1.0);
  EXPECT_FALSE(m.attn.output_gate);
  EXPECT_FALSE(m.attn.qk_norm);
  EXPECT_FALSE(m.norm_zero_centered);
  EXPECT_EQ(m.mamba.head_dim, 8);  // 2 * 32 / 8
  EXPECT_EQ(m.mamba.n_groups, 4);
  EXPECT_EQ(m.mamba.d_state, 16);
  EXPECT_EQ(m.mamba.chunk_size, 256);  // transformers' default
  EXPECT_EQ(m.mamba.time_step_limit, (std::array<double, 2>{0.001, 100.0}));
  EXPECT_EQ(m.intermediate_size, 48);
  EXPECT_TRUE(m.tie_embeddings);
}

TEST(GraniteConfig, KeysLatCannotHonourAreNamedWithTheirValues) {
  nlohmann::json j = nlohmann::json::parse(
      lat::hf_config_json(model_config(kGraniteShape).model, 50, lat::SafetensorsDType::f32).dump());
  j["num_local_experts"] = 8;
  j["embedding_multiplier"] = 12.0;
  j["residual_multiplier"] = 0.22;
  j["logits_scaling"] = 8;
  j["attention_multiplier"] = 0.0078125;
  j["position_embedding_type"] = nullptr;
  j["layer_types"][2] = "moe";
  j["time_step_limit"] = nullptr;
  j["mamba_n_heads"] = 3;
  j["rope_parameters"]["rope_type"] = "llama3";
  j["mamba_dconv"] = 4;
  const std::string message = expect_error([&] { lat::model_config_from_hf(j, "d/config.json"); },
                                           {"load_model_weights"});
  EXPECT_EQ(message,
            "load_model_weights: 'd/config.json': keys lat cannot honour: "
            "layer_types[2]: \"moe\" (lat has mamba = mamba2 and attention = attn); "
            "rope_parameters.rope_type: \"llama3\" (lat honours only \"default\": plain RoPE); "
            "position_embedding_type: null (lat's attention layers always apply RoPE; lat honours only \"rope\" in a "
            "model with attention layers); "
            "mamba_n_heads: 3 heads of mamba_d_head 8 (expected mamba_expand * hidden_size = 32 channels); "
            "time_step_limit: expected [lo, hi] (numbers; hi may be {\"__float__\": \"Infinity\"}), got null; "
            "num_local_experts: 8 (lat honours only 0: a dense shared_mlp); "
            "embedding_multiplier: 12.0 (lat honours only 1: embeddings unscaled); "
            "residual_multiplier: 0.22 (lat honours only 1: residual branches unscaled); "
            "logits_scaling: 8 (lat honours only 1: logits unscaled); "
            "attention_multiplier: 0.0078125 (lat's attention scales by 1/sqrt(head_dim 8) = 0.353553); "
            "mamba_dconv: 4 (a key lat does not know, did you mean 'mamba_d_conv'?)");
  j = nlohmann::json::parse(
      lat::hf_config_json(model_config(kGraniteShape).model, 50, lat::SafetensorsDType::f32).dump());
  j.erase("num_local_experts");
  j.erase("attention_multiplier");
  expect_error([&] { lat::model_config_from_hf(j, "d/config.json"); },
               {"num_local_experts: missing: transformers' default 8 (lat honours only 0: a dense shared_mlp); "
                "attention_multiplier: missing: transformers' default 1 (lat's attention scales by 1/sqrt(head_dim "
                "8) = 0.353553)"});
}

TEST(GraniteConfig, ModelsGraniteCannotExpressAreRefusedNamingTheLayerAndTheFeature) {
  const std::string base = "  d_model: 16\n  n_layers: 2\n  n_heads: 2\n  mamba: {head_dim: 8, d_state: 8}\n";
  struct Case {
    std::string model;
    std::string message;
  };
  const std::vector<Case> cases = {
      {base + "  layers: \"mamba2,gdn\"\n",
       "export --format hf: layer 1 (gdn): a gdn mixer: granitemoehybrid has mamba2 (mamba) and attn (attention) "
       "layers only"},
      {base + "  layers: \"mamba2,attn\"\n  attn: {output_gate: true}\n",
       "export --format hf: layer 1 (attn): model.attn.output_gate true: granitemoehybrid's attention layers have no "
       "output gate (expected false)"},
      {base + "  layers: \"mamba2,attn\"\n  attn: {qk_norm: true}\n",
       "export --format hf: layer 1 (attn): model.attn.qk_norm true: granitemoehybrid's attention layers have no q/k "
       "norms (expected false)"},
      {base + "  layers: \"attn,mamba2\"\n  attn: {rope_fraction: 0.5}\n",
       "export --format hf: layer 0 (attn): model.attn.rope_fraction 0.5: granitemoehybrid's attention layers rotate "
       "the whole head (expected 1)"},
      {base + "  layers: \"mamba2,attn\"\n  attn: {window_size: 8}\n",
       "export --format hf: layer 1 (attn): model.attn.window_size 8: granitemoehybrid's attention layers have no "
       "sliding window (expected 0)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    const lat::Config config = model_config(c.model);
    EXPECT_EQ(expect_error<lat::ConfigError>([&] { lat::check_hf_expressible(config.model); }, {c.message}), c.message);
  }
  EXPECT_NO_THROW(lat::check_hf_expressible(model_config(kGraniteShape).model));
}

// ---- tensors -----------------------------------------------------------------------------

TEST(GraniteWeights, LatToTransformersToLatIsBitExact) {
  for (const std::string& shape : {kGraniteShape, kGraniteShape + "  tie_embeddings: true\n"}) {
    const lat::ModelConfig m = model_config(shape).model;
    const lat::NamedTensors lat_tensors = random_lat_tensors(m, 50);
    const lat::NamedTensors hf = lat::hf_tensors_from_lat(m, 50, lat_tensors, "test");
    const lat::NamedTensors back = lat::lat_tensors_from_hf(m, 50, hf, "test");
    ASSERT_EQ(back.size(), lat_tensors.size());
    for (const auto& [name, t] : lat_tensors) EXPECT_TRUE(bit_equal(find(back, name), t)) << name;
    EXPECT_EQ(find(hf, "model.layers.0.mamba.in_proj.weight").shape(), (lat::Shape{2 * 32 + 2 * 2 * 8 + 4, 16}));
    EXPECT_EQ(find(hf, "model.layers.2.mamba.conv1d.weight").shape(), (lat::Shape{32 + 2 * 2 * 8, 1, 4}));
    EXPECT_EQ(find(hf, "model.layers.1.self_attn.k_proj.weight").shape(), (lat::Shape{2 * 8, 16}));
    EXPECT_TRUE(
        bit_equal(find(hf, "model.layers.2.mamba.out_proj.bias"), find(lat_tensors, "layers.2.attn.out_proj.bias")));
    EXPECT_TRUE(
        bit_equal(find(hf, "model.layers.1.input_layernorm.weight"), find(lat_tensors, "layers.1.attn_norm.weight")));
    // input_linear: the SiLU half (gate) first, then up.
    std::vector<float> expected = find(lat_tensors, "layers.1.mlp.gate_proj.weight").to_vector<float>();
    const std::vector<float> up = find(lat_tensors, "layers.1.mlp.up_proj.weight").to_vector<float>();
    expected.insert(expected.end(), up.begin(), up.end());
    EXPECT_EQ(find(hf, "model.layers.1.shared_mlp.input_linear.weight").to_vector<float>(), expected);
    bool has_lm_head = false;
    for (const auto& [name, t] : hf) has_lm_head = has_lm_head || name == "lm_head.weight";
    EXPECT_EQ(has_lm_head, !m.tie_embeddings);
  }
}

TEST(GraniteWeights, NormsOfAZeroCentredModelAreStoredAsWPlusOne) {
  const lat::ModelConfig m = model_config(kGraniteShape + "  norm_zero_centered: true\n").model;
  const lat::NamedTensors lat_tensors = random_lat_tensors(m, 12);
  const lat::NamedTensors hf = lat::hf_tensors_from_lat(m, 12, lat_tensors, "test");
  for (const auto& [hf_name, lat_name] :
       {std::pair<std::string, std::string>{"model.layers.0.input_layernorm.weight", "layers.0.attn_norm.weight"},
        {"model.layers.1.post_attention_layernorm.weight", "layers.1.mlp_norm.weight"},
        {"model.norm.weight", "norm.weight"}}) {
    std::vector<float> expected = find(lat_tensors, lat_name).to_vector<float>();
    for (float& w : expected) w += 1.0f;
    EXPECT_EQ(find(hf, hf_name).to_vector<float>(), expected) << hf_name;
  }
  // The mamba layers' gated norm scales by w in both.
  EXPECT_TRUE(bit_equal(find(hf, "model.layers.0.mamba.norm.weight"), find(lat_tensors, "layers.0.attn.norm.weight")));
}

// ---- a directory written by hand as transformers lays it out -----------------------------

class GraniteDirTest : public TempDirTest {};

TEST_F(GraniteDirTest, HandWrittenDirectoryIsReadWithEachTensorInItsPlace) {
  fs::create_directories(path("granite"));
  write("granite/config.json", R"({
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "hidden_size": 8,
    "num_hidden_layers": 2, "vocab_size": 12, "layer_types": ["mamba", "attention"], "num_attention_heads": 2,
    "num_key_value_heads": 1, "attention_multiplier": 0.5, "mamba_n_heads": 2, "mamba_d_head": 8,
    "mamba_n_groups": 1, "mamba_d_state": 4, "mamba_d_conv": 2, "mamba_expand": 2, "mamba_chunk_size": 4,
    "num_local_experts": 0, "position_embedding_type": "rope", "shared_intermediate_size": 8,
    "tie_word_embeddings": true, "rms_norm_eps": 1e-05,
    "time_step_limit": [0.0, {"__float__": "Infinity"}]})");
  // d_inner 16, 2 heads of 8, conv channels 16 + 2 * 4 = 24; attention heads of 4.
  const std::vector<std::pair<std::string, lat::Shape>> shapes = {
      {"model.embed_tokens.weight", {12, 8}},
      {"model.layers.0.input_layernorm.weight", {8}},
      {"model.layers.0.mamba.in_proj.weight", {2 * 16 + 2 * 4 + 2, 8}},
      {"model.layers.0.mamba.conv1d.weight", {24, 1, 2}},
      {"model.layers.0.mamba.conv1d.bias", {24}},
      {"model.layers.0.mamba.dt_bias", {2}},
      {"model.layers.0.mamba.A_log", {2}},
      {"model.layers.0.mamba.D", {2}},
      {"model.layers.0.mamba.norm.weight", {16}},
      {"model.layers.0.mamba.out_proj.weight", {8, 16}},
      {"model.layers.0.post_attention_layernorm.weight", {8}},
      {"model.layers.0.shared_mlp.input_linear.weight", {16, 8}},
      {"model.layers.0.shared_mlp.output_linear.weight", {8, 8}},
      {"model.layers.1.input_layernorm.weight", {8}},
      {"model.layers.1.self_attn.q_proj.weight", {8, 8}},
      {"model.layers.1.self_attn.k_proj.weight", {4, 8}},
      {"model.layers.1.self_attn.v_proj.weight", {4, 8}},
      {"model.layers.1.self_attn.o_proj.weight", {8, 8}},
      {"model.layers.1.post_attention_layernorm.weight", {8}},
      {"model.layers.1.shared_mlp.input_linear.weight", {16, 8}},
      {"model.layers.1.shared_mlp.output_linear.weight", {8, 8}},
      {"model.norm.weight", {8}},
  };
  // Tensor k holds k + i / 1024 at flat index i: every value says where it came from.
  lat::NamedTensors hf;
  for (size_t k = 0; k < shapes.size(); ++k) {
    int64_t n = 1;
    for (int64_t s : shapes[k].second) n *= s;
    std::vector<float> values(static_cast<size_t>(n));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(k) + static_cast<float>(i) / 1024.0f;
    hf.emplace_back(shapes[k].first, lat::Tensor::from_vector(values, shapes[k].second));
  }
  lat::save_safetensors(path("granite/model.safetensors"), hf, lat::SafetensorsDType::f32, {{"format", "pt"}});

  const lat::ModelWeights w = lat::load_model_weights(path("granite"));
  EXPECT_EQ(w.format, lat::ModelFormat::hf);
  EXPECT_EQ(w.config.model.layers, "mamba2,attn");
  EXPECT_EQ(w.config.model.norm_eps, 1e-5);
  EXPECT_EQ(w.checkpoint.tokenizer_type, "none");
  const lat::NamedTensors& got = w.checkpoint.model;
  EXPECT_EQ(got.size(), shapes.size() + 2);  // input_linear is two lat tensors in each layer
  const auto value = [&](const std::string& name, int64_t i) { return find(got, name).to_vector<float>()[i]; };
  EXPECT_EQ(value("embeddings.weight", 5), 0 + 5 / 1024.0f);
  EXPECT_EQ(value("layers.0.attn.in_proj.weight", 3), 2 + 3 / 1024.0f);
  EXPECT_EQ(value("layers.0.attn.conv1d.bias", 23), 4 + 23 / 1024.0f);
  EXPECT_EQ(value("layers.0.attn.A_log", 1), 6 + 1 / 1024.0f);
  EXPECT_EQ(value("layers.0.attn.D", 0), 7.0f);
  EXPECT_EQ(value("layers.0.mlp.gate_proj.weight", 63), 11 + 63 / 1024.0f);  // input_linear rows [0, 8)
  EXPECT_EQ(value("layers.0.mlp.up_proj.weight", 0), 11 + 64 / 1024.0f);     // rows [8, 16)
  EXPECT_EQ(value("layers.0.mlp.down_proj.weight", 9), 12 + 9 / 1024.0f);
  EXPECT_EQ(value("layers.1.attn.k_proj.weight", 31), 15 + 31 / 1024.0f);
  EXPECT_EQ(value("layers.1.mlp_norm.weight", 2), 18 + 2 / 1024.0f);  // norms scale by w in both
  EXPECT_EQ(value("norm.weight", 7), 21 + 7 / 1024.0f);
  EXPECT_EQ(find(got, "layers.0.mlp.up_proj.weight").shape(), (lat::Shape{8, 8}));
  // The model builds from them, and a tensor missing from the file is named as the file names it.
  lat::NoGradGuard no_grad;
  const lat::Tensor ids = lat::Tensor::from_vector(std::vector<int64_t>{1, 5, 2}, {1, 3});
  EXPECT_EQ(lat::model_from_weights(w)->forward(ids).shape(), (lat::Shape{1, 3, 12}));
  // init_from: DIR copies every tensor into a model of the config's shape, and names a
  // mismatch as the file does.
  lat::Generator gen(1);
  const lat::HybridLM model(lat::hybrid_lm_config(w.config.model, 12), gen);
  EXPECT_EQ(lat::init_from_weights(model, w, true).loaded.size(), got.size());
  for (const auto& [name, t] : model.named_parameters()) EXPECT_TRUE(bit_equal(t, find(got, name))) << name;
  lat::ModelConfig narrower = w.config.model;
  narrower.intermediate_size = 4;
  const lat::HybridLM narrow(lat::hybrid_lm_config(narrower, 12), gen);
  expect_error([&] { lat::init_from_weights(narrow, w, true); },
               {"init_from '" + path("granite/model.safetensors") + "' does not fit the model",
                "layers.0.mlp.up_proj.weight ('model.layers.0.shared_mlp.input_linear.weight' rows [8, 16) in the "
                "file): checkpoint [8, 8], model [4, 8]"});

  hf.erase(hf.begin() + 5);
  lat::save_safetensors(path("granite/model.safetensors"), hf, lat::SafetensorsDType::f32, {{"format", "pt"}});
  expect_error([&] { lat::load_model_weights(path("granite")); },
               {"'" + path("granite/model.safetensors") +
                "' has no tensor 'model.layers.0.mamba.dt_bias' (expected [2] from config.json)"});
}

// ---- the CLI -----------------------------------------------------------------------------

class GraniteCliTest : public TempDirTest {
 protected:
  /// A checkpoint of a freshly initialized model of `shape` with the char tokenizer.
  std::string save_checkpoint(const std::string& file, const std::string& shape) {
    const lat::Config cfg = model_config(shape);
    lat::Generator gen(3);
    lat::HybridLM model(lat::hybrid_lm_config(cfg.model, 12), gen);
    lat::Checkpoint c;
    c.config_yaml = lat::to_yaml(cfg);
    c.tokenizer_type = "char";
    c.tokenizer_vocab = kVocab;
    for (const auto& [name, t] : model.named_parameters()) c.model.emplace_back(name, t.detach().clone());
    lat::save_checkpoint(path(file), c);
    return path(file);
  }
};

TEST_F(GraniteCliTest, ExportedMambaHybridReadsBackBitForBitAndGeneratesTheSameText) {
  for (const std::string& shape : {kGraniteShape, kGraniteShape + "  tie_embeddings: true\n"}) {
    SCOPED_TRACE(shape);
    fs::remove_all(path("hf"));
    fs::remove_all(path("hf2"));
    const std::string ckpt = save_checkpoint("model.h5", shape);
    std::string out;
    ASSERT_EQ(run_lat("export --checkpoint '" + ckpt + "' --format hf --out '" + path("hf") + "'", out, dir_), 0)
        << out;
    EXPECT_EQ(nlohmann::json::parse(read_bytes(path("hf/config.json")))["model_type"], "granitemoehybrid");
    const lat::ModelWeights original = lat::load_model_weights(ckpt);
    const lat::ModelWeights exported = lat::load_model_weights(path("hf"));
    ASSERT_EQ(exported.checkpoint.model.size(), original.checkpoint.model.size());
    for (const auto& [name, t] : original.checkpoint.model)
      EXPECT_TRUE(bit_equal(find(exported.checkpoint.model, name), t)) << name;
    lat::NoGradGuard no_grad;
    const lat::Tensor ids = lat::Tensor::from_vector(std::vector<int64_t>{1, 5, 2, 9, 11, 0, 3, 3, 7}, {1, 9});
    EXPECT_TRUE(
        bit_equal(lat::model_from_weights(exported)->forward(ids), lat::model_from_weights(original)->forward(ids)));

    // Exported again from the directory: the same bytes.
    ASSERT_EQ(run_lat("export --checkpoint '" + path("hf") + "' --format hf --out '" + path("hf2") + "'", out, dir_), 0)
        << out;
    for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"})
      EXPECT_EQ(read_bytes(path("hf2/" + std::string(file))), read_bytes(path("hf/" + std::string(file)))) << file;

    const std::string gen = "--prompt 'abc' --max-new-tokens 24 --temperature 0 --seed 0";
    std::string from_ckpt, from_hf;
    ASSERT_EQ(run_lat("generate --checkpoint '" + ckpt + "' " + gen, from_ckpt, dir_), 0) << from_ckpt;
    ASSERT_EQ(run_lat("generate --checkpoint '" + path("hf") + "' " + gen, from_hf, dir_), 0) << from_hf;
    EXPECT_EQ(from_hf, from_ckpt);
    EXPECT_GT(from_ckpt.size(), 3u);
  }
}

TEST_F(GraniteCliTest, RefusedExportCreatesNoDirectory) {
  const std::string ckpt = save_checkpoint(
      "model.h5",
      "  d_model: 16\n  n_layers: 2\n  n_heads: 2\n  layers: \"mamba2,attn\"\n  mamba: {head_dim: 8}\n"
      "  attn: {output_gate: true}\n");
  std::string out;
  EXPECT_EQ(run_lat("export --checkpoint '" + ckpt + "' --format hf --out '" + path("hf") + "'", out, dir_), 2);
  EXPECT_TRUE(contains(out, "error: export --format hf: layer 1 (attn): model.attn.output_gate true")) << out;
  EXPECT_FALSE(fs::exists(path("hf")));
}

}  // namespace
