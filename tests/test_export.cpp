// `lat export` and `lat info` (train/files/export.h, train/inference/info.h): the safetensors export keeps the
// checkpoint's names, shapes and values (bit for bit in f32, rounded in bf16), config.json and
// tokenizer.json describe the model, tied embeddings get an lm_head copy, h5-weights has no
// training state, every --checkpoint form loads the same weights, the exported model computes
// the same logits, bad inputs are named; info's parameter and memory figures by hand.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <hdf5.h>
#include <nlohmann/json.hpp>

#include "autograd/cpu/bf16.h"
#include "lat/tape.h"
#include "layers/swiglu.h"
#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/checksum.h"
#include "train/files/export.h"
#include "train/files/model_reader.h"
#include "train/files/run_dir.h"
#include "train/files/safetensors.h"
#include "train/files/trained_model.h"
#include "train/inference/generate.h"
#include "train/inference/info.h"

namespace fs = std::filesystem;

namespace {

// 12 characters, one of them two bytes in UTF-8.
const std::string kVocab = "\n abcdefghi\xc3\xa9";
constexpr int64_t kVocabSize = 12;

using namespace lat::testing;

class ExportTest : public TempDirTest {
 protected:
  /// Saves a checkpoint of a freshly initialized model of `config` (with optimizer, rng and
  /// data state, as a training run writes) and returns it.
  lat::Checkpoint save(const std::string& file, const lat::Config& cfg, const std::string& tokenizer = "char") {
    lat::Generator gen(1);
    lat::HybridLM model(lat::hybrid_lm_config(cfg.model, kVocabSize), gen);
    lat::Checkpoint c;
    c.step = 7;
    c.tokens_seen = 1234;
    c.val_loss = 2.5;
    c.best_val_loss = 2.25;
    c.frozen = {"embeddings.weight"};
    c.config_yaml = lat::to_yaml(cfg);
    c.tokenizer_type = tokenizer;
    if (tokenizer == "char") c.tokenizer_vocab = kVocab;
    for (const auto& [name, t] : model.named_parameters()) c.model.emplace_back(name, t.detach().clone());
    c.optimizer.type = "adamw";
    c.optimizer.step = 7;
    c.optimizer.params.push_back({c.model[1].first, {{"exp_avg", lat::Tensor::zeros(c.model[1].second.shape())}}});
    c.rng_state = "rng";
    c.data.counters = {{"position", 3}};
    c.data.state = "data";
    lat::save_checkpoint(path(file), c);
    return c;
  }
};

bool bit_equal(const lat::Tensor& a, const lat::Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

const std::string kHybrid =
    "  d_model: 16\n  n_layers: 3\n  n_heads: 2\n  layers: \"gdn,attn,simple_gla\"\n  linear: {chunk_size: 4}\n";

lat::Tensor logits_of(const lat::ModelWeights& w, const std::vector<int64_t>& ids) {
  const lat::Config cfg = lat::parse_config(w.checkpoint.config_yaml, w.path);
  lat::Generator gen(99);
  lat::HybridLM model(lat::hybrid_lm_config(cfg.model, kVocabSize), gen);
  lat::load_weights(model, w.checkpoint.model, w.path);
  lat::NoGradGuard no_grad;
  return model.forward(lat::Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())}));
}

TEST_F(ExportTest, SafetensorsKeepsNamesShapesAndValuesAndDescribesTheModel) {
  const lat::Config cfg = model_config(kHybrid);
  const lat::Checkpoint ckpt = save("ckpt.h5", cfg);
  const auto written = lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "f32", {}});
  EXPECT_EQ(written, (std::vector<std::string>{path("out/model.safetensors"), path("out/config.json"),
                                               path("out/tokenizer.json")}));

  const lat::SafetensorsFile file = lat::load_safetensors(path("out/model.safetensors"));
  ASSERT_EQ(file.tensors.size(), ckpt.model.size());  // no lm_head copy: not tied
  for (size_t i = 0; i < ckpt.model.size(); ++i) {
    EXPECT_EQ(file.tensors[i].first, ckpt.model[i].first);
    EXPECT_TRUE(bit_equal(file.tensors[i].second, ckpt.model[i].second)) << ckpt.model[i].first;
  }
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("step"), "7");
  EXPECT_EQ(file.metadata.at("tokens_seen"), "1234");

  const nlohmann::json j = nlohmann::json::parse(read_bytes(path("out/config.json")));
  EXPECT_EQ(j["architectures"], nlohmann::json({"HybridLMForCausalLM"}));
  EXPECT_EQ(j["model_type"], "lat_hybrid");
  EXPECT_EQ(j["torch_dtype"], "float32");
  EXPECT_EQ(j["vocab_size"], kVocabSize);
  EXPECT_EQ(j["d_model"], 16);
  EXPECT_EQ(j["hidden_size"], 16);
  EXPECT_EQ(j["n_layers"], 3);
  EXPECT_EQ(j["head_dim"], 8);
  EXPECT_EQ(j["value_head_dim"], 8);
  EXPECT_EQ(j["layers"], nlohmann::json({"gdn", "attn", "simple_gla"}));
  EXPECT_EQ(j["attn"]["n_kv_heads"], 2);
  EXPECT_EQ(j["linear"]["chunk_size"], 4);
  EXPECT_EQ(j["mlp_hidden_size"], lat::swiglu_hidden_size(16, 4.0));
  EXPECT_EQ(j["intermediate_size"], lat::swiglu_hidden_size(16, 4.0));
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(lat::parse_config(j["lat_config"].get<std::string>(), "lat_config"), cfg);

  const nlohmann::json tok = nlohmann::json::parse(read_bytes(path("out/tokenizer.json")));
  EXPECT_EQ(tok["type"], "char");
  ASSERT_EQ(tok["vocab"].size(), static_cast<size_t>(kVocabSize));
  EXPECT_EQ(tok["vocab"][0], "\n");
  EXPECT_EQ(tok["vocab"][11], "\xc3\xa9");
}

TEST_F(ExportTest, TiedEmbeddingsWriteAnLmHeadCopyThatLoadingDrops) {
  const lat::Config cfg = model_config(kHybrid + "  tie_embeddings: true\n");
  const lat::Checkpoint ckpt = save("tied.h5", cfg);
  lat::export_model({path("tied.h5"), "safetensors", path("out"), "f32", {}});
  const lat::SafetensorsFile file = lat::load_safetensors(path("out/model.safetensors"));
  EXPECT_EQ(file.tensors.back().first, "lm_head.weight");
  EXPECT_TRUE(bit_equal(file.at("lm_head.weight"), file.at("embeddings.weight")));
  EXPECT_EQ(nlohmann::json::parse(read_bytes(path("out/config.json")))["tie_word_embeddings"], true);

  const lat::ModelWeights w = lat::load_model_weights(path("out/model.safetensors"));
  ASSERT_EQ(w.checkpoint.model.size(), ckpt.model.size());
  for (const auto& [name, t] : w.checkpoint.model) EXPECT_NE(name, "lm_head.weight");
  // The export without lm_head.weight is the checkpoint's model: the same logits, bit for bit.
  const lat::Tensor logits = logits_of(w, {1, 2, 3});
  EXPECT_EQ(logits.shape(), (lat::Shape{1, 3, kVocabSize}));
  EXPECT_TRUE(bit_equal(logits, logits_of(lat::load_model_weights(path("tied.h5")), {1, 2, 3})));
}

TEST_F(ExportTest, ModelsOfTokenIdsAndBytesKeepTheirTokenizerType) {
  save("ids.h5", model_config(kHybrid), "none");
  lat::export_model({path("ids.h5"), "safetensors", path("ids"), "f32", {}});
  EXPECT_FALSE(fs::exists(path("ids/tokenizer.json")));
  EXPECT_EQ(lat::load_model_weights(path("ids")).checkpoint.tokenizer_type, "none");

  save("bytes.h5", model_config(kHybrid + "  vocab_size: 256\n"), "byte");  // a byte model has 256 rows
  lat::export_model({path("bytes.h5"), "safetensors", path("bytes"), "f32", {}});
  const nlohmann::json tok = nlohmann::json::parse(read_bytes(path("bytes/tokenizer.json")));
  EXPECT_EQ(tok, nlohmann::json({{"type", "byte"}, {"vocab_size", 256}}));
  EXPECT_EQ(lat::load_model_weights(path("bytes")).checkpoint.tokenizer_type, "byte");
}

TEST_F(ExportTest, Bf16ExportRoundsEveryValueToNearestEven) {
  const lat::Checkpoint ckpt = save("ckpt.h5", model_config(kHybrid));
  lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "bf16", {}});
  const std::string bytes = read_bytes(path("out/model.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["embeddings.weight"]["dtype"], "BF16");
  EXPECT_EQ(nlohmann::json::parse(read_bytes(path("out/config.json")))["torch_dtype"], "bfloat16");
  const lat::SafetensorsFile file = lat::load_safetensors(path("out/model.safetensors"));
  for (const auto& [name, original] : ckpt.model) {
    const auto got = file.at(name).to_vector<float>(), want = original.to_vector<float>();
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], lat::cpu::bf16_to_float(lat::cpu::float_to_bf16(want[i]))) << name << "[" << i << "]";
  }
}

TEST_F(ExportTest, H5WeightsHasOnlyModelConfigTokenizerAndRootAttributes) {
  const lat::Checkpoint ckpt = save("ckpt.h5", model_config(kHybrid));
  const auto written = lat::export_model({path("ckpt.h5"), "h5-weights", path("out"), "f32", {}});
  EXPECT_EQ(written, std::vector<std::string>{path("out/model.h5")});
  EXPECT_FALSE(fs::exists(path("out/model.h5.partial")));

  hid_t file = H5Fopen(path("out/model.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  H5G_info_t root;
  ASSERT_GE(H5Gget_info(file, &root), 0);
  EXPECT_EQ(root.nlinks, 3u);
  for (const char* name : {"config", "model", "tokenizer"}) EXPECT_GT(H5Lexists(file, name, H5P_DEFAULT), 0) << name;
  for (const char* name : {"optimizer", "rng", "data"}) EXPECT_EQ(H5Lexists(file, name, H5P_DEFAULT), 0) << name;
  H5Fclose(file);

  const lat::Checkpoint back = lat::load_checkpoint(path("out/model.h5"));
  EXPECT_TRUE(back.optimizer.type.empty());
  EXPECT_TRUE(back.rng_state.empty());
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.tokens_seen, 1234);
  EXPECT_EQ(back.val_loss, 2.5);
  EXPECT_EQ(back.frozen, ckpt.frozen);
  EXPECT_EQ(back.config_yaml, ckpt.config_yaml);
  EXPECT_EQ(back.tokenizer_vocab, kVocab);
  ASSERT_EQ(back.model.size(), ckpt.model.size());
  for (size_t i = 0; i < back.model.size(); ++i) EXPECT_TRUE(bit_equal(back.model[i].second, ckpt.model[i].second));
}

TEST_F(ExportTest, EveryCheckpointFormLoadsTheSameModel) {
  fs::create_directories(path("run"));
  const lat::Checkpoint ckpt = save("run/ckpt_00000007.h5", model_config(kHybrid));
  lat::write_latest(path("run"), "ckpt_00000007.h5");
  lat::export_model({path("run"), "safetensors", path("st"), "f32", {}});
  lat::export_model({path("run"), "h5-weights", path("h5"), "f32", {}});
  // Round trips through the other format too.
  lat::export_model({path("st/model.safetensors"), "h5-weights", path("st_to_h5"), "f32", {}});

  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
  const lat::Tensor reference = logits_of(lat::load_model_weights(path("run/ckpt_00000007.h5")), ids);
  for (const std::string& form : {path("run"), path("st"), path("st/model.safetensors"), path("h5"),
                                  path("h5/model.h5"), path("st_to_h5")}) {
    const lat::ModelWeights w = lat::load_model_weights(form);
    EXPECT_EQ(w.checkpoint.config_yaml, ckpt.config_yaml) << form;
    EXPECT_EQ(w.checkpoint.tokenizer_type, "char") << form;
    EXPECT_EQ(w.checkpoint.tokenizer_vocab, kVocab) << form;
    EXPECT_EQ(w.checkpoint.step, 7) << form;
    EXPECT_EQ(w.checkpoint.tokens_seen, 1234) << form;
    EXPECT_EQ(w.checkpoint.best_val_loss, 2.25) << form;
    EXPECT_EQ(w.checkpoint.frozen, ckpt.frozen) << form;
    EXPECT_TRUE(w.checkpoint.optimizer.type.empty()) << form;
    EXPECT_TRUE(bit_equal(logits_of(w, ids), reference)) << form;
  }
}

TEST_F(ExportTest, GenerateFromTheExportsGivesTheSameText) {
  save("ckpt.h5", model_config(kHybrid));
  lat::export_model({path("ckpt.h5"), "safetensors", path("st"), "f32", {}});
  lat::export_model({path("ckpt.h5"), "h5-weights", path("h5"), "f32", {}});
  auto sample = [](const std::string& checkpoint) {
    lat::GenerateOptions options;
    options.checkpoint = checkpoint;
    options.prompt = "abc";
    options.max_new_tokens = 40;
    options.seed = 5;
    std::ostringstream out;
    lat::generate(options, out);
    return out.str();
  };
  const std::string reference = sample(path("ckpt.h5"));
  EXPECT_GT(reference.size(), 40u);
  EXPECT_EQ(sample(path("st/model.safetensors")), reference);
  EXPECT_EQ(sample(path("st")), reference);
  EXPECT_EQ(sample(path("h5/model.h5")), reference);
}

TEST_F(ExportTest, CheckTokensWritesLatsLogitsForwardAndStepwise) {
  const lat::Config cfg = model_config(kHybrid);
  save("ckpt.h5", cfg);
  const std::vector<int64_t> ids = {0, 5, 11, 2, 2, 7, 1, 9, 3};
  const auto written = lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "f32", ids});
  EXPECT_EQ(written.back(), path("out/check_logits.safetensors"));
  const lat::SafetensorsFile check = lat::load_safetensors(written.back());
  EXPECT_EQ(check.at("tokens").to_vector<float>(), std::vector<float>(ids.begin(), ids.end()));
  const lat::Tensor reference = logits_of(lat::load_model_weights(path("ckpt.h5")), ids);
  EXPECT_TRUE(bit_equal(check.at("logits"), reference.reshape({9, kVocabSize})));
  const auto step = check.at("logits_step").to_vector<float>(), full = reference.to_vector<float>();
  double num = 0, den = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    num += (step[i] - full[i]) * (step[i] - full[i]);
    den += full[i] * full[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

TEST_F(ExportTest, CheckTokenOutsideTheVocabularyFailsBeforeAnyFileIsWritten) {
  save("ckpt.h5", model_config(kHybrid));
  expect_error<lat::ConfigError>(
      [&] {
        lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "f32", {1, 2, kVocabSize}});
      },
      {"--check-tokens: id " + std::to_string(kVocabSize) + " is outside the vocabulary [0, " +
       std::to_string(kVocabSize) + ")"});
  EXPECT_FALSE(fs::exists(path("out")));
  expect_error<lat::ConfigError>([&] { lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "f32", {-1}}); },
                                 {"export: --check-tokens: id -1 is outside the vocabulary [0, 12)"});
  EXPECT_FALSE(fs::exists(path("out")));
}

TEST_F(ExportTest, BadOptionsAreConfigErrors) {
  save("ckpt.h5", model_config(kHybrid));
  expect_error<lat::ConfigError>([&] { lat::export_model({path("ckpt.h5"), "onnx", path("out"), "f32", {}}); },
                                 {"export: --format: expected safetensors, h5-weights, hf or gguf, got 'onnx'"});
  expect_error<lat::ConfigError>([&] { lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "f16", {}}); },
                                 {"export: --dtype: expected f32 or bf16, got 'f16'"});
  expect_error<lat::ConfigError>(
      [&] {
        lat::export_model({path("ckpt.h5"), "h5-weights", path("out"), "bf16", {}});
      },
      {"export: --dtype bf16: h5-weights stores f32 (checkpoint layout); use --format safetensors for bf16"});
  EXPECT_FALSE(fs::exists(path("out")));
}

TEST_F(ExportTest, NewerCheckpointVersionSaysWhichIsSupported) {
  save("v3.h5", model_config(kHybrid));
  ASSERT_NO_FATAL_FAILURE(overwrite_int64_attribute(path("v3.h5"), "version", 3));
  for (const auto& f : std::vector<std::function<void()>>{
           [&] { lat::load_model_weights(path("v3.h5")); },
           [&] { lat::export_model({path("v3.h5"), "safetensors", path("out"), "f32", {}}); },
           [&] { lat::inspect(path("v3.h5"), 16); }}) {
    expect_error(f, {"checkpoint version 3 is newer than this lat supports (2)", path("v3.h5")});
  }
}

TEST_F(ExportTest, BrokenExportsAreNamed) {
  save("ckpt.h5", model_config(kHybrid));
  lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "f32", {}});
  const std::string st = path("out/model.safetensors");

  // A missing tensor: rewrite the file without o_norm of layer 0.
  lat::SafetensorsFile file = lat::load_safetensors(st);
  std::vector<std::pair<std::string, lat::Tensor>> fewer;
  for (const auto& t : file.tensors)
    if (t.first != "layers.0.attn.o_norm.weight") fewer.push_back(t);
  lat::save_safetensors(path("out/fewer.safetensors"), fewer);
  expect_error([&] { lat::export_model({path("out/fewer.safetensors"), "h5-weights", path("x"), "f32", {}}); },
               {"has no tensor 'layers.0.attn.o_norm.weight'"});

  // A tensor of the wrong shape.
  std::vector<std::pair<std::string, lat::Tensor>> wrong = file.tensors;
  wrong[0].second = lat::Tensor::zeros({kVocabSize, 17});
  lat::save_safetensors(path("out/wrong.safetensors"), wrong);
  expect_error(
      [&] {
        lat::export_model({path("out/wrong.safetensors"), "h5-weights", path("x"), "f32", {}});
      },
      {"model.d_model 16 does not match tensor 'embeddings.weight' [12, 17]: expected 16 columns, found 17"});

  // A header overrunning the file.
  std::string bytes = read_bytes(st);
  bytes.resize(bytes.size() / 2);
  write_bytes(path("out/model.safetensors"), bytes);
  expect_error([&] { lat::load_model_weights(st); }, {st});

  // No config.json beside the weights.
  fs::remove(path("out/config.json"));
  expect_error([&] { lat::load_model_weights(path("out/fewer.safetensors")); }, {path("out/config.json")});

  // config.json that lat did not write.
  write_bytes(path("out/config.json"), R"({"model_type": "llama"})");
  expect_error([&] { lat::load_model_weights(path("out/fewer.safetensors")); },
               {"model_type \"llama\": expected \"qwen3_5_text\"", "or lat's own export (with 'lat_config')"});
  write_bytes(path("out/config.json"), R"({"hidden_size": 16})");
  expect_error([&] { lat::load_model_weights(path("out/fewer.safetensors")); }, {"no string 'lat_config'"});
}

// The root attributes an export keeps in __metadata__ are held to the checkpoint reader's
// bounds: a negative step or token count, or a world size below 1, is damage.
TEST_F(ExportTest, OutOfRangeOrNonIntegerCountsInMetadataAreNamed) {
  save("ckpt.h5", model_config(kHybrid));
  lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "f32", {}});
  const std::string st = path("out/model.safetensors");
  const lat::SafetensorsFile file = lat::load_safetensors(st);
  const struct {
    const char* key;
    const char* value;
    const char* expected;
  } cases[] = {{"step", "-4", "expected an integer >= 0, got '-4'"},
               {"tokens_seen", "-1", "expected an integer >= 0, got '-1'"},
               {"tokens_seen", "1.5", "expected an integer, got '1.5'"},
               {"world_size", "0", "expected an integer >= 1, got '0'"}};
  for (const auto& c : cases) {
    std::map<std::string, std::string> metadata = file.metadata;
    metadata[c.key] = c.value;
    lat::save_safetensors(st, file.tensors, lat::SafetensorsDType::f32, metadata);
    expect_error([&] { lat::load_model_weights(st); },
                 {"load_model_weights: '" + st + "': __metadata__ '" + c.key + "': " + c.expected});
  }
  lat::save_safetensors(st, file.tensors, lat::SafetensorsDType::f32, file.metadata);
  EXPECT_EQ(lat::load_model_weights(st).checkpoint.step, 7);
}

/// The stored checksums of the safetensors file `bytes` and each tensor's CRC-32 recomputed
/// over its bytes as they lie in the data section.
struct StoredChecksums {
  nlohmann::json stored;
  std::map<std::string, std::string> recomputed;
};
StoredChecksums checksums_of(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  StoredChecksums c{nlohmann::json::parse(header["__metadata__"]["crc32"].get<std::string>()), {}};
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    c.recomputed[name] = lat::crc32_hex(lat::crc32_of(bytes.data() + 8 + n + begin, end - begin));
  }
  return c;
}

TEST_F(ExportTest, ExportsCarryTheChecksumOfEachTensorAsStored) {
  const lat::Checkpoint ckpt = save("ckpt.h5", model_config(kHybrid));
  for (const std::string dtype : {"f32", "bf16"}) {
    lat::export_model({path("ckpt.h5"), "safetensors", path(dtype), dtype, {}});
    const StoredChecksums c = checksums_of(read_bytes(path(dtype + "/model.safetensors")));
    ASSERT_EQ(c.stored.size(), ckpt.model.size()) << dtype;
    for (const auto& [name, tensor] : ckpt.model) {
      EXPECT_EQ(c.stored[name], c.recomputed.at(name)) << dtype << " " << name;
      // f32 stores the checkpoint's bytes; bf16 its rounding, so another checksum.
      const std::string of_f32 = lat::crc32_hex(lat::tensor_crc32(tensor));
      if (dtype == "f32") {
        EXPECT_EQ(c.stored[name], of_f32) << name;
      } else {
        EXPECT_NE(c.stored[name], of_f32) << name;
      }
    }
  }
}

TEST_F(ExportTest, FlippedBitInAnExportIsAnErrorNamingTheTensorAndLeavesTheFile) {
  save("ckpt.h5", model_config(kHybrid));
  lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "bf16", {}});
  const std::string st = path("out/model.safetensors");
  std::string bytes = read_bytes(st);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  const uint64_t at = 8 + n + header["layers.1.attn.q_proj.weight"]["data_offsets"][0].get<uint64_t>() + 5;
  bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
  write_bytes(st, bytes);
  for (const std::string& form : {st, path("out")})
    expect_error([&] { lat::load_model_weights(form); },
                 {st, "tensor 'layers.1.attn.q_proj.weight': checksum mismatch", "the file is damaged"});
  EXPECT_EQ(read_bytes(st), bytes);
}

TEST_F(ExportTest, DamagedTokenizerOrConfigJsonIsNamed) {
  save("ckpt.h5", model_config(kHybrid));
  lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "f32", {}});
  const std::string tokenizer = path("out/tokenizer.json"), config = path("out/config.json");
  const std::string good_tokenizer = read_bytes(tokenizer), good_config = read_bytes(config);

  write_bytes(tokenizer, R"({"type": "char", "vocab": ["a", "", "b"]})");
  expect_error([&] { lat::load_model_weights(path("out")); },
               {tokenizer, "vocab entry 1: expected one character, got \"\""});
  // An entry nested 10^6 deep (valid JSON).
  write_bytes(tokenizer,
              R"({"type": "char", "vocab": [)" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "]}");
  std::string message = expect_error([&] { lat::load_model_weights(path("out")); },
                                     {tokenizer, "deeper than 64 levels"});
  EXPECT_LT(message.size(), 300u);
  write_bytes(tokenizer, good_tokenizer);

  write_bytes(config, R"({"lat_config": "model: {}", "lat_config": "model: {}"})");
  expect_error([&] { lat::load_model_weights(path("out")); }, {config, "has the key 'lat_config' twice"});
  write_bytes(config, good_config);
  EXPECT_EQ(lat::load_model_weights(path("out")).checkpoint.tokenizer_vocab, kVocab);
}

// ---- lat info ---------------------------------------------------------------------------------

TEST_F(ExportTest, InfoCountsParametersPerModule) {
  // d_model 16 = 2 heads x 8: attention projections 4 x 16 x 16.
  const lat::Config cfg = model_config(kHybrid);
  const lat::ModelInfo info = lat::model_info(cfg, kVocabSize, 100);
  lat::Generator gen(0);
  lat::HybridLM model(lat::hybrid_lm_config(cfg.model, kVocabSize), gen);
  EXPECT_EQ(info.total_params, model.num_parameters());
  int64_t sum = 0;
  for (const lat::ParamCount& p : info.params) sum += p.count;
  EXPECT_EQ(sum, info.total_params);

  const int64_t D = 16, F = lat::swiglu_hidden_size(16, 4.0), H = 2, W = 4;
  std::vector<std::pair<std::string, int64_t>> rows;
  for (const lat::ParamCount& p : info.params) rows.emplace_back(p.name, p.count);
  const int64_t gdn = 3 * D * D + 2 * H * D + 2 * H + 3 * D * W + D * D + 8 + D * D;  // qkv, a/b_proj, A_log+dt_bias, convs, g_proj, o_norm, o_proj
  const int64_t gla = 3 * D * D + H * D + 2 * H + 3 * D * W + D * D + 8 + D * D;
  EXPECT_EQ(rows, (std::vector<std::pair<std::string, int64_t>>{{"embeddings", kVocabSize * D},
                                                                 {"layers.0.attn (gdn)", gdn},
                                                                 {"layers.0.mlp", 3 * D * F},
                                                                 {"layers.1.attn (attn)", 4 * D * D},
                                                                 {"layers.1.mlp", 3 * D * F},
                                                                 {"layers.2.attn (simple_gla)", gla},
                                                                 {"layers.2.mlp", 3 * D * F},
                                                                 {"norms", 7 * D},
                                                                 {"lm_head", kVocabSize * D}}));
  const lat::ModelInfo tied = lat::model_info(model_config(kHybrid + "  tie_embeddings: true\n"), kVocabSize, 100);
  EXPECT_EQ(tied.total_params, info.total_params - kVocabSize * D);
  EXPECT_EQ(tied.params.back().name, "lm_head (tied to embeddings)");
}

TEST_F(ExportTest, InfoMemoryOfStatesAndKvCaches) {
  // H 4, K 8, V 16 (expand_v 2), attention kv heads 2, window 64, conv 3.
  const lat::Config cfg = model_config(
      "  d_model: 32\n  n_layers: 4\n  n_heads: 4\n  layers: \"gdn,linear_attn,attn\"\n  expand_v: 2.0\n"
      "  attn: {n_kv_heads: 2, window_size: 64}\n  linear: {conv_size: 3, normalize: true}\n");
  const int64_t H = 4, K = 8, V = 16, Hkv = 2;
  for (int64_t L : {10, 64, 1000}) {
    const lat::ModelInfo info = lat::model_info(cfg, kVocabSize, L);
    ASSERT_EQ(info.memory.size(), 4u);
    const int64_t gdn_state = H * K * V, gdn_conv = 2 * (2 * H * K + H * V);
    const int64_t la_state = H * K * (V + 1);  // normalizer column; linear_attn has no conv
    const int64_t kv = 2 * std::min<int64_t>(L, 64) * Hkv * K;
    EXPECT_EQ(info.memory[0].state, gdn_state);
    EXPECT_EQ(info.memory[0].conv, gdn_conv);
    EXPECT_EQ(info.memory[1].state, la_state);
    EXPECT_EQ(info.memory[1].conv, 0);
    EXPECT_EQ(info.memory[2].state, kv);
    EXPECT_EQ(info.memory[3].kind, "gdn");
    EXPECT_EQ(info.memory_total, 2 * (gdn_state + gdn_conv) + la_state + kv);
    EXPECT_EQ(info.attention_only_total, 4 * 2 * L * Hkv * K);  // full attention, no window
  }
  expect_error([&] { lat::model_info(cfg, kVocabSize, 0); },
               {"lat info: --context: expected an int in [1, 2^40], got 0"});
  expect_error([&] { lat::model_info(cfg, kVocabSize, lat::kMaxContext + 1); },
               {"lat info: --context: expected an int in [1, 2^40], got 1099511627777"});
  const lat::ModelInfo longest = lat::model_info(cfg, kVocabSize, lat::kMaxContext);
  EXPECT_EQ(longest.memory[2].state, 2 * 64 * Hkv * K);  // the window bounds the KV cache
  EXPECT_EQ(longest.attention_only_total, 4 * 2 * lat::kMaxContext * Hkv * K);
}

TEST_F(ExportTest, InfoMemoryWithGroupedValueHeadsAndAttentionsOwnHeads) {
  // Linear: H 2 key heads of K 8, Hv 4 value heads of V 16; attention: 4 heads of 12, 2 kv heads.
  const lat::Config cfg = model_config(
      "  d_model: 32\n  n_layers: 2\n  n_heads: 2\n  head_dim: 8\n  layers: \"gdn,attn\"\n  expand_v: 2.0\n"
      "  attn: {n_heads: 4, head_dim: 12, n_kv_heads: 2}\n  linear: {conv_size: 4, n_v_heads: 4}\n");
  const int64_t H = 2, K = 8, Hv = 4, V = 16, Hkv = 2, D = 12, L = 100;
  const lat::ModelInfo info = lat::model_info(cfg, kVocabSize, L);
  ASSERT_EQ(info.memory.size(), 2u);
  EXPECT_EQ(info.memory[0].state, Hv * K * V);
  EXPECT_EQ(info.memory[0].conv, 3 * (2 * H * K + Hv * V));
  EXPECT_EQ(info.memory[1].state, 2 * L * Hkv * D);
  EXPECT_EQ(info.attention_only_total, 2 * 2 * L * Hkv * D);
  const std::string text = lat::format_info(info);
  EXPECT_NE(text.find("2 heads x 8, value head dim 16 (4 value heads); attention 4 heads x 12, kv heads 2"),
            std::string::npos)
      << text;
}

TEST_F(ExportTest, InfoOnACheckpointReportsItsFacts) {
  save("ckpt.h5", model_config(kHybrid));
  lat::export_model({path("ckpt.h5"), "safetensors", path("out"), "f32", {}});
  for (const std::string& p : {path("ckpt.h5"), path("out/model.safetensors")}) {
    const lat::ModelInfo info = lat::inspect(p, 32);
    ASSERT_TRUE(info.checkpoint.has_value());
    EXPECT_EQ(info.checkpoint->step, 7);
    EXPECT_EQ(info.checkpoint->tokens_seen, 1234);
    EXPECT_EQ(info.checkpoint->val_loss, 2.5);
    EXPECT_EQ(info.vocab_size, kVocabSize);
    const std::string text = lat::format_info(info);
    EXPECT_TRUE(contains(text, "step 7, tokens seen 1,234")) << text;
    EXPECT_TRUE(contains(text, "val loss 2.5000 (best 2.2500)")) << text;
    EXPECT_TRUE(contains(text, "frozen 1 parameters\n    embeddings.weight")) << text;
    EXPECT_TRUE(contains(text, "generation memory at context 32")) << text;
    EXPECT_TRUE(contains(text, "layers: \"gdn,attn,simple_gla\"")) << text;
  }
}

}  // namespace
