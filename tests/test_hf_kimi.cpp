// The Hugging Face kimi_linear family (train/files/hf_kimi.h): config.json both ways with known
// values, Moonshot's linear_attn_config form, the keys lat cannot honour named, export
// refusals naming the layer and the feature; tensors lat -> transformers -> lat bit for bit
// (A_log as [1, 1, H, 1], a tied model's lm_head written as a copy); transformers' in-memory
// names read; a tied config.json beside an lm_head of its own read as untied, init_from of a
// directory; and the CLI: a kda + mla checkpoint exported, read back bit for bit, exported
// again to the same bytes, generating the same text.
#include <algorithm>
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
#include "train/files/hf_kimi.h"
#include "train/files/hf_weights.h"
#include "train/files/model_reader.h"
#include "train/files/safetensors.h"
#include "train/files/trained_model.h"
#include "train/run/finetune.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

// kda, mla, kda: 2 kda heads of 8; 2 mla heads over a latent of 8, key parts 4 + 2, values of
// 6. (No linear.chunk_size: config.json has none, so a model read back has lat's default, and
// the same chunks give the same bits.)
const std::string kKimiShape =
    "  d_model: 16\n  n_layers: 3\n  n_heads: 2\n  head_dim: 8\n  layers: \"kda,mla,kda\"\n  intermediate_size: 24\n"
    "  attn: {n_heads: 2}\n  mla: {kv_lora_rank: 8, qk_nope_head_dim: 4, qk_rope_head_dim: 2, v_head_dim: 6}\n";

/// kKimiShape with `from` (which it holds) replaced by `to`.
std::string kimi_shape_with(const std::string& from, const std::string& to) {
  std::string shape = kKimiShape;
  const size_t at = shape.find(from);
  if (at == std::string::npos) throw lat::Error("test: the shape has no '" + from + "'");
  return shape.replace(at, from.size(), to);
}

/// kKimiShape with more model.mla keys (", key: value").
std::string kimi_shape_with_mla(const std::string& keys) {
  return kimi_shape_with("v_head_dim: 6", "v_head_dim: 6" + keys);
}

// Tied, with a low-rank query.
const std::string kTiedQLoraShape = kimi_shape_with_mla(", q_lora_rank: 4") + "  tie_embeddings: true\n";

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

bool has(const lat::NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

/// `j` through the config.json reader into a resolved model config.
lat::ModelConfig resolved_from_hf(const nlohmann::json& j) {
  lat::Config c;
  c.model = lat::model_config_from_hf(j, "d/config.json");
  c.data.path = "none";
  c.train.out_dir = "runs/t";
  return lat::parse_config(lat::to_yaml(c), "test").model;
}

nlohmann::json kimi_json(const std::string& shape) {
  return nlohmann::json::parse(lat::hf_config_json(model_config(shape).model, 50, lat::SafetensorsDType::f32).dump());
}

// ---- config.json -------------------------------------------------------------------------

TEST(KimiConfig, WritesKimiKeysAndReadsThemBack) {
  const lat::ModelConfig m = model_config(kKimiShape).model;
  EXPECT_EQ(lat::hf_family_of(m), lat::HfFamily::kimi);
  const nlohmann::ordered_json j = lat::hf_config_json(m, 50, lat::SafetensorsDType::bf16);
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "architectures": ["KimiLinearForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": null, "dtype": "bfloat16", "eos_token_id": null, "hidden_act": "silu", "hidden_size": 16,
    "initializer_range": 0.02, "intermediate_size": 24, "kv_lora_rank": 8,
    "layer_types": ["linear_attention", "full_attention", "linear_attention"], "linear_conv_kernel_dim": 4,
    "linear_head_dim": 8, "linear_num_heads": 2, "mlp_layer_types": ["dense", "dense", "dense"],
    "model_max_length": 1048576, "model_type": "kimi_linear", "num_attention_heads": 2, "num_experts": 0,
    "num_hidden_layers": 3, "num_key_value_heads": 2, "pad_token_id": null, "q_lora_rank": null,
    "qk_nope_head_dim": 4, "qk_rope_head_dim": 2, "rms_norm_eps": 1e-06, "tie_word_embeddings": false,
    "use_cache": true, "v_head_dim": 6, "vocab_size": 50})");
  EXPECT_EQ(nlohmann::json::parse(j.dump()), expected) << j.dump(2);
  std::vector<std::string> keys;
  for (const auto& [key, v] : j.items()) keys.push_back(key);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));  // as save_pretrained writes them

  lat::ModelConfig back = resolved_from_hf(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back.vocab_size, 50);
  back.vocab_size = m.vocab_size;  // the shape's own is 0: from the tokenizer
  EXPECT_EQ(back, m);

  const nlohmann::json with_q_lora = kimi_json(kimi_shape_with_mla(", q_lora_rank: 4"));
  EXPECT_EQ(with_q_lora["q_lora_rank"], 4);
  EXPECT_EQ(resolved_from_hf(with_q_lora).mla.q_lora_rank, 4);
}

TEST(KimiConfig, MoonshotsFormAndTransformersDefaultsAreRead) {
  // Kimi-Linear's own config.json form: linear_attn_config (1-based layer lists), experts keys
  // beside first_k_dense_replace covering every layer, derived head_dim, RoPE keys of a NoPE model.
  const nlohmann::json j = nlohmann::json::parse(R"({
    "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"], "hidden_size": 32,
    "num_hidden_layers": 4, "vocab_size": 40, "intermediate_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": null, "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 0, "v_head_dim": 8, "head_dim": 72, "mla_use_nope": true, "rope_theta": 10000.0,
    "rope_scaling": null, "first_k_dense_replace": 4, "num_experts": 256, "num_experts_per_token": 8,
    "moe_intermediate_size": 1024, "moe_layer_freq": 1, "use_grouped_topk": true, "num_nextn_predict_layers": 0,
    "linear_attn_config": {"full_attn_layers": [2, 4], "kda_layers": [1, 3], "head_dim": 16, "num_heads": 2,
                           "short_conv_kernel_size": 3},
    "linear_head_dim": 128, "linear_num_heads": 32, "tie_word_embeddings": false})");
  const lat::ModelConfig m = resolved_from_hf(j);
  EXPECT_EQ(m.layers, "kda,mla,kda,mla");
  EXPECT_EQ(m.n_heads, 2);  // linear_attn_config's, not the top-level keys'
  EXPECT_EQ(m.head_dim, 16);
  EXPECT_EQ(m.linear.conv_size, 3);
  EXPECT_EQ(m.attn.n_heads, 4);
  EXPECT_EQ(m.mla.q_lora_rank, 0);
  EXPECT_EQ(m.mla.qk_rope_head_dim, 0);
  EXPECT_EQ(m.mla.kv_lora_rank, 16);
  EXPECT_EQ(m.norm_eps, 1e-5);  // transformers' default
  EXPECT_FALSE(m.mla.rope);
  EXPECT_FALSE(m.norm_zero_centered);
  EXPECT_EQ(m.expand_v, 1.0);

  // Neither layer_types nor linear_attn_config: full attention at every 4th layer after the first.
  nlohmann::json plain = j;
  plain.erase("linear_attn_config");
  plain["num_hidden_layers"] = 6;
  plain["first_k_dense_replace"] = 6;
  EXPECT_EQ(resolved_from_hf(plain).layers, "kda,kda,kda,kda,mla,kda");
}

TEST(KimiConfig, KeysLatCannotHonourAreNamedWithTheirValues) {
  nlohmann::json j = kimi_json(kKimiShape);
  j["mlp_layer_types"][1] = "sparse";
  j["num_key_value_heads"] = 1;
  j["mla_use_nope"] = false;
  j["hidden_act"] = "gelu";
  j["attention_bias"] = true;
  j["layer_types"][2] = "moe";
  j["linear_attn_config"] = {{"head_dim", 8}, {"gate_rank", 4}};
  j["qk_rope_head_dim"] = -1;
  j["linear_num_head"] = 2;
  EXPECT_EQ(expect_error([&] { lat::model_config_from_hf(j, "d/config.json"); }, {"load_model_weights"}),
            "load_model_weights: 'd/config.json': keys lat cannot honour: "
            "linear_attn_config.gate_rank: 4 (a key lat does not know); "
            "layer_types[2]: \"moe\" (lat has linear_attention = kda and full_attention = mla); "
            "mlp_layer_types[1]: \"sparse\" (lat honours only \"dense\": a dense MLP in every layer, no experts); "
            "num_key_value_heads: 1 (lat honours only num_attention_heads 2: every mla head expands its own key and "
            "value from the latent); "
            "qk_rope_head_dim: expected an integer >= 0, got -1; "
            "hidden_act: \"gelu\" (lat honours only \"silu\": SiLU in the MLP and after the short convolutions); "
            "attention_bias: true (lat honours only false: projections without bias); "
            "mla_use_nope: false (lat honours only true: no position encoding in the full_attention layers); "
            "linear_num_head: 2 (a key lat does not know, did you mean 'linear_num_heads'?)");
  // Without mlp_layer_types transformers makes every layer from first_k_dense_replace (1 by
  // default) on MoE.
  j = kimi_json(kKimiShape);
  j.erase("mlp_layer_types");
  expect_error([&] { lat::model_config_from_hf(j, "d/config.json"); },
               {"first_k_dense_replace: 1 (transformers' default) without mlp_layer_types makes layers from it on MoE "
                "(lat honours only a dense MLP in every layer: expected num_hidden_layers 3 or more)"});
  j["first_k_dense_replace"] = 3;
  EXPECT_EQ(resolved_from_hf(j).layers, "kda,mla,kda");
  j = kimi_json(kKimiShape);
  j["linear_attn_config"] = {{"kda_layers", {1, 3}}, {"full_attn_layers", {0}}};
  j.erase("layer_types");
  expect_error([&] { lat::model_config_from_hf(j, "d/config.json"); },
               {"linear_attn_config.full_attn_layers: 0 (expected a layer number in [1, 3], 1-based); "
                "linear_attn_config: layer 2 (1-based) is in neither kda_layers nor full_attn_layers"});
  j = kimi_json(kKimiShape);
  j["linear_attn_config"] = {{"kda_layers", {1, 2, 3}}, {"full_attn_layers", {2}}};
  j.erase("layer_types");
  expect_error([&] { lat::model_config_from_hf(j, "d/config.json"); },
               {"linear_attn_config: layer 2 (1-based) is in both kda_layers and full_attn_layers"});
  // Without num_attention_heads the head count is transformers' default, which the error says,
  // so that the missing key is found rather than the key/value head count changed.
  j = kimi_json(kKimiShape);
  j.erase("num_attention_heads");
  expect_error([&] { lat::model_config_from_hf(j, "d/config.json"); },
               {"num_key_value_heads: 2 (lat honours only num_attention_heads 32, transformers' default as "
                "config.json has no num_attention_heads: every mla head expands its own key and value from the "
                "latent)"});
}

TEST(KimiConfig, ModelsKimiCannotExpressAreRefusedNamingTheLayerAndTheFeature) {
  struct Case {
    std::string model;
    std::string message;
  };
  const std::vector<Case> cases = {
      {kimi_shape_with("\"kda,mla,kda\"", "\"kda,attn\""),
       "export --format hf: layer 1 (attn): a attn mixer: kimi_linear has kda (linear_attention) and mla "
       "(full_attention) layers only"},
      {kKimiShape + "  linear: {use_short_conv: false}\n",
       "export --format hf: layer 0 (kda): model.linear.use_short_conv false: kimi_linear's linear_attention layers "
       "have short convolutions (expected true)"},
      {kKimiShape + "  linear: {use_gate: false}\n",
       "export --format hf: layer 0 (kda): model.linear.use_gate false: kimi_linear's linear_attention layers have "
       "the gated output norm (expected true)"},
      {kKimiShape + "  expand_v: 2.0\n",
       "export --format hf: layer 0 (kda): model.expand_v 2: kimi_linear's linear_attention layers have value head "
       "dim = key head dim (expected 1)"},
      {kimi_shape_with_mla(", rope: true"),
       "export --format hf: layer 1 (mla): model.mla.rope true: kimi_linear's full_attention layers have no "
       "position encoding (expected false)"},
      {kimi_shape_with("n_heads: 2}", "n_heads: 2, window_size: 8}"),
       "export --format hf: layer 1 (mla): model.attn.window_size 8: kimi_linear's full_attention layers have no "
       "sliding window (expected 0)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    const lat::Config config = model_config(c.model);
    EXPECT_EQ(expect_error<lat::ConfigError>([&] { lat::check_hf_expressible(config.model); }, {c.message}), c.message);
  }
  EXPECT_NO_THROW(lat::check_hf_expressible(model_config(kKimiShape).model));
  // mla alone is kimi_linear's too.
  EXPECT_EQ(lat::hf_family_of(model_config(kimi_shape_with("\"kda,mla,kda\"", "\"mla\"")).model), lat::HfFamily::kimi);
}

// ---- tensors -----------------------------------------------------------------------------

TEST(KimiWeights, LatToTransformersToLatIsBitExact) {
  for (const std::string& shape : {kKimiShape, kTiedQLoraShape}) {
    SCOPED_TRACE(shape);
    const lat::ModelConfig m = model_config(shape).model;
    const lat::NamedTensors lat_tensors = random_lat_tensors(m, 50);
    const lat::NamedTensors hf = lat::hf_tensors_from_lat(m, 50, lat_tensors, "test");
    const lat::NamedTensors back = lat::lat_tensors_from_hf(m, 50, hf, "test");
    ASSERT_EQ(back.size(), lat_tensors.size());
    for (const auto& [name, t] : lat_tensors) EXPECT_TRUE(bit_equal(find(back, name), t)) << name;
    // A_log as transformers' [1, 1, H, 1], the same values.
    const lat::Tensor& a_log = find(hf, "model.layers.2.self_attn.A_log");
    EXPECT_EQ(a_log.shape(), (lat::Shape{1, 1, 2, 1}));
    EXPECT_EQ(a_log.to_vector<float>(), find(lat_tensors, "layers.2.attn.A_log").to_vector<float>());
    EXPECT_EQ(find(hf, "model.layers.0.self_attn.v_conv1d.weight").shape(), (lat::Shape{16, 1, 4}));
    EXPECT_EQ(find(hf, "model.layers.0.self_attn.f_b_proj.weight").shape(), (lat::Shape{16, 8}));
    EXPECT_EQ(find(hf, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight").shape(), (lat::Shape{8 + 2, 16}));
    EXPECT_EQ(find(hf, "model.layers.1.self_attn.kv_b_proj.weight").shape(), (lat::Shape{2 * (4 + 6), 8}));
    EXPECT_TRUE(bit_equal(find(hf, "model.layers.1.block_sparse_moe.down_proj.weight"),
                          find(lat_tensors, "layers.1.mlp.down_proj.weight")));
    EXPECT_EQ(has(hf, "model.layers.1.self_attn.q_proj.weight"), m.mla.q_lora_rank == 0);
    EXPECT_EQ(has(hf, "model.layers.1.self_attn.q_a_layernorm.weight"), m.mla.q_lora_rank > 0);
    // transformers ties nothing here: a tied model's lm_head is written as a copy.
    EXPECT_TRUE(bit_equal(find(hf, "lm_head.weight"),
                          find(lat_tensors, m.tie_embeddings ? "embeddings.weight" : "lm_head.weight")));
  }
}

TEST(KimiWeights, NormsOfAZeroCentredModelAreStoredAsWPlusOneAndTheLayersOwnAsThey) {
  const lat::ModelConfig m = model_config(kKimiShape + "  norm_zero_centered: true\n").model;
  const lat::NamedTensors lat_tensors = random_lat_tensors(m, 12);
  const lat::NamedTensors hf = lat::hf_tensors_from_lat(m, 12, lat_tensors, "test");
  std::vector<float> expected = find(lat_tensors, "layers.1.mlp_norm.weight").to_vector<float>();
  for (float& w : expected) w += 1.0f;
  EXPECT_EQ(find(hf, "model.layers.1.post_attention_layernorm.weight").to_vector<float>(), expected);
  // kda's output norm and mla's latent norm scale by w in both.
  EXPECT_TRUE(
      bit_equal(find(hf, "model.layers.0.self_attn.o_norm.weight"), find(lat_tensors, "layers.0.attn.o_norm.weight")));
  EXPECT_TRUE(bit_equal(find(hf, "model.layers.1.self_attn.kv_a_layernorm.weight"),
                        find(lat_tensors, "layers.1.attn.kv_a_layernorm.weight")));
}

TEST(KimiWeights, TransformersInMemoryNamesAreReadAsSavePretrainedsNames) {
  const lat::ModelConfig m = model_config(kKimiShape).model;
  const lat::NamedTensors lat_tensors = random_lat_tensors(m, 12);
  const lat::NamedTensors saved = lat::hf_tensors_from_lat(m, 12, lat_tensors, "test");
  // The state dict of a loaded model: forget_gate.*, one conv1d of q | k | v, mlp.*.
  lat::NamedTensors in_memory;
  std::vector<float> conv;
  for (const auto& [name, t] : saved) {
    const bool conv_part = name.find("_conv1d.weight") != std::string::npos;
    if (conv_part && name.find("layers.0.") != std::string::npos) {
      const std::vector<float> v = t.to_vector<float>();
      conv.insert(conv.end(), v.begin(), v.end());
      if (name.find("v_conv1d") != std::string::npos)
        in_memory.emplace_back("model.layers.0.self_attn.conv1d.weight", lat::Tensor::from_vector(conv, {48, 1, 4}));
      continue;
    }
    std::string renamed = name;
    for (const char* gate : {"f_a_proj", "f_b_proj", "A_log", "dt_bias"})
      if (const size_t at = renamed.find(std::string("self_attn.") + gate); at != std::string::npos)
        renamed.insert(at + std::string("self_attn.").size(), "forget_gate.");
    if (const size_t at = renamed.find("block_sparse_moe."); at != std::string::npos) renamed.replace(at, 17, "mlp.");
    in_memory.emplace_back(renamed, t);
  }
  ASSERT_TRUE(has(in_memory, "model.layers.2.self_attn.forget_gate.A_log"));
  ASSERT_TRUE(has(in_memory, "model.layers.2.mlp.up_proj.weight"));
  const lat::NamedTensors back = lat::lat_tensors_from_hf(m, 12, in_memory, "test");
  ASSERT_EQ(back.size(), lat_tensors.size());
  for (const auto& [name, t] : lat_tensors) EXPECT_TRUE(bit_equal(find(back, name), t)) << name;
}

// ---- directories -------------------------------------------------------------------------

class KimiDirTest : public TempDirTest {};

TEST_F(KimiDirTest, ATiedConfigIsUntiedByAnLmHeadOfItsOwnAndRefusedWithoutOne) {
  const std::string tied = kKimiShape + "  tie_embeddings: true\n";
  const lat::NamedTensors lat_tensors = write_hf_dir(path("kimi"), tied, 12);
  lat::ModelWeights w = lat::load_model_weights(path("kimi"));
  EXPECT_EQ(w.format, lat::ModelFormat::hf);
  EXPECT_TRUE(w.config.model.tie_embeddings);  // lm_head a copy: tied
  EXPECT_FALSE(has(w.checkpoint.model, "lm_head.weight"));
  // init_from: DIR copies every tensor into a model of the config's shape.
  lat::Generator gen(1);
  const lat::HybridLM tied_model(lat::hybrid_lm_config(w.config.model, 12), gen);
  EXPECT_EQ(lat::init_from_weights(tied_model, w, true).loaded.size(), w.checkpoint.model.size());
  for (const auto& [name, t] : tied_model.named_parameters())
    EXPECT_TRUE(bit_equal(t, find(lat_tensors, name))) << name;

  // transformers' KimiLinearForCausalLM computes with lm_head.weight whatever
  // tie_word_embeddings says: one of its own makes the model untied.
  const lat::ModelConfig m = model_config(tied).model;
  lat::NamedTensors hf = lat::hf_tensors_from_lat(m, 12, lat_tensors, "t");
  std::vector<float> head = find(hf, "lm_head.weight").to_vector<float>();
  head[5] += 1.0f;
  for (auto& [name, t] : hf)
    if (name == "lm_head.weight") t = lat::Tensor::from_vector(head, t.shape());
  lat::save_safetensors(path("kimi/model.safetensors"), hf, lat::SafetensorsDType::f32, {{"format", "pt"}});
  w = lat::load_model_weights(path("kimi"));
  EXPECT_FALSE(w.config.model.tie_embeddings);
  EXPECT_EQ(find(w.checkpoint.model, "lm_head.weight").to_vector<float>(), head);
  lat::NoGradGuard no_grad;
  const lat::Tensor ids = lat::Tensor::from_vector(std::vector<int64_t>{1, 5, 2}, {1, 3});
  EXPECT_EQ(lat::model_from_weights(w)->forward(ids).shape(), (lat::Shape{1, 3, 12}));

  // Without lm_head.weight transformers would start it at random: refused, naming it.
  hf.pop_back();
  lat::save_safetensors(path("kimi/model.safetensors"), hf, lat::SafetensorsDType::f32, {{"format", "pt"}});
  expect_error([&] { lat::load_model_weights(path("kimi")); },
               {"'" + path("kimi/model.safetensors") +
                "' has no tensor 'lm_head.weight' (expected [12, 16] from "
                "config.json)"});
}

// A config.json that leaves an mla size to transformers' default (kv_lora_rank 512) beside
// tensors of another size: the error names the missing key and its default, not config.json's
// sizes as if it gave them.
TEST_F(KimiDirTest, AnMlaSizeLeftToTransformersDefaultIsNamedWhenTheTensorsDisagree) {
  write_hf_dir(path("kimi"), kKimiShape, 12);
  const auto write_config_without = [&](const std::vector<std::string>& keys) {
    nlohmann::json j = nlohmann::json::parse(read_bytes(path("kimi/config.json")));
    for (const std::string& key : keys) j.erase(key);
    write_bytes(path("kimi/config.json"), j.dump(2));
  };
  write_config_without({"kv_lora_rank"});
  expect_error([&] { lat::load_model_weights(path("kimi")); },
               {"load_model_weights: '" + path("kimi/config.json") +
                "' has no kv_lora_rank (transformers' default 512), but tensor "
                "'model.layers.1.self_attn.kv_a_proj_with_mqa.weight' of '" + path("kimi/model.safetensors") +
                "' is [10, 16], expected [514, 16] (kv_lora_rank + qk_rope_head_dim rows): set kv_lora_rank in "
                "config.json"});
  write_config_without({"qk_rope_head_dim"});
  expect_error([&] { lat::load_model_weights(path("kimi")); },
               {"'" + path("kimi/config.json") +
                "' has no qk_rope_head_dim (transformers' default 64), but tensor "
                "'model.layers.1.self_attn.q_proj.weight' of '" + path("kimi/model.safetensors") +
                "' is [12, 16], expected [136, 16] (num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim) "
                "rows): set qk_rope_head_dim in config.json"});
  // A size config.json gives, wrong, is config.json's.
  write_hf_dir(path("kimi"), kKimiShape, 12);
  nlohmann::json j = nlohmann::json::parse(read_bytes(path("kimi/config.json")));
  j["kv_lora_rank"] = 6;
  write_bytes(path("kimi/config.json"), j.dump(2));
  expect_error([&] { lat::load_model_weights(path("kimi")); },
               {"'" + path("kimi/model.safetensors") +
                "': tensor 'model.layers.1.self_attn.kv_a_proj_with_mqa.weight': expected shape [8, 16] (from "
                "config.json), got [10, 16]"});
}

// A config.json without the keys that say which layers are which (layer_types, or both of
// linear_attn_config's kda_layers and full_attn_layers) takes transformers' default pattern;
// tensors of the other kind in a layer name the missing key and that default, not a shape.
TEST_F(KimiDirTest, LayerTypesLeftToTransformersDefaultAreNamedWhenTheTensorsDisagree) {
  const auto write_config_without_layer_types = [&](const nlohmann::json& linear_attn_config) {
    nlohmann::json j = nlohmann::json::parse(read_bytes(path("kimi/config.json")));
    j.erase("layer_types");
    if (!linear_attn_config.is_null()) j["linear_attn_config"] = linear_attn_config;
    write_bytes(path("kimi/config.json"), j.dump(2));
  };
  const std::string config = path("kimi/config.json"), weights = path("kimi/model.safetensors");
  write_hf_dir(path("kimi"), kKimiShape, 12);
  write_config_without_layer_types(nullptr);
  const std::string mla_in_layer_1 =
      "load_model_weights: '" + config +
      "' has no layer_types (nor both of linear_attn_config's kda_layers and full_attn_layers), so transformers' "
      "default makes layer 1 linear_attention (kda) (full_attention at 0-based layers 4, 8, ...), but tensor "
      "'model.layers.1.self_attn.kv_a_proj_with_mqa.weight' of '" + weights +
      "' is a full_attention (mla) layer's: set layer_types in config.json";
  expect_error([&] { lat::load_model_weights(path("kimi")); }, {mla_in_layer_1});
  // One of the two lists is not enough: transformers reads neither.
  write_config_without_layer_types({{"kda_layers", {1, 3}}});
  expect_error([&] { lat::load_model_weights(path("kimi")); }, {mla_in_layer_1});
  // Both lists say it: read as they say.
  write_config_without_layer_types({{"kda_layers", {1, 3}}, {"full_attn_layers", {2}}});
  EXPECT_EQ(lat::load_model_weights(path("kimi")).config.model.layers, "kda,mla,kda");

  // The other way round: the default's full_attention layer 4 holds kda tensors.
  write_hf_dir(path("kimi"),
               kimi_shape_with("n_layers: 3\n  n_heads: 2\n  head_dim: 8\n  layers: \"kda,mla,kda\"",
                               "n_layers: 5\n  n_heads: 2\n  head_dim: 8\n  layers: \"kda\""),
               12);
  write_config_without_layer_types(nullptr);
  expect_error([&] { lat::load_model_weights(path("kimi")); },
               {"load_model_weights: '" + config +
                "' has no layer_types (nor both of linear_attn_config's kda_layers and full_attn_layers), so "
                "transformers' default makes layer 4 full_attention (mla) (full_attention at 0-based layers 4, 8, "
                "...), but tensor 'model.layers.4.self_attn.A_log' of '" + weights +
                "' is a linear_attention (kda) layer's: set layer_types in config.json"});
}

// ---- the CLI -----------------------------------------------------------------------------

class KimiCliTest : public TempDirTest {
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

TEST_F(KimiCliTest, ExportedKdaMlaModelReadsBackBitForBitAndGeneratesTheSameText) {
  for (const std::string& shape : {kKimiShape, kTiedQLoraShape}) {
    SCOPED_TRACE(shape);
    fs::remove_all(path("hf"));
    fs::remove_all(path("hf2"));
    const std::string ckpt = save_checkpoint("model.h5", shape);
    std::string out;
    ASSERT_EQ(run_lat("export --checkpoint '" + ckpt + "' --format hf --out '" + path("hf") + "'", out, dir_), 0)
        << out;
    EXPECT_EQ(nlohmann::json::parse(read_bytes(path("hf/config.json")))["model_type"], "kimi_linear");
    const lat::ModelWeights original = lat::load_model_weights(ckpt);
    const lat::ModelWeights exported = lat::load_model_weights(path("hf"));
    EXPECT_EQ(exported.config.model.tie_embeddings, original.config.model.tie_embeddings);
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

TEST_F(KimiCliTest, RefusedExportCreatesNoDirectory) {
  const std::string ckpt = save_checkpoint("model.h5", kimi_shape_with_mla(", rope: true"));
  std::string out;
  EXPECT_EQ(run_lat("export --checkpoint '" + ckpt + "' --format hf --out '" + path("hf") + "'", out, dir_), 2);
  EXPECT_TRUE(contains(out, "error: export --format hf: layer 1 (mla): model.mla.rope true")) << out;
  EXPECT_FALSE(fs::exists(path("hf")));
}

}  // namespace
