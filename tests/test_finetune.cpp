// Fine-tuning (train/run/finetune.h): glob patterns, freeze (no gradient, no optimizer entry),
// lr_mult resolution, init_from shape checks (strict errors name every parameter and both
// shapes; non-strict resizes vocabularies and lists what it skipped), the tokenizer a
// fine-tuning run uses.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lat/ops.h"
#include "lat/tape.h"
#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/model_reader.h"
#include "train/run/finetune.h"
#include "train/run/trainer.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

class FinetuneTest : public TempDirTest {
 protected:
  void TearDown() override {
    std::fclose(log_);
    TempDirTest::TearDown();
  }

  /// Trains a tiny model on a small text for `steps` steps into `out`, with extra config
  /// lines; returns the final checkpoint.
  lat::Checkpoint train(const std::string& out, const std::string& extra, int64_t steps = 3) {
    if (!fs::exists(path("text.txt"))) {
      std::ofstream text(path("text.txt"));
      for (int i = 0; i < 40; ++i) text << "the quick brown fox jumps over the lazy dog " << i << "\n";
    }
    const std::string yaml = "model: {d_model: 16, n_layers: 2, n_heads: 2, layers: \"gdn,attn\"}\n"
                             "data: {path: " + path("text.txt") + ", block_size: 16}\n"
                             "train: {batch_size: 2, max_steps: " + std::to_string(steps) +
                             ", warmup: 0, lr: 0.01, schedule: constant, eval_every: 0, eval_batches: 1, "
                             "log_every: 1, ckpt_every: 100, out_dir: " + path(out) + "}\n" + extra;
    std::ofstream(path(out + ".yaml")) << yaml;
    lat::TrainOptions options;
    options.log = log_;
    options.live_progress = false;
    const lat::TrainSummary summary = lat::train(lat::load_config(path(out + ".yaml")), options);
    return lat::load_checkpoint(summary.checkpoint);
  }

  std::FILE* log_ = std::tmpfile();
};

const std::string kModel = "  d_model: 16\n  n_layers: 2\n  n_heads: 2\n  layers: \"gdn,attn\"\n";

std::unique_ptr<lat::HybridLM> build(const lat::Config& cfg, int64_t vocab, uint64_t seed) {
  lat::Generator gen(seed);
  return std::make_unique<lat::HybridLM>(lat::hybrid_lm_config(cfg.model, vocab), gen);
}

/// ModelWeights holding `model`'s parameters (copies), as load_model_weights returns them.
lat::ModelWeights weights_of(const lat::HybridLM& model, const std::string& source) {
  lat::ModelWeights w;
  w.path = source;
  for (const auto& [name, t] : model.named_parameters()) w.checkpoint.model.emplace_back(name, t.detach().clone());
  return w;
}

TEST(Glob, StarCrossesDotsQuestionMarkAndClasses) {
  EXPECT_TRUE(lat::glob_match("layers.0.*", "layers.0.attn.q_proj.weight"));
  EXPECT_FALSE(lat::glob_match("layers.0.*", "layers.10.attn.q_proj.weight"));
  EXPECT_TRUE(lat::glob_match("*.A_log", "layers.3.attn.A_log"));
  EXPECT_TRUE(lat::glob_match("embeddings.*", "embeddings.weight"));
  EXPECT_FALSE(lat::glob_match("embeddings", "embeddings.weight"));
  EXPECT_TRUE(lat::glob_match("layers.?.mlp.*", "layers.7.mlp.up_proj.weight"));
  EXPECT_TRUE(lat::glob_match("layers.[01].*", "layers.1.mlp_norm.weight"));
  EXPECT_FALSE(lat::glob_match("layers.[01].*", "layers.2.mlp_norm.weight"));
}

TEST(Freeze, FrozenParametersGetNoGradientAndAreNotTrainable) {
  const lat::Config cfg = model_config(kModel);
  auto model = build(cfg, 10, 1);
  const auto params = model->named_parameters();
  const auto frozen = lat::frozen_names(params, {"layers.0.*", "embeddings.*"});
  ASSERT_FALSE(frozen.empty());
  EXPECT_EQ(frozen.front(), "embeddings.weight");
  for (const std::string& name : frozen)
    EXPECT_TRUE(name == "embeddings.weight" || name.rfind("layers.0.", 0) == 0) << name;
  const auto trainable = lat::freeze_parameters(params, frozen);
  EXPECT_EQ(trainable.size() + frozen.size(), params.size());

  lat::Tensor ids = lat::Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {1, 6});
  lat::backward(lat::sum(model->forward(ids)));
  for (const auto& [name, t] : params) {
    const bool is_frozen = std::find(frozen.begin(), frozen.end(), name) != frozen.end();
    EXPECT_EQ(t.grad().defined(), !is_frozen) << name;
    EXPECT_EQ(t.requires_grad(), !is_frozen) << name;
  }
}

TEST(Freeze, PatternsThatMatchNothingOrEverythingAreConfigErrors) {
  auto model = build(model_config(kModel), 10, 1);
  const auto params = model->named_parameters();
  expect_error<lat::ConfigError>([&] { lat::frozen_names(params, {"layers.0.*", "layer.1.*"}); },
                                 {"freeze: pattern 'layer.1.*' matches no parameter"});
  expect_error<lat::ConfigError>([&] { lat::frozen_names(params, {"*"}); },
                                 {"freeze: the patterns freeze every parameter; nothing would train"});
}

TEST(LrMult, LastMatchingPatternWinsAndUnmatchedIsAnError) {
  auto model = build(model_config(kModel), 10, 1);
  const auto params = model->named_parameters();
  const auto mults = lat::lr_multipliers(params, {{"layers.*", 0.5}, {"*.A_log", 0.0}, {"layers.1.*", 2.0}});
  std::map<std::string, double> m(mults.begin(), mults.end());
  EXPECT_EQ(m.at("layers.0.attn.q_proj.weight"), 0.5);
  EXPECT_EQ(m.at("layers.0.attn.A_log"), 0.0);
  EXPECT_EQ(m.at("layers.1.attn.q_proj.weight"), 2.0);
  EXPECT_EQ(m.count("embeddings.weight"), 0u);
  expect_error<lat::ConfigError>([&] { lat::lr_multipliers(params, {{"layers.5.*", 1.5}}); },
                                 {"lr_mult: pattern 'layers.5.*' matches no trainable parameter"});
  // Frozen parameters are not trainable: a pattern only they match is an error too.
  const auto trainable = lat::freeze_parameters(params, lat::frozen_names(params, {"embeddings.*"}));
  expect_error<lat::ConfigError>([&] { lat::lr_multipliers(trainable, {{"embeddings.*", 0.1}}); },
                                 {"lr_mult: pattern 'embeddings.*' matches no trainable parameter"});
}

TEST(InitFrom, StrictCopiesEveryParameterBitForBit) {
  const lat::Config cfg = model_config(kModel);
  auto base = build(cfg, 10, 1);
  auto model = build(cfg, 10, 2);
  const lat::InitReport report = lat::init_from_weights(*model, weights_of(*base, "base.h5"), true);
  EXPECT_EQ(report.loaded.size(), model->named_parameters().size());
  EXPECT_TRUE(report.missing.empty() && report.unexpected.empty() && report.resized.empty());
  const auto a = base->named_parameters(), b = model->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>());
}

TEST(InitFrom, StrictMismatchNamesEveryParameterAndBothShapes) {
  auto base = build(model_config(kModel), 10, 1);
  // Wider MLP, one layer more, tied embeddings (no lm_head).
  auto model = build(model_config("  d_model: 16\n  n_layers: 3\n  n_heads: 2\n  layers: \"gdn,attn\"\n"
                                  "  mlp_ratio: 2.0\n  tie_embeddings: true\n"),
                     10, 2);
  const auto before = model->named_parameters().front().second.to_vector<float>();
  expect_error([&] { lat::init_from_weights(*model, weights_of(*base, "/runs/base/ckpt.h5"), true); },
               {"init_from '/runs/base/ckpt.h5'", "layers.0.mlp.gate_proj.weight: checkpoint [64, 16], model [32, 16]",
                "layers.1.mlp.down_proj.weight: checkpoint [16, 64], model [16, 32]",
                "layers.2.attn.q_proj.weight: not in the checkpoint", "lm_head.weight: not a parameter of the model"});
  // Nothing was copied.
  EXPECT_EQ(model->named_parameters().front().second.to_vector<float>(), before);
}

TEST(InitFrom, NonStrictResizesTheVocabularyAndListsTheRest) {
  auto base = build(model_config(kModel), 10, 1);
  auto model = build(model_config("  d_model: 16\n  n_layers: 3\n  n_heads: 2\n  layers: \"gdn,attn\"\n"), 13, 2);
  const auto fresh = model->named_parameters();
  std::map<std::string, std::vector<float>> initial;
  for (const auto& [name, t] : fresh) initial[name] = t.to_vector<float>();

  const lat::InitReport report = lat::init_from_weights(*model, weights_of(*base, "base.h5"), false);
  EXPECT_EQ(report.resized, (std::vector<std::string>{"embeddings.weight: checkpoint [10, 16], model [13, 16]",
                                                      "lm_head.weight: checkpoint [10, 16], model [13, 16]"}));
  ASSERT_FALSE(report.missing.empty());
  for (const std::string& m : report.missing) EXPECT_EQ(m.rfind("layers.2.", 0), 0u) << m;
  EXPECT_TRUE(report.unexpected.empty());
  EXPECT_TRUE(contains(report.describe(), "resized (leading rows copied): embeddings.weight")) << report.describe();

  std::map<std::string, std::vector<float>> old;
  for (const auto& [name, t] : base->named_parameters()) old[name] = t.to_vector<float>();
  for (const auto& [name, t] : model->named_parameters()) {
    const auto now = t.to_vector<float>();
    if (name == "embeddings.weight" || name == "lm_head.weight") {
      EXPECT_TRUE(std::equal(old[name].begin(), old[name].end(), now.begin())) << name;        // rows 0..9
      EXPECT_TRUE(std::equal(now.begin() + 160, now.end(), initial[name].begin() + 160)) << name;  // rows 10..12
    } else if (name.rfind("layers.2.", 0) == 0) {
      EXPECT_EQ(now, initial[name]) << name;
    } else {
      EXPECT_EQ(now, old[name]) << name;
    }
  }
}

TEST_F(FinetuneTest, TokenizerKeepsTheCheckpointsIdsAndExtendsOnlyWhenAllowed) {
  lat::Checkpoint init;
  init.tokenizer_type = "char";
  init.tokenizer_vocab = "\n abcde";
  std::ofstream(path("same.txt")) << "bad cab\nace\n";
  std::ofstream(path("new.txt")) << "zebra!\n";

  auto same = lat::finetune_tokenizer(init, model_config(kModel, path("same.txt")).data, true);
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->vocab_string(), init.tokenizer_vocab);  // not the text's own sorted vocabulary

  expect_error<lat::ConfigError>(
      [&] { lat::finetune_tokenizer(init, model_config(kModel, path("new.txt")).data, true); },
      {"3 characters outside the checkpoint's vocabulary: '!', 'r', 'z'"});
  auto extended = lat::finetune_tokenizer(init, model_config(kModel, path("new.txt")).data, false);
  ASSERT_TRUE(extended.has_value());
  EXPECT_EQ(extended->vocab_string(), "\n abcde!rz");

  lat::Checkpoint byte_init;
  byte_init.tokenizer_type = "byte";
  expect_error<lat::ConfigError>(
      [&] { lat::finetune_tokenizer(byte_init, model_config(kModel, path("same.txt")).data, true); },
      {"init_from: the checkpoint's tokenizer is 'byte', data.tokenizer is 'char' (init_from_strict: false starts a "
       "new vocabulary)"});
  EXPECT_FALSE(lat::finetune_tokenizer(byte_init, model_config(kModel, path("same.txt")).data, false).has_value());
}

std::map<std::string, std::vector<float>> values(const lat::Checkpoint& c) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : c.model) out[name] = t.to_vector<float>();
  return out;
}

TEST_F(FinetuneTest, TrainingKeepsFrozenWeightsBitIdenticalAndChangesTheOthers) {
  const lat::Checkpoint base = train("base", "");
  const lat::Checkpoint tuned = train("tuned", "init_from: " + path("base/ckpt_00000003.h5") +
                                                   "\nfreeze: [\"layers.0.*\", \"embeddings.*\"]\n"
                                                   "lr_mult: {\"layers.1.mlp.*\": 0.0, \"norm.*\": 3.0}\n");
  const auto before = values(base), after = values(tuned);
  std::vector<std::string> frozen;
  for (const auto& [name, v] : after) {
    const bool is_frozen = name == "embeddings.weight" || name.rfind("layers.0.", 0) == 0;
    if (is_frozen) frozen.push_back(name);
    const bool still = std::memcmp(v.data(), before.at(name).data(), v.size() * sizeof(float)) == 0;
    // Frozen: the base's weights, untouched. lr_mult 0: not moved either. Others trained.
    if (is_frozen || name.rfind("layers.1.mlp.", 0) == 0)
      EXPECT_TRUE(still) << name;
    else
      EXPECT_FALSE(still) << name;
  }
  std::vector<std::string> saved = tuned.frozen;
  std::sort(saved.begin(), saved.end());
  EXPECT_EQ(saved, frozen);
  // No optimizer state for frozen parameters.
  for (const lat::CheckpointParamState& p : tuned.optimizer.params)
    EXPECT_EQ(std::find(frozen.begin(), frozen.end(), p.name), frozen.end()) << p.name;
  EXPECT_EQ(tuned.optimizer.params.size() + frozen.size(), tuned.model.size());

  // metrics.jsonl starts with the val loss before fine-tuning (step 0).
  std::ifstream metrics(path("tuned/metrics.jsonl"));
  std::string first;
  std::getline(metrics, first);
  EXPECT_EQ(first.rfind("{\"step\":0,\"val_loss\":", 0), 0u) << first;
}

TEST_F(FinetuneTest, InitFromMismatchThroughTrainNamesEachParameter) {
  train("base", "", 1);
  const std::string message =
      expect_error([&] { train("wide", "init_from: " + path("base") + "\nmodel.mlp_ratio: 2.0\n", 1); },
                   {"layers.0.mlp.gate_proj.weight: checkpoint [64, 16], model [32, 16]",
                    "layers.1.mlp.down_proj.weight: checkpoint [16, 64], model [16, 32]",
                    "model.* keys that differ from this run's: model.mlp_ratio: "});
  // The key to change comes before the tensors it changes.
  EXPECT_LT(message.find("model.mlp_ratio"), message.find("layers.0.mlp.gate_proj.weight")) << message;
  EXPECT_FALSE(fs::exists(path("wide/ckpt_00000001.h5")));
}

// init_from reads the weights as generate does: a NaN or inf in them, or a stored config
// outside the schema's bounds, stops the run before it writes anything, and the file is kept.
TEST_F(FinetuneTest, InitFromADamagedCheckpointIsAnErrorBeforeAnythingIsWritten) {
  train("base", "", 1);
  lat::Checkpoint base = lat::load_checkpoint(path("base/ckpt_00000001.h5"));
  const std::string name = base.model[2].first;
  std::vector<float> values = base.model[2].second.to_vector<float>();
  values[0] = -std::numeric_limits<float>::infinity();
  base.model[2].second = lat::Tensor::from_vector(values, base.model[2].second.shape());
  lat::save_checkpoint(path("inf.h5"), base);
  const std::string inf_bytes = read_bytes(path("inf.h5"));
  expect_error([&] { train("tuned", "init_from: " + path("inf.h5") + "\n", 1); },
               {path("inf.h5"), "/model/" + name + ": element 0 is -inf"});
  EXPECT_EQ(read_bytes(path("inf.h5")), inf_bytes);
  EXPECT_FALSE(fs::exists(path("tuned/ckpt_00000001.h5")));
  EXPECT_FALSE(fs::exists(path("tuned/metrics.jsonl")));

  lat::Config stored = lat::parse_config(base.config_yaml, "base");
  stored.model.n_layers = 1000000;
  base.config_yaml = lat::to_yaml(stored);
  base.model[2].second = lat::Tensor::zeros(base.model[2].second.shape());
  lat::save_checkpoint(path("layers.h5"), base);
  expect_error<lat::ConfigError>([&] { train("tuned", "init_from: " + path("layers.h5") + "\n", 1); },
                                 {"'" + path("layers.h5") +
                                  "': model.n_layers: expected an int in [1, 1024], got "
                                  "1000000"});
  EXPECT_FALSE(fs::exists(path("tuned/ckpt_00000001.h5")));
}

}  // namespace
