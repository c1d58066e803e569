// Values of model files that load but describe no model lat should run: a Hugging Face
// config.json's rms_norm_eps and max_position_embeddings out of range, bytes after a JSON
// value, a tokenizer with more tokens than the embeddings have rows (fewer is padding:
// accepted, and generate never draws those ids), an export's config.json that contradicts its
// lat_config, an export without its checksums or with a flipped bit.
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lat/tape.h"
#include "tests/expect_error.h"
#include "tests/lat_command.h"
#include "tests/test_files.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/export.h"
#include "train/files/hf_config.h"
#include "train/files/hf_tokenizer.h"
#include "train/files/hf_weights.h"
#include "train/files/json_file.h"
#include "train/files/model_reader.h"
#include "train/files/safetensors.h"
#include "train/files/trained_model.h"
#include "train/inference/generate.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

// A Qwen3.5-expressible hybrid: one linear layer, one gated attention layer.
const std::string kShape =
    "  d_model: 16\n  n_layers: 2\n  n_heads: 2\n  layers: \"gdn,attn\"\n  norm_zero_centered: true\n"
    "  attn: {output_gate: true, qk_norm: true}\n";

// 12 characters, one of them two bytes in UTF-8.
const std::string kVocab = "\n abcdefghi\xc3\xa9";

nlohmann::json hf_config_of_shape() {
  return lat::hf_config_json(model_config(kShape).model, 50, lat::SafetensorsDType::f32);
}

// ---- config.json values ------------------------------------------------------------------

TEST(HfConfigValues, NormEpsOutsideZeroToOneOrNullIsRefusedNamingTheKey) {
  for (const char* value : {"1e300", "9223372036854775808", "null", "0", "-1e-06", "1.5", "\"1e-6\""}) {
    SCOPED_TRACE(value);
    nlohmann::json j = hf_config_of_shape();
    j["rms_norm_eps"] = nlohmann::json::parse(value);
    expect_error([&] { lat::model_config_from_hf(j, "d/config.json"); },
                 {"load_model_weights: 'd/config.json': keys lat cannot honour: rms_norm_eps: expected a number in "
                  "(0, 1], got " +
                  lat::json_excerpt(j["rms_norm_eps"])});
  }
  nlohmann::json j = hf_config_of_shape();
  j["rms_norm_eps"] = 1.0;
  EXPECT_EQ(lat::model_config_from_hf(j, "d/config.json").norm_eps, 1.0);
  j.erase("rms_norm_eps");  // transformers' default
  EXPECT_EQ(lat::model_config_from_hf(j, "d/config.json").norm_eps, 1e-6);
}

TEST(HfConfigValues, YamlNormEpsHasTheSameBound) {
  EXPECT_EQ(model_config(kShape + "  norm_eps: 1.0\n").model.norm_eps, 1.0);
  expect_error<lat::ConfigError>([] { model_config(kShape + "  norm_eps: 1.0e300\n"); },
                                 {"model.norm_eps", "in (0, 1]"});
}

TEST(HfConfigValues, MaxPositionEmbeddingsIsAnIntegerFromOneTo2To30) {
  for (const char* value : {"0", "-1", "1.5", "\"32768\"", "null", "1073741825", "9223372036854775808",
                            "18446744073709551615", "[32768]"}) {
    SCOPED_TRACE(value);
    nlohmann::json j = hf_config_of_shape();
    j["max_position_embeddings"] = nlohmann::json::parse(value);
    expect_error([&] { lat::model_config_from_hf(j, "d/config.json"); },
                 {"load_model_weights: 'd/config.json': keys lat cannot honour: max_position_embeddings: expected an "
                  "integer in [1, 2^30], got " +
                  lat::json_excerpt(j["max_position_embeddings"])});
  }
  for (const int64_t value : {int64_t{1}, int64_t{262144}, int64_t{1} << 30}) {
    nlohmann::json j = hf_config_of_shape();
    j["max_position_embeddings"] = value;
    EXPECT_EQ(lat::model_config_from_hf(j, "d/config.json").d_model, 16) << value;
  }
  nlohmann::json j = hf_config_of_shape();
  j.erase("max_position_embeddings");
  EXPECT_EQ(lat::model_config_from_hf(j, "d/config.json").d_model, 16);
}

TEST(JsonText, AnyByteAfterTheValueIsRefusedNulIncluded) {
  EXPECT_EQ(lat::parse_json_text("{\"a\": 1} \n\t", "s"), nlohmann::json({{"a", 1}}));
  expect_error([] { lat::parse_json_text(std::string("{\"a\": 1}\0", 9), "f 'c.json'"); },
               {"f 'c.json' is not valid JSON: a NUL byte at byte 8 (expected JSON text only, nothing after the value "
                "but whitespace)"});
  expect_error([] { lat::parse_json_text(std::string("{\"a\": 1}\n\0{\"b\": 2}", 18), "f"); },
               {"f is not valid JSON: a NUL byte at byte 9"});
  const std::string what =
      expect_error([] { lat::parse_json_text("{\"a\": 1} x", "f"); }, {"f is not valid JSON: ", "expected end of input"});
  EXPECT_EQ(what.find("json.exception"), std::string::npos) << what;  // nlohmann's tag is not for users
  expect_error([] { lat::parse_json_text("{\"a\": 1e400}", "f"); }, {"f is not valid JSON: number overflow"});
}

// ---- Hugging Face directories ------------------------------------------------------------

class HfFilesTest : public TempDirTest {
 protected:
  /// DIR/<name>: kShape with `vocab_size` embedding rows (seeded random weights) and the
  /// kVocab char tokenizer.
  void write_hf_dir(const std::string& name, int64_t vocab_size) {
    const lat::ModelConfig m = model_config(kShape).model;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    lat::NamedTensors tensors;
    for (const lat::HfTensorSpec& spec : lat::hf_tensor_layout(m, vocab_size))
      for (const lat::HfTensorPart& part : spec.parts) {
        int64_t n = 1;
        for (int64_t s : part.shape) n *= s;
        std::vector<float> data(static_cast<size_t>(n));
        for (float& x : data) x = normal(rng);
        tensors.emplace_back(part.lat_name, lat::Tensor::from_vector(data, part.shape));
      }
    fs::create_directories(path(name));
    lat::save_safetensors(path(name + "/model.safetensors"), lat::hf_tensors_from_lat(m, vocab_size, tensors, "t"),
                          lat::SafetensorsDType::f32, {{"format", "pt"}});
    write(name + "/config.json", lat::hf_config_json(m, vocab_size, lat::SafetensorsDType::f32).dump(2));
    write(name + "/tokenizer.json", lat::hf_tokenizer_json(lat::Tokenizer::char_from_vocab(kVocab)).dump());
  }
};

TEST_F(HfFilesTest, BytesAfterTheJsonOfConfigOrTokenizerAreRefused) {
  write_hf_dir("qwen", 50);
  const std::string config = read_bytes(path("qwen/config.json"));
  write("qwen/config.json", config + std::string("\0{\"hidden_size\": 1}", 19));
  expect_error([&] { lat::load_model_weights(path("qwen")); },
               {"load_model_weights: '" + path("qwen/config.json") + "' is not valid JSON: a NUL byte at byte " +
                std::to_string(config.size())});
  write("qwen/config.json", config + "\n}");
  expect_error([&] { lat::load_model_weights(path("qwen")); },
               {"'" + path("qwen/config.json") + "' is not valid JSON: ", "expected end of input"});
  write("qwen/config.json", config);
  const std::string tokenizer = read_bytes(path("qwen/tokenizer.json"));
  write("qwen/tokenizer.json", tokenizer + std::string("\0", 1));
  expect_error([&] { lat::load_model_weights(path("qwen")); },
               {"load_model_weights: '" + path("qwen/tokenizer.json") + "' is not valid JSON: a NUL byte at byte " +
                std::to_string(tokenizer.size())});
}

TEST_F(HfFilesTest, TokenizerSmallerThanTheEmbeddingsIsPaddingThatIsNeverDrawn) {
  write_hf_dir("qwen", 50);  // 12 tokens, 50 rows: ids 12..49 pad the vocabulary
  const lat::TrainedModel trained = lat::load_trained_model(path("qwen"));
  ASSERT_EQ(trained.model->vocab_size(), 50);
  ASSERT_EQ(trained.tokenizer->vocab_size(), 12);
  const auto drawn = [&](int64_t drawable_ids) {
    lat::Generator gen(1);
    return lat::generate_tokens(*trained.model, {1, 2, 3}, 64, {2.0, 0, 1.0, drawable_ids}, gen);
  };
  const std::vector<int64_t> all = drawn(0), decodable = drawn(12);
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), [](int64_t id) { return id >= 12; }));  // padding is drawable
  EXPECT_EQ(decodable.size(), 64u);
  for (int64_t id : decodable) EXPECT_TRUE(id >= 0 && id < 12) << id;
  lat::Generator gen(1);
  expect_error([&] { lat::generate_tokens(*trained.model, {1}, 4, {2.0, 0, 1.0, 51}, gen); },
               {"generate_tokens: drawable_ids: expected at most the model's 50 ids, got 51"});
  expect_error([&] { lat::generate_tokens(*trained.model, {1}, 4, {2.0, 0, 1.0, -1}, gen); },
               {"generate: drawable_ids: expected >= 0 (0 = every id), got -1"});

  std::string out;
  ASSERT_EQ(run_lat("generate --checkpoint '" + path("qwen") + "' --prompt 'abc' --max-new-tokens 200 "
                    "--temperature 2 --seed 1",
                    out, dir_),
            0)
      << out;
  // Every character is the tokenizer's: prompt, 200 drawn tokens, the final newline.
  EXPECT_EQ(lat::Tokenizer::char_from_vocab(kVocab).encode(out).size(), 3u + 200u + 1u) << out;

  ASSERT_EQ(run_lat("info '" + path("qwen") + "'", out, dir_), 0) << out;
  EXPECT_TRUE(contains(out, "\n  tokenizer 12 tokens, embeddings 50 rows: ids 12..49 pad the vocabulary (the "
                            "tokenizer cannot decode them; generate never draws them)\n"))
      << out;
  EXPECT_TRUE(contains(out, "    chunk_size: 64  # lat's default, not from config.json\n")) << out;
}

TEST_F(HfFilesTest, TokenizerLargerThanTheEmbeddingsIsRefusedNamingBothSizesAndFiles) {
  write_hf_dir("qwen", 8);  // 12 tokens, 8 rows
  expect_error([&] { lat::load_model_weights(path("qwen")); },
               {"load_model_weights: '" + path("qwen/model.safetensors") + "': the char tokenizer ('" +
                path("qwen/tokenizer.json") +
                "') has 12 tokens, but 'model.embed_tokens.weight' [8, 16] has 8 rows: expected at most as many tokens as rows"});
  std::string out;
  EXPECT_EQ(run_lat("info '" + path("qwen") + "'", out, dir_), 1);
  EXPECT_TRUE(contains(out, "has 12 tokens, but 'model.embed_tokens.weight' [8, 16] has 8 rows")) << out;
}

// ---- lat's export directories ------------------------------------------------------------

class ExportFilesTest : public TempDirTest {
 protected:
  /// The safetensors export (dir_/export) of a fresh kShape model with the kVocab tokenizer.
  void SetUp() override {
    TempDirTest::SetUp();
    const lat::Config cfg = model_config(kShape);
    lat::Generator gen(3);
    const lat::HybridLM model(lat::hybrid_lm_config(cfg.model, 12), gen);
    lat::Checkpoint c;
    c.config_yaml = lat::to_yaml(cfg);
    c.tokenizer_type = "char";
    c.tokenizer_vocab = kVocab;
    for (const auto& [name, t] : model.named_parameters()) c.model.emplace_back(name, t.detach().clone());
    lat::save_checkpoint(path("model.h5"), c);
    lat::export_model({path("model.h5"), "safetensors", path("export"), "f32", {}});
  }
};

TEST_F(ExportFilesTest, ConfigJsonContradictingLatConfigIsRefusedNamingTheKey) {
  ASSERT_EQ(lat::load_model_weights(path("export")).config.model.n_layers, 2);
  const std::string original = read_bytes(path("export/config.json"));
  struct Case {
    const char* key;
    nlohmann::json value;
    std::string named;
  };
  const Case cases[] = {
      {"n_layers", 3, "'n_layers': 3, but the model lat reads (lat_config, the weights, tokenizer.json) has 2: "
                      "expected config.json to describe it (other tools read it)"},
      {"num_hidden_layers", 1, "'num_hidden_layers': 1, but the model lat reads"},
      {"rms_norm_eps", 1e-5, "'rms_norm_eps': 1e-05, but the model lat reads (lat_config, the weights, "
                             "tokenizer.json) has 1e-06"},
      {"vocab_size", 13, "'vocab_size': 13, but the model lat reads (lat_config, the weights, tokenizer.json) has 12"},
      {"tokenizer_type", "byte", "'tokenizer_type': \"byte\", but the model lat reads"},
      {"layers", {"gdn", "gdn"}, "'layers': [\"gdn\",\"gdn\"], but the model lat reads"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    nlohmann::json j = nlohmann::json::parse(original);
    j[c.key] = c.value;
    write("export/config.json", j.dump(2));
    expect_error([&] { lat::load_trained_model(path("export")); },
                 {"load_model_weights: '" + path("export/config.json") + "': " + c.named});
  }
  nlohmann::json j = nlohmann::json::parse(original);
  j["attn"]["n_kv_heads"] = 1;
  write("export/config.json", j.dump(2));
  expect_error([&] { lat::load_trained_model(path("export")); },
               {"'" + path("export/config.json") + "': 'attn.n_kv_heads': 1, but the model lat reads"});
  // Keys a file leaves out, and which lat wrote it, contradict nothing.
  j = nlohmann::json::parse(original);
  j.erase("n_heads");
  j["lat_version"] = "0.0.1";
  j["torch_dtype"] = "bfloat16";
  write("export/config.json", j.dump(2));
  EXPECT_EQ(lat::load_trained_model(path("export")).config.model.n_heads, 2);
  std::string out;
  write("export/config.json", original);
  ASSERT_EQ(run_lat("info '" + path("export") + "'", out, dir_), 0) << out;
}

TEST_F(ExportFilesTest, ModelWithoutItsChecksumsOrWithAFlippedBitIsRefused) {
  const std::string file = path("export/model.safetensors");
  const std::string original = read_bytes(file);
  std::string renamed = original;  // the key renamed in place: the header keeps its length
  const size_t key = renamed.find("\"crc32\"");
  ASSERT_NE(key, std::string::npos);
  renamed[key + 5] = '3';
  write_bytes(file, renamed);
  ASSERT_EQ(lat::load_safetensors(file).metadata.count("crc33"), 1u);
  expect_error([&] { lat::load_model_weights(path("export")); },
               {"load_model_weights: '" + file + "': __metadata__ has no 'crc32': expected the tensor checksums lat "
                "export writes beside lat_config ('" + path("export/config.json") + "')"});
  std::string flipped = original;
  flipped[flipped.size() - 3] ^= 0x10;  // a bit of the last tensor's data
  write_bytes(file, flipped);
  expect_error([&] { lat::load_model_weights(path("export")); }, {file, "checksum mismatch: stored crc32"});
  std::string out;
  EXPECT_EQ(run_lat("generate --checkpoint '" + path("export") + "' --max-new-tokens 2", out, dir_), 1);
  EXPECT_TRUE(contains(out, "checksum mismatch")) << out;
  EXPECT_EQ(read_bytes(file), flipped);  // nothing rewritten
}

}  // namespace
