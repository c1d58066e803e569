// The Hugging Face Qwen3.5 format (train/files/hf_*.h): config.json both ways with known
// values, refusals naming the layer and the feature, config keys lat cannot honour named; the
// tensor layout lat -> transformers -> lat bit for bit, the fused in_proj_qkv and conv1d rows,
// norms stored as w - 1; tokenizer.json for char and byte; a directory written from C++ read by
// --checkpoint (whole, sharded, by any of its files); and the CLI: export --format hf, then
// generate from the directory gives the original model's text.
#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lat/tape.h"
#include "tests/expect_error.h"
#include "tests/hf_test_model.h"
#include "tests/lat_command.h"
#include "tests/test_files.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/export.h"
#include "train/files/hf_config.h"
#include "train/files/hf_export.h"
#include "train/files/hf_tokenizer.h"
#include "train/files/hf_weights.h"
#include "train/files/model_reader.h"
#include "train/files/safetensors.h"
#include "train/files/trained_model.h"
#include "train/inference/info.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

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

// ---- config.json -------------------------------------------------------------------------

TEST(HfConfig, WritesTheValuesTransformersWrites) {
  const lat::Config c = model_config(kQwenShape);
  const nlohmann::ordered_json j = lat::hf_config_json(c.model, 50, lat::SafetensorsDType::f32);
  // What transformers 5.24 wrote for Qwen3_5TextConfig of this shape (save_pretrained).
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "architectures": ["Qwen3_5ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": null, "dtype": "float32", "eos_token_id": null, "head_dim": 16, "hidden_act": "silu",
    "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_value_head_dim": 16, "max_position_embeddings": 32768, "model_type": "qwen3_5_text",
    "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 2, "pad_token_id": null,
    "rms_norm_eps": 1e-06, "rope_parameters": {"partial_rotary_factor": 0.5, "rope_theta": 10000.0,
    "rope_type": "default"}, "tie_word_embeddings": false, "use_cache": true, "vocab_size": 50})");
  EXPECT_EQ(nlohmann::json(j), expected);
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));  // as save_pretrained sorts them
  EXPECT_EQ(lat::hf_config_json(c.model, 50, lat::SafetensorsDType::bf16)["dtype"], "bfloat16");
}

TEST(HfConfig, ReadsBackTheSameModel) {
  for (const std::string& shape :
       {kQwenShape,
        std::string("  d_model: 24\n  n_layers: 3\n  n_heads: 3\n  layers: \"attn,gdn\"\n  tie_embeddings: true\n"
                    "  norm_eps: 1e-5\n  norm_zero_centered: true\n  mlp_ratio: 3.0\n"
                    "  linear: {conv_size: 3}\n  attn: {n_kv_heads: 1, rope_theta: 500000.0, output_gate: true, "
                    "qk_norm: true}\n"),
        std::string("  d_model: 16\n  n_layers: 2\n  n_heads: 2\n  layers: \"gdn\"\n  norm_zero_centered: true\n"
                    "  attn: {output_gate: true, qk_norm: true}\n")}) {
    SCOPED_TRACE(shape);
    const lat::Config c = model_config(shape);
    const nlohmann::json j = lat::hf_config_json(c.model, 40, lat::SafetensorsDType::f32);
    lat::Config back = model_config(shape);
    back.model = lat::model_config_from_hf(j, "config.json");
    const lat::Config resolved = lat::parse_config(lat::to_yaml(back), "back");
    EXPECT_EQ(resolved.model.vocab_size, 40);
    lat::ModelConfig expected = c.model;
    expected.vocab_size = 40;
    // config.json spells the SwiGLU width out; every other key comes back as it was.
    expected.intermediate_size = c.model.intermediate_size > 0
                                     ? c.model.intermediate_size
                                     : j["intermediate_size"].get<int64_t>();
    expected.mlp_ratio = resolved.model.mlp_ratio;
    expected.linear.chunk_size = resolved.model.linear.chunk_size;
    std::string layers;  // config.json lists every layer
    for (const std::string& kind : lat::layer_mixers(c.model)) layers += (layers.empty() ? "" : ",") + kind;
    expected.layers = layers;
    EXPECT_EQ(resolved.model, expected);
  }
}

TEST(HfConfig, ReadsTransformersDefaultsAndOldRopeKeys) {
  nlohmann::json j = lat::hf_config_json(model_config(kQwenShape).model, 50, lat::SafetensorsDType::f32);
  j.erase("layer_types");  // transformers: every 4th layer full attention
  j.erase("rope_parameters");
  j["rope_theta"] = 1e6;  // transformers 4's top-level keys
  j["mtp_num_hidden_layers"] = 1;
  j["transformers_version"] = "5.24.0";
  const lat::ModelConfig m = lat::model_config_from_hf(j, "config.json");
  EXPECT_EQ(m.layers, "gdn,gdn,gdn,attn");
  EXPECT_EQ(m.attn.rope_theta, 1e6);
  EXPECT_EQ(m.attn.rope_fraction, 0.25);  // Qwen3_5TextConfig's default partial_rotary_factor
  EXPECT_TRUE(m.norm_zero_centered && m.attn.output_gate && m.attn.qk_norm);
  EXPECT_EQ(m.linear.n_v_heads, 4);
  EXPECT_EQ(m.expand_v, 2.0);
}

TEST(HfConfig, KeysLatCannotHonourAreNamedWithTheirValues) {
  nlohmann::json j = lat::hf_config_json(model_config(kQwenShape).model, 50, lat::SafetensorsDType::f32);
  j["attention_bias"] = true;
  j["hidden_act"] = "gelu";
  j["attention_dropout"] = 0.1;
  j["rope_parameters"]["rope_type"] = "yarn";
  j["layer_types"][1] = "sliding_attention";
  j["sliding_window"] = 128;
  j.erase("hidden_size");
  expect_error([&] { lat::model_config_from_hf(j, "d/config.json"); },
               {"load_model_weights: 'd/config.json': keys lat cannot honour: ", "hidden_size: missing",
                "attention_bias: true", "hidden_act: \"gelu\"", "attention_dropout: 0.1",
                "rope_parameters.rope_type: \"yarn\"", "layer_types[1]: \"sliding_attention\"",
                "sliding_window: 128 (a key lat does not know)"});
}

TEST(HfConfig, ModelsQwenCannotExpressAreRefusedNamingTheLayerAndTheFeature) {
  const std::string base = "  d_model: 16\n  n_layers: 3\n  n_heads: 2\n";
  const std::string gated = "  attn: {output_gate: true, qk_norm: true}\n";
  struct Case {
    std::string model;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {base + "  layers: \"gdn,simple_gla,attn\"\n" + gated, {"layer 1 (simple_gla)", "a simple_gla mixer"}},
      {base + "  layers: \"gdn,delta_net\"\n", {"layer 1 (delta_net)"}},
      {base + "  layers: \"gdn,attn\"\n  attn: {output_gate: true, qk_norm: true, window_size: 8}\n",
       {"layer 1 (attn)", "model.attn.window_size 8"}},
      {base + "  layers: \"attn\"\n  attn: {qk_norm: true}\n", {"layer 0 (attn)", "model.attn.output_gate false"}},
      {base + "  layers: \"gdn,gdn,attn\"\n  attn: {output_gate: true}\n",
       {"layer 2 (attn)", "model.attn.qk_norm false"}},
      {base + "  layers: \"gdn\"\n  linear: {use_short_conv: false}\n", {"layer 0 (gdn)", "model.linear.use_short_conv"}},
      {base + "  layers: \"gdn\"\n  linear: {use_gate: false}\n", {"layer 0 (gdn)", "model.linear.use_gate false"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    const lat::Config config = model_config(c.model);
    const std::string message = expect_error<lat::ConfigError>([&] { lat::check_hf_expressible(config.model); },
                                                               {"export --format hf: "});
    for (const std::string& part : c.parts) EXPECT_TRUE(contains(message, part)) << message;
  }
  EXPECT_NO_THROW(lat::check_hf_expressible(model_config(kQwenShape).model));
}

// ---- tensors -----------------------------------------------------------------------------

TEST(HfWeights, LatToTransformersToLatIsBitExact) {
  for (const std::string& shape : {kQwenShape, kQwenShape + "  tie_embeddings: true\n"}) {
    const lat::ModelConfig m = model_config(shape).model;
    const lat::NamedTensors lat_tensors = random_lat_tensors(m, 50);
    const lat::NamedTensors hf = lat::hf_tensors_from_lat(m, 50, lat_tensors, "test");
    const lat::NamedTensors back = lat::lat_tensors_from_hf(m, 50, hf, "test");
    ASSERT_EQ(back.size(), lat_tensors.size());
    for (const auto& [name, t] : lat_tensors) EXPECT_TRUE(bit_equal(find(back, name), t)) << name;
    EXPECT_EQ(find(hf, "model.layers.0.linear_attn.in_proj_qkv.weight").shape(), (lat::Shape{2 * 16 + 64, 32}));
    EXPECT_EQ(find(hf, "model.layers.3.self_attn.q_proj.weight").shape(), (lat::Shape{2 * 4 * 16, 32}));
    bool has_lm_head = false;
    for (const auto& [name, t] : hf) has_lm_head = has_lm_head || name == "lm_head.weight";
    EXPECT_EQ(has_lm_head, !m.tie_embeddings);  // save_pretrained leaves a tied lm_head out
  }
}

TEST(HfWeights, FusedQkvAndConvStackTheRowsOfQThenKThenV) {
  const lat::ModelConfig m = model_config(kQwenShape).model;
  const lat::NamedTensors lat_tensors = random_lat_tensors(m, 50);
  const lat::NamedTensors hf = lat::hf_tensors_from_lat(m, 50, lat_tensors, "test");
  for (const std::string fused : {"in_proj_qkv.weight", "conv1d.weight"}) {
    const bool conv = fused == "conv1d.weight";
    std::vector<float> expected;
    for (const char* part : {"q_", "k_", "v_"}) {
      const std::vector<float> rows =
          find(lat_tensors, std::string("layers.1.attn.") + part + (conv ? "conv1d.weight" : "proj.weight"))
              .to_vector<float>();
      expected.insert(expected.end(), rows.begin(), rows.end());
    }
    const lat::Tensor& t = find(hf, "model.layers.1.linear_attn." + fused);
    EXPECT_EQ(t.shape(), conv ? (lat::Shape{96, 1, 4}) : (lat::Shape{96, 32}));
    EXPECT_EQ(t.to_vector<float>(), expected) << fused;
  }
  EXPECT_TRUE(bit_equal(find(hf, "model.layers.1.linear_attn.in_proj_z.weight"), find(lat_tensors, "layers.1.attn.g_proj.weight")));
  EXPECT_TRUE(bit_equal(find(hf, "model.layers.1.linear_attn.norm.weight"), find(lat_tensors, "layers.1.attn.o_norm.weight")));
}

TEST(HfWeights, NormsOfAModelScalingByWAreStoredAsWMinusOne) {
  const lat::ModelConfig m = model_config(
      "  d_model: 16\n  n_layers: 2\n  n_heads: 2\n  layers: \"gdn,attn\"\n  attn: {output_gate: true, qk_norm: true}\n")
                                 .model;
  const lat::NamedTensors lat_tensors = random_lat_tensors(m, 12);
  const lat::NamedTensors hf = lat::hf_tensors_from_lat(m, 12, lat_tensors, "test");
  const std::map<std::string, std::string> shifted = {
      {"model.layers.0.input_layernorm.weight", "layers.0.attn_norm.weight"},
      {"model.layers.0.post_attention_layernorm.weight", "layers.0.mlp_norm.weight"},
      {"model.layers.1.self_attn.q_norm.weight", "layers.1.attn.q_norm.weight"},
      {"model.layers.1.self_attn.k_norm.weight", "layers.1.attn.k_norm.weight"},
      {"model.norm.weight", "norm.weight"}};
  for (const auto& [hf_name, lat_name] : shifted) {
    std::vector<float> expected = find(lat_tensors, lat_name).to_vector<float>();
    for (float& w : expected) w -= 1.0f;
    EXPECT_EQ(find(hf, hf_name).to_vector<float>(), expected) << hf_name;
  }
  // The gated output norm scales by w in transformers too.
  EXPECT_TRUE(bit_equal(find(hf, "model.layers.0.linear_attn.norm.weight"), find(lat_tensors, "layers.0.attn.o_norm.weight")));
}

TEST(HfWeights, MissingExtraAndMisShapedTensorsAreNamed) {
  const lat::ModelConfig m = model_config(kQwenShape).model;
  const lat::NamedTensors hf = lat::hf_tensors_from_lat(m, 50, random_lat_tensors(m, 50), "test");
  auto without = [&](const std::string& name) {
    lat::NamedTensors out;
    for (const auto& t : hf)
      if (t.first != name) out.push_back(t);
    return out;
  };
  expect_error([&] { lat::lat_tensors_from_hf(m, 50, without("model.layers.2.linear_attn.conv1d.weight"), "d/m"); },
               {"'d/m' has no tensor 'model.layers.2.linear_attn.conv1d.weight' (expected [96, 1, 4]"});
  lat::NamedTensors extra = hf;
  extra.emplace_back("model.layers.0.linear_attn.conv1d.bias", lat::Tensor::zeros({96}));
  expect_error([&] { lat::lat_tensors_from_hf(m, 50, extra, "d/m"); },
               {"tensor 'model.layers.0.linear_attn.conv1d.bias' [96] is not part of the model"});
  lat::NamedTensors wrong = without("model.layers.3.self_attn.q_proj.weight");
  wrong.emplace_back("model.layers.3.self_attn.q_proj.weight", lat::Tensor::zeros({64, 32}));
  expect_error([&] { lat::lat_tensors_from_hf(m, 50, wrong, "d/m"); },
               {"tensor 'model.layers.3.self_attn.q_proj.weight': expected shape [128, 32]", "got [64, 32]"});
  lat::NamedTensors with_mtp = hf;  // transformers skips the multi-token-prediction head
  with_mtp.emplace_back("mtp.fc.weight", lat::Tensor::zeros({2, 2}));
  EXPECT_EQ(lat::lat_tensors_from_hf(m, 50, with_mtp, "d/m").size(), random_lat_tensors(m, 50).size());
}

// ---- tokenizer.json ------------------------------------------------------------------------

TEST(HfTokenizer, CharAndByteComeBackAsTheyWere) {
  const lat::Tokenizer chars = lat::Tokenizer::char_from_vocab(kVocab);
  for (const lat::Tokenizer& t : {chars, lat::Tokenizer::byte()}) {
    const nlohmann::json j = nlohmann::json::parse(lat::hf_tokenizer_json(t).dump());
    EXPECT_EQ(j["model"]["type"], "BPE");
    EXPECT_TRUE(j["model"]["merges"].empty());
    EXPECT_EQ(j["model"]["vocab"].size(), static_cast<size_t>(t.vocab_size()));
    std::string why_not;
    const std::optional<lat::Tokenizer> back = lat::tokenizer_from_hf_json(j, why_not);
    ASSERT_TRUE(back.has_value()) << why_not;
    EXPECT_EQ(back->type(), t.type());
    const std::string text = "hi \xc3\xa9\nab";
    EXPECT_EQ(back->encode(text), t.encode(text));
  }
  const nlohmann::json c = nlohmann::json::parse(lat::hf_tokenizer_json(chars).dump());
  EXPECT_EQ(c["model"]["vocab"]["\xc3\xa9"], 11);
  EXPECT_EQ(c["decoder"]["type"], "Fuse");
  EXPECT_TRUE(c["pre_tokenizer"].is_null());
  const nlohmann::json b = nlohmann::json::parse(lat::hf_tokenizer_json(lat::Tokenizer::byte()).dump());
  // GPT-2's byte-level characters: 'A' is itself, space is U+0120, 0xAD is U+0143.
  EXPECT_EQ(b["model"]["vocab"]["A"], 65);
  EXPECT_EQ(b["model"]["vocab"]["\xc4\xa0"], 32);
  EXPECT_EQ(b["model"]["vocab"]["\xc5\x83"], 0xAD);
  EXPECT_EQ(b["pre_tokenizer"]["use_regex"], false);
  EXPECT_EQ(lat::hf_tokenizer_config_json()["tokenizer_class"], "PreTrainedTokenizerFast");
}

TEST(HfTokenizer, OtherTokenizersAreNotLats) {
  nlohmann::json merged = nlohmann::json::parse(lat::hf_tokenizer_json(lat::Tokenizer::char_from_vocab("ab")).dump());
  merged["model"]["merges"] = {"a b"};
  nlohmann::json normalized = nlohmann::json::parse(lat::hf_tokenizer_json(lat::Tokenizer::byte()).dump());
  normalized["normalizer"] = {{"type", "NFC"}};
  nlohmann::json words = nlohmann::json::parse(lat::hf_tokenizer_json(lat::Tokenizer::char_from_vocab("ab")).dump());
  words["model"]["vocab"] = {{"ab", 0}, {"b", 1}};
  for (const auto& [j, reason] : {std::pair{merged, "merges"}, std::pair{normalized, "normalizer"},
                                  std::pair{words, "single characters"}}) {
    std::string why_not;
    EXPECT_FALSE(lat::tokenizer_from_hf_json(j, why_not).has_value());
    EXPECT_TRUE(contains(why_not, reason)) << why_not;
  }
}

// ---- directories -------------------------------------------------------------------------

class HfDirTest : public TempDirTest {
 protected:
  /// write_hf_dir (hf_test_model.h) into the test's directory `name`.
  lat::NamedTensors write_hf_dir(const std::string& name, const std::string& shape, int64_t vocab_size) {
    return lat::testing::write_hf_dir(path(name), shape, vocab_size);
  }
};

TEST_F(HfDirTest, CheckpointReadsTheDirectoryByAnyOfItsFiles) {
  const lat::NamedTensors expected = write_hf_dir("qwen", kQwenShape, 50);
  for (const std::string& p : {path("qwen"), path("qwen/config.json"), path("qwen/model.safetensors")}) {
    SCOPED_TRACE(p);
    const lat::ModelWeights w = lat::load_model_weights(p);
    EXPECT_EQ(w.format, lat::ModelFormat::hf);
    EXPECT_EQ(w.config.model.attn.n_heads, 4);
    EXPECT_EQ(w.config.model.linear.n_v_heads, 4);
    EXPECT_EQ(w.config.model.attn.rope_fraction, 0.5);
    EXPECT_TRUE(w.config.model.norm_zero_centered);
    EXPECT_EQ(w.checkpoint.tokenizer_type, "char");
    EXPECT_EQ(w.checkpoint.tokenizer_vocab, kVocab);
    ASSERT_EQ(w.checkpoint.model.size(), expected.size());
    for (const auto& [name, t] : expected) EXPECT_TRUE(bit_equal(find(w.checkpoint.model, name), t)) << name;
  }
}

TEST_F(HfDirTest, ShardedWeightsAndForeignTokenizersAreRead) {
  const lat::NamedTensors expected = write_hf_dir("qwen", kQwenShape, 50);
  const lat::SafetensorsFile whole = lat::load_safetensors(path("qwen/model.safetensors"));
  fs::remove(path("qwen/model.safetensors"));
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  lat::NamedTensors shards[2];
  for (size_t i = 0; i < whole.tensors.size(); ++i) {
    const std::string shard = "model-0000" + std::to_string(i % 2 + 1) + "-of-00002.safetensors";
    shards[i % 2].push_back(whole.tensors[i]);
    index["weight_map"][whole.tensors[i].first] = shard;
  }
  for (int s = 0; s < 2; ++s)
    lat::save_safetensors(path("qwen/model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"), shards[s],
                          lat::SafetensorsDType::bf16);
  write("qwen/model.safetensors.index.json", index.dump());
  write("qwen/tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  const lat::ModelWeights w = lat::load_model_weights(path("qwen"));
  EXPECT_EQ(w.checkpoint.tokenizer_type, "none");  // token ids
  for (const auto& [name, t] : expected) {
    std::vector<float> rounded = t.to_vector<float>();  // bf16 shards: values rounded to bf16
    const std::vector<float> got = find(w.checkpoint.model, name).to_vector<float>();
    ASSERT_EQ(got.size(), rounded.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], rounded[i], std::fabs(rounded[i]) / 128) << name;
  }
  index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  write("qwen/model.safetensors.index.json", index.dump());
  expect_error([&] { lat::load_model_weights(path("qwen")); },
               {"weight_map 'model.norm.weight': expected a file name in the same directory"});
}

TEST_F(HfDirTest, ConfigKeysLatCannotHonourAreAnErrorOfTheReader) {
  write_hf_dir("qwen", kQwenShape, 50);
  nlohmann::json j = nlohmann::json::parse(read_bytes(path("qwen/config.json")));
  j["hidden_act"] = "relu";
  write("qwen/config.json", j.dump());
  expect_error([&] { lat::load_model_weights(path("qwen")); },
               {"'" + path("qwen/config.json") + "': keys lat cannot honour: hidden_act: \"relu\""});
}

// ---- models and the CLI (these build the model: gated attention, grouped value heads and
// zero-centred norms in the layers) ----------------------------------------------------------

class HfCliTest : public TempDirTest {
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

  /// The exported directory computes the checkpoint's logits, and generates its text.
  void expect_same_model(const std::string& shape) {
    const std::string ckpt = save_checkpoint("model.h5", shape);
    std::string out;
    ASSERT_EQ(run_lat("export --checkpoint '" + ckpt + "' --format hf --out '" + path("hf") + "'", out, dir_), 0)
        << out;
    const lat::TrainedModel original = lat::load_trained_model(ckpt);
    const lat::TrainedModel exported = lat::load_trained_model(path("hf"));
    ASSERT_TRUE(exported.tokenizer.has_value());
    EXPECT_EQ(exported.tokenizer->vocab_string(), kVocab);
    lat::NoGradGuard no_grad;
    const lat::Tensor ids = lat::Tensor::from_vector(std::vector<int64_t>{1, 5, 2, 9, 11, 0, 3, 3, 7}, {1, 9});
    const std::vector<float> a = original.model->forward(ids).to_vector<float>();
    const std::vector<float> b = exported.model->forward(ids).to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    float scale = 0.0f, max_diff = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, std::fabs(a[i]));
      max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
    }
    EXPECT_GT(scale, 0.0f);
    EXPECT_LE(max_diff, 1e-5f * scale);  // the same weights through another layout: rounding only

    const std::string gen = "--prompt 'abc' --max-new-tokens 24 --temperature 0 --seed 0";
    std::string from_ckpt, from_hf;
    ASSERT_EQ(run_lat("generate --checkpoint '" + ckpt + "' " + gen, from_ckpt, dir_), 0) << from_ckpt;
    ASSERT_EQ(run_lat("generate --checkpoint '" + path("hf") + "' " + gen, from_hf, dir_), 0) << from_hf;
    EXPECT_EQ(from_hf, from_ckpt);
    EXPECT_GT(from_ckpt.size(), 3u);
  }
};

TEST_F(HfCliTest, ExportedLinearOnlyModelGeneratesTheSameText) {
  expect_same_model("  d_model: 16\n  n_layers: 2\n  n_heads: 2\n  layers: \"gdn\"\n  linear: {chunk_size: 4}\n");
}

TEST_F(HfCliTest, ExportedHybridWithGroupedHeadsGeneratesTheSameText) {
  expect_same_model(
      "  d_model: 16\n  n_layers: 3\n  n_heads: 2\n  layers: \"gdn,attn\"\n  expand_v: 2.0\n  tie_embeddings: true\n"
      "  linear: {n_v_heads: 4, chunk_size: 4}\n"
      "  attn: {n_heads: 4, head_dim: 8, n_kv_heads: 2, output_gate: true, qk_norm: true, rope_fraction: 0.5}\n");
}

TEST_F(HfCliTest, InfoPrintsTheModelKeysOfAHuggingFaceDirectory) {
  const std::string ckpt = save_checkpoint("model.h5", kQwenShape);
  std::string out;
  ASSERT_EQ(run_lat("export --checkpoint '" + ckpt + "' --format hf --out '" + path("hf") + "'", out, dir_), 0) << out;
  ASSERT_EQ(run_lat("info '" + path("hf") + "'", out, dir_), 0) << out;
  EXPECT_TRUE(contains(out, "model keys read from " + path("hf/config.json"))) << out;
  EXPECT_TRUE(contains(out, "  model:\n")) << out;
  EXPECT_TRUE(contains(out, "n_v_heads: 4")) << out;
  EXPECT_FALSE(contains(out, "\n  data:")) << out;
}

TEST_F(HfCliTest, RefusedExportCreatesNoDirectory) {
  const std::string ckpt =
      save_checkpoint("model.h5", "  d_model: 16\n  n_layers: 2\n  n_heads: 2\n  layers: \"gdn,simple_gla\"\n");
  std::string out;
  EXPECT_EQ(run_lat("export --checkpoint '" + ckpt + "' --format hf --out '" + path("hf") + "'", out, dir_), 2);
  EXPECT_TRUE(contains(out, "error: export --format hf: layer 1 (simple_gla)")) << out;
  EXPECT_FALSE(fs::exists(path("hf")));
}

}  // namespace
