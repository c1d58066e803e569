// What a new user of the Hugging Face interop runs into: `lat export` refusing an --out that
// is the model's own directory (it would overwrite its input) or a run directory (lat and
// other tools would then read different models there), with nothing written; config.json
// mistakes named as such (a misspelt key with the nearest known one, and no follow-on error
// about layer_types counted against a dimension that was never read); and a config.json of
// another architecture named by its model_type.
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/export.h"
#include "train/files/hf_config.h"
#include "train/files/model_reader.h"
#include "train/files/safetensors.h"
#include "train/files/trained_model.h"
#include "train/inference/generate.h"
#include "train/inference/info.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

const std::string kShape =
    "  d_model: 16\n  n_layers: 2\n  n_heads: 2\n  layers: \"gdn,attn\"\n  norm_zero_centered: true\n"
    "  linear: {chunk_size: 4}\n  attn: {output_gate: true, qk_norm: true}\n";
const std::string kVocab = "\n abcdefghi";

class HfNewUserTest : public TempDirTest {
 protected:
  /// A checkpoint of a freshly initialized kShape model with the char tokenizer at `file`.
  std::string save_model(const std::string& file) {
    const lat::Config cfg = model_config(kShape);
    lat::Generator gen(5);
    lat::HybridLM model(lat::hybrid_lm_config(cfg.model, static_cast<int64_t>(kVocab.size())), gen);
    lat::Checkpoint c;
    c.config_yaml = lat::to_yaml(cfg);
    c.tokenizer_type = "char";
    c.tokenizer_vocab = kVocab;
    for (const auto& [name, t] : model.named_parameters()) c.model.emplace_back(name, t.detach().clone());
    fs::create_directories(fs::path(path(file)).parent_path());
    lat::save_checkpoint(path(file), c);
    return path(file);
  }

  /// Every file of `dir` with its bytes.
  static std::map<std::string, std::string> files_of(const std::string& dir) {
    std::map<std::string, std::string> files;
    for (const auto& entry : fs::directory_iterator(dir)) files[entry.path().string()] = read_bytes(entry.path());
    return files;
  }
};

TEST_F(HfNewUserTest, ExportOverItsOwnDirectoryIsRefusedAndWritesNothing) {
  save_model("model.h5");
  lat::export_model({path("model.h5"), "hf", path("hf"), "f32", {}});
  const std::map<std::string, std::string> before = files_of(path("hf"));
  ASSERT_EQ(before.size(), 5u);  // model.safetensors, config.json, generation_config.json, two tokenizer files
  for (const char* format : {"hf", "safetensors", "h5-weights"}) {
    SCOPED_TRACE(format);
    expect_error<lat::ConfigError>([&] { lat::export_model({path("hf"), format, path("hf"), "f32", {}}); },
                                   {"export: --out '" + path("hf") + "' is the directory of the model being exported",
                                    "'" + path("hf/model.safetensors") + "'", "would overwrite its input"});
    EXPECT_EQ(files_of(path("hf")), before);
  }
  // A checkpoint file's own directory too: --format h5-weights would replace model.h5 there.
  save_model("ckpt/model.h5");
  const std::map<std::string, std::string> ckpt_before = files_of(path("ckpt"));
  expect_error<lat::ConfigError>(
      [&] { lat::export_model({path("ckpt/model.h5"), "h5-weights", path("ckpt"), "f32", {}}); },
      {"is the directory of the model being exported ('" + path("ckpt/model.h5") + "')"});
  EXPECT_EQ(files_of(path("ckpt")), ckpt_before);
}

TEST_F(HfNewUserTest, ExportIntoARunDirectoryIsRefusedAndWritesNothing) {
  save_model("run/ckpt_00000001.h5");
  write("run/latest", "ckpt_00000001.h5\n");
  save_model("other_run/ckpt_00000002.h5");  // another run's directory, without `latest`
  for (const char* out : {"run", "other_run"}) {
    SCOPED_TRACE(out);
    const std::map<std::string, std::string> before = files_of(path(out));
    expect_error<lat::ConfigError>([&] { lat::export_model({path("run"), "hf", path(out), "f32", {}}); },
                                   {"export: --out '" + path(out) + "'", "expected another directory"});
    EXPECT_EQ(files_of(path(out)), before);
  }
  expect_error<lat::ConfigError>([&] { lat::export_model({path("run"), "hf", path("other_run"), "f32", {}}); },
                                 {"is a run directory (it holds checkpoints)", path("other_run/export")});
  // The subdirectory the message suggests, and an earlier export, are accepted.
  for (int i = 0; i < 2; ++i) lat::export_model({path("run"), "hf", path("run/export"), "f32", {}});
  EXPECT_EQ(lat::load_model_weights(path("run/export")).format, lat::ModelFormat::hf);
}

TEST_F(HfNewUserTest, ExportIntoADirectoryOfOtherFilesIsRefusedAndWritesNothing) {
  save_model("run/ckpt_00000001.h5");
  std::filesystem::create_directories(path("notes"));
  write("notes/todo.txt", "keep me\n");
  const std::map<std::string, std::string> before = files_of(path("notes"));
  for (const char* format : {"hf", "safetensors"}) {
    SCOPED_TRACE(format);
    expect_error<lat::ConfigError>([&] { lat::export_model({path("run"), format, path("notes"), "f32", {}}); },
                                   {"export: --out '" + path("notes") + "' holds other files and no earlier export "
                                    "(no config.json): expected a new or empty directory or an earlier export"});
    EXPECT_EQ(files_of(path("notes")), before);
  }
  std::filesystem::create_directories(path("empty"));
  lat::export_model({path("run"), "hf", path("empty"), "f32", {}});
  EXPECT_EQ(lat::load_model_weights(path("empty")).format, lat::ModelFormat::hf);
}

TEST_F(HfNewUserTest, AHuggingFaceDirectoryWithoutLatsTokenizerSaysWhyGenerateHasNoText) {
  save_model("run/ckpt_00000001.h5");
  lat::export_model({path("run"), "hf", path("hf"), "f32", {}});
  fs::remove(path("hf/tokenizer.json"));
  fs::remove(path("hf/tokenizer_config.json"));
  std::ostringstream out;
  lat::GenerateOptions options;
  options.checkpoint = path("hf");
  options.max_new_tokens = 3;
  expect_error([&] { lat::generate(options, out); },
               {"generate: '" + path("hf/model.safetensors") + "' has no tokenizer lat runs (a model on token ids, or "
                "a Hugging Face tokenizer other than lat's char and byte forms): no text to write"});
  const std::string info = lat::format_info(lat::inspect(path("hf"), 16));
  EXPECT_NE(info.find("created - by lat - (a Hugging Face directory records neither)"), std::string::npos) << info;
}

TEST_F(HfNewUserTest, AMisspeltKeyIsNamedWithTheNearestKnownOneAndNoFollowOnError) {
  nlohmann::json j = lat::hf_config_json(model_config(kShape).model, 11, lat::SafetensorsDType::f32);
  j["num_hiden_layers"] = j["num_hidden_layers"];
  j.erase("num_hidden_layers");
  j["rope_scalling"] = nullptr;
  const std::string message = expect_error([&] { lat::model_config_from_hf(j, "dir/config.json"); },
                                           {"'dir/config.json': keys lat cannot honour",
                                            "num_hidden_layers: missing (a required dimension)",
                                            "num_hiden_layers: 2 (a key lat does not know, did you mean "
                                            "'num_hidden_layers'?)",
                                            "rope_scalling: null (a key lat does not know, did you mean "
                                            "'rope_scaling'?)"});
  // layer_types has the 2 entries a misspelt num_hidden_layers would have said.
  EXPECT_FALSE(contains(message, "layer_types")) << message;
  // A layer_types length that differs from a num_hidden_layers that was read stays an error.
  j["num_hidden_layers"] = 3;
  j.erase("num_hiden_layers");
  j.erase("rope_scalling");
  expect_error([&] { lat::model_config_from_hf(j, "dir/config.json"); },
               {"layer_types: expected num_hidden_layers (3) entries, got 2"});
}

TEST_F(HfNewUserTest, AConfigOfAnotherArchitectureIsNamedByItsModelType) {
  save_model("model.h5");
  lat::export_model({path("model.h5"), "hf", path("hf"), "f32", {}});
  nlohmann::json j = nlohmann::json::parse(read_bytes(path("hf/config.json")));
  j["model_type"] = "qwen3_5";  // the multimodal wrapper's config, whose text model is text_config
  write("hf/config.json", j.dump());
  for (const std::string& p : {path("hf"), path("hf/model.safetensors")}) {
    SCOPED_TRACE(p);
    expect_error([&] { lat::load_model_weights(p); },
                 {"'" + path("hf/config.json") + "': model_type \"qwen3_5\": expected \"qwen3_5_text\""});
  }
}

}  // namespace
