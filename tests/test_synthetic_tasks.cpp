// Synthetic recall tasks (data/synthetic_tasks.h): the structure of MQAR and copy sequences
// against their definitions, determinism over (seed, step, micro-batch, rank), the config
// keys and their errors, training on a task with an exact resume, and `lat eval --task`
// (train/task_eval.h): hand-made logits with known accuracies, and a tiny checkpoint through
// the binary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <regex>
#include <set>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "data/synthetic_tasks.h"
#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/config.h"
#include "train/inference/task_eval.h"
#include "train/run/trainer.h"

namespace fs = std::filesystem;
using namespace lat;
using lat::testing::contains;
using lat::testing::expect_error;

namespace {

struct Sequence {
  std::vector<int64_t> inputs, targets;
  int64_t answers = 0;
};

Sequence sample(const SyntheticTask& task, uint64_t key) {
  Sequence s;
  s.inputs.assign(static_cast<size_t>(task.seq_len()), -1);
  s.targets.assign(static_cast<size_t>(task.seq_len()), -1);
  s.answers = task.sample(key, s.inputs.data(), s.targets.data());
  return s;
}

MqarOptions mqar_options(int64_t vocab, std::vector<int64_t> pairs, double alpha = 0.01) {
  MqarOptions o;
  o.vocab = vocab;
  o.pairs = std::move(pairs);
  o.alpha = alpha;
  return o;
}

// The MQAR definition, checked on one sequence: returns the number of pairs N.
int64_t check_mqar_structure(const Sequence& s, int64_t vocab) {
  const int64_t T = static_cast<int64_t>(s.inputs.size()), half = vocab / 2;
  const int64_t N = s.answers;
  EXPECT_GE(N, 1);
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_GE(s.inputs[t], 0) << t;
    EXPECT_LT(s.inputs[t], vocab) << t;
  }
  // k1 v1 k2 v2 ...: keys in the lower half (0 excluded), values in the upper, all distinct.
  std::map<int64_t, int64_t> value_of;
  std::set<int64_t> values;
  for (int64_t j = 0; j < N; ++j) {
    const int64_t key = s.inputs[2 * j], value = s.inputs[2 * j + 1];
    EXPECT_GE(key, 1);
    EXPECT_LT(key, half);
    EXPECT_GE(value, half);
    EXPECT_LT(value, vocab);
    EXPECT_TRUE(value_of.emplace(key, value).second) << "key " << key << " twice";
    EXPECT_TRUE(values.insert(value).second) << "value " << value << " twice";
  }
  // N answers, each at a query slot after the pairs: the input there is a key, the target its value.
  std::set<int64_t> queried;
  int64_t answers = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (s.targets[t] == kIgnoreIndex) continue;
    ++answers;
    EXPECT_GE(t, 2 * N) << "an answer inside the pairs";
    EXPECT_EQ((t - 2 * N) % 2, 0) << "an answer off the query slots, at " << t;
    auto it = value_of.find(s.inputs[t]);
    if (it == value_of.end()) {
      ADD_FAILURE() << "the input at answer position " << t << " is not a key";
      continue;
    }
    EXPECT_EQ(s.targets[t], it->second) << "the target of key " << it->first;
    EXPECT_TRUE(queried.insert(it->first).second) << "key " << it->first << " queried twice";
  }
  EXPECT_EQ(answers, N);
  EXPECT_EQ(static_cast<int64_t>(queried.size()), N) << "every key is queried once";
  return N;
}

}  // namespace

TEST(Mqar, SequencesFollowTheDefinition) {
  const SyntheticTask task = SyntheticTask::mqar(mqar_options(512, {8}), 64);
  EXPECT_EQ(task.vocab_size(), 512);
  EXPECT_EQ(task.seq_len(), 64);
  for (uint64_t key = 0; key < 200; ++key) EXPECT_EQ(check_mqar_structure(sample(task, key), 512), 8);
}

TEST(Mqar, MostPairsThatFitStillFollowTheDefinition) {
  // 4 * pairs == seq_len: every query slot is used; 31 = vocab / 2 - 1: every key is used.
  EXPECT_EQ(mqar_max_pairs(8192, 256), 64);
  EXPECT_EQ(mqar_max_pairs(64, 256), 31);
  const SyntheticTask full_slots = SyntheticTask::mqar(mqar_options(8192, {64}), 256);
  const SyntheticTask all_keys = SyntheticTask::mqar(mqar_options(64, {31}), 256);
  for (uint64_t key = 0; key < 20; ++key) {
    EXPECT_EQ(check_mqar_structure(sample(full_slots, key), 8192), 64);
    EXPECT_EQ(check_mqar_structure(sample(all_keys, key), 64), 31);
  }
}

TEST(Mqar, PairsListIsAMixDrawnPerSequence) {
  const SyntheticTask task = SyntheticTask::mqar(mqar_options(256, {2, 4, 8}), 64);
  std::map<int64_t, int> seen;
  for (uint64_t key = 0; key < 3000; ++key) ++seen[check_mqar_structure(sample(task, key), 256)];
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& [pairs, count] : seen) EXPECT_NEAR(count, 1000, 100) << pairs << " pairs";
}

TEST(Mqar, QueryGapsFollowThePowerLaw) {
  // One pair in 64 tokens: 31 query slots g with P(g) = (g + 1)^(alpha - 1) / sum. Slot 0 (the
  // query right after the pair) against its exact probability, for alpha 0.01 and 1 (uniform).
  for (double alpha : {0.01, 1.0}) {
    const SyntheticTask task = SyntheticTask::mqar(mqar_options(256, {1}, alpha), 64);
    double total = 0.0;
    for (int g = 1; g <= 31; ++g) total += std::pow(g, alpha - 1.0);
    std::vector<int> count(31, 0);
    const int samples = 20000;
    for (uint64_t key = 0; key < static_cast<uint64_t>(samples); ++key) {
      const Sequence s = sample(task, key);
      for (int64_t t = 0; t < 64; ++t)
        if (s.targets[t] != kIgnoreIndex) ++count[(t - 2) / 2];
    }
    for (int g : {0, 1, 10, 30}) {
      const double expected = std::pow(g + 1, alpha - 1.0) / total;
      const double sd = std::sqrt(expected * (1 - expected) / samples);
      EXPECT_NEAR(static_cast<double>(count[g]) / samples, expected, 5 * sd) << "alpha " << alpha << ", slot " << g;
    }
  }
}

TEST(Mqar, OptionsThatDoNotFitAreErrorsNamingTheOption) {
  expect_error([] { SyntheticTask::mqar(mqar_options(8192, {65}), 256); }, {"pairs"});
  expect_error([] { SyntheticTask::mqar(mqar_options(16, {8}), 256); }, {"pairs"});
  expect_error([] { SyntheticTask::mqar(mqar_options(8192, {}), 256); }, {"pairs"});
  expect_error([] { SyntheticTask::mqar(mqar_options(2, {1}), 256); }, {"vocab"});
  expect_error([] { SyntheticTask::mqar(mqar_options(8192, {4}, 0.0), 256); }, {"alpha"});
  expect_error([] { SyntheticTask::named("mqra", {}, {}, 256); }, {"mqra"});
}

TEST(Copy, SequencesAreStringSeparatorCopyAndPadding) {
  CopyOptions options;
  options.length = 10;
  const SyntheticTask task = SyntheticTask::copy(options, 32);
  EXPECT_EQ(task.vocab_size(), kCopyVocab);
  std::set<int64_t> symbols;
  for (uint64_t key = 0; key < 100; ++key) {
    const Sequence s = sample(task, key);
    EXPECT_EQ(s.answers, 10);
    for (int64_t i = 0; i < 10; ++i) {
      EXPECT_GE(s.inputs[i], 2);
      EXPECT_LT(s.inputs[i], kCopyVocab);
      symbols.insert(s.inputs[i]);
      EXPECT_EQ(s.targets[10 + i], s.inputs[i]) << "the copy's token " << i;
      EXPECT_EQ(s.inputs[11 + i], s.inputs[i]) << "the copy as input";
    }
    EXPECT_EQ(s.inputs[10], kCopySeparator);
    for (int64_t t = 21; t < 32; ++t) EXPECT_EQ(s.inputs[t], kCopyPadding) << t;
    for (int64_t t = 0; t < 32; ++t)
      if (t < 10 || t >= 20) {
        EXPECT_EQ(s.targets[t], kIgnoreIndex) << t;
      }
  }
  EXPECT_EQ(static_cast<int64_t>(symbols.size()), kCopyAlphabet);
}

TEST(Copy, LongestStringFillsTheSequence) {
  CopyOptions options;
  options.length = 16;
  const Sequence s = sample(SyntheticTask::copy(options, 32), 7);
  EXPECT_EQ(s.targets[31], s.inputs[15]);
  options.length = 17;
  expect_error([&] { SyntheticTask::copy(options, 32); }, {"length"});
}

TEST(TaskLoader, BatchesAreAPureFunctionOfSeedStepMicroBatchAndRow) {
  const SyntheticTask task = SyntheticTask::mqar(mqar_options(512, {4, 8}), 64);
  const BatchLoader loader(task, 1337);
  EXPECT_EQ(loader.sampler(), "splitmix64-mqar-v1");
  EXPECT_EQ(loader.block_size(), 64);
  auto rows = [](const Batch& b) { return std::make_pair(b.inputs.to_vector<int64_t>(), b.targets.to_vector<int64_t>()); };
  const Batch a = loader.batch(Split::train, 5, 1, {0, 4});
  EXPECT_EQ(rows(a), rows(BatchLoader(task, 1337).batch(Split::train, 5, 1, {0, 4})));  // another loader
  EXPECT_NE(rows(a), rows(loader.batch(Split::train, 6, 1, {0, 4})));                   // another step
  EXPECT_NE(rows(a), rows(loader.batch(Split::train, 5, 0, {0, 4})));                   // another micro-batch
  EXPECT_NE(rows(a), rows(loader.batch(Split::val, 5, 1, {0, 4})));                     // the val stream
  EXPECT_NE(rows(a), rows(BatchLoader(task, 1338).batch(Split::train, 5, 1, {0, 4})));  // another seed

  // Two ranks: rank_rows of the same global micro-batch, different rows, together the whole.
  const Batch rank0 = loader.batch(Split::train, 5, 1, rank_rows(4, 0, 2));
  const Batch rank1 = loader.batch(Split::train, 5, 1, rank_rows(4, 1, 2));
  const auto [inputs, targets] = rows(a);
  const size_t half = inputs.size() / 2;
  EXPECT_EQ(rank0.inputs.to_vector<int64_t>(), std::vector<int64_t>(inputs.begin(), inputs.begin() + half));
  EXPECT_EQ(rank1.inputs.to_vector<int64_t>(), std::vector<int64_t>(inputs.begin() + half, inputs.end()));
  EXPECT_EQ(rank1.targets.to_vector<int64_t>(), std::vector<int64_t>(targets.begin() + half, targets.end()));
  EXPECT_NE(rank0.inputs.to_vector<int64_t>(), rank1.inputs.to_vector<int64_t>());
  EXPECT_EQ(a.tokens, rank0.tokens + rank1.tokens);
  expect_error([&] { loader.window_start(Split::train, 0, 0, 0); }, {"no windows"});
}

// ---- config -----------------------------------------------------------------------------

namespace {

Config task_config(const std::string& data_yaml, const std::vector<std::string>& overrides = {}) {
  return parse_config("model:\n  d_model: 32\ndata:\n" + data_yaml, "task.yaml", overrides);
}

}  // namespace

TEST(TaskConfig, DefaultsAndAMixRoundTripThroughTheResolvedYaml) {
  const Config c = task_config("  task: mqar\n  mqar:\n    pairs: [4, 8, 64]\n");
  EXPECT_EQ(c.data.task, "mqar");
  EXPECT_EQ(c.data.mqar.vocab, 8192);
  EXPECT_EQ(c.data.mqar.pairs, (std::vector<int64_t>{4, 8, 64}));
  EXPECT_EQ(c.data.mqar.alpha, 0.01);
  EXPECT_EQ(c.data.copy.length, 64);
  EXPECT_EQ(parse_config(to_yaml(c), "resolved.yaml"), c);
  const Config single = task_config("  task: mqar\n", {"data.mqar.pairs=32"});
  EXPECT_EQ(single.data.mqar.pairs, std::vector<int64_t>{32});
  EXPECT_EQ(parse_config(to_yaml(single), "resolved.yaml"), single);
  EXPECT_EQ(task_config("  task: copy\n  copy: {length: 100}\n").data.copy.length, 100);
  EXPECT_EQ(parse_config("data: {path: corpus.txt}\n", "text.yaml").data.task, "none");
}

TEST(TaskConfig, BadValuesAreErrorsNamingTheKey) {
  auto error = [](const std::string& data_yaml, std::initializer_list<std::string_view> parts,
                  const std::vector<std::string>& overrides = {},
                  std::source_location where = std::source_location::current()) {
    expect_error<ConfigError>([&] { task_config(data_yaml, overrides); }, parts, where);
  };
  error("  task: mqra\n", {"data.task", "did you mean 'mqar'", "task.yaml:4"});
  error("  task: mqar\n", {"data.mqar.pairs: 65 pairs do not fit: at most 64", "--set data.mqar.pairs"},
        {"data.mqar.pairs=[16, 65]"});
  error("  task: mqar\n  block_size: 32\n  mqar: {pairs: 16}\n", {"data.mqar.pairs"});
  error("  task: mqar\n  mqar: {pairs: 0}\n", {"data.mqar.pairs"});
  error("  task: mqar\n  mqar: {pairs: [4, x]}\n", {"data.mqar.pairs: expected an int or a non-empty list of ints"});
  error("  task: mqar\n  mqar: {pairs: []}\n",
        {"data.mqar.pairs: expected an int or a non-empty list of ints, got an empty list"});
  error("  task: mqar\n  mqar: {alpha: -1}\n", {"data.mqar.alpha"});
  error("  task: mqar\n  mqar: {vocab: 2}\n", {"data.mqar.vocab"});
  error("  task: mqar\n  mqar: {pair: 4}\n", {"did you mean 'data.mqar.pairs'"});
  error("  task: copy\n  copy: {length: 129}\n", {"data.copy.length"});
  error("  task: mqar\n  path: corpus.txt\n", {"data.task: mqar generates its own sequences"});
  error("  block_size: 64\n", {"data.path: required"});
  error("  task: copy\n", {"model.vocab_size"}, {"model.vocab_size=16"});
}

// ---- accuracy -----------------------------------------------------------------------------

TEST(TaskEval, ScoreAnswersCountsArgmaxHitsAndWholeSequences) {
  // B = 3 rows, T = 3, V = 4. Targets: row 0 answers at t = 1 and 2, row 1 at t = 0, row 2 none.
  const std::vector<float> logits = {
      9, 0, 0, 0,   0, 0, 5, 1,   0, 2, 2, 0,   // row 0: t = 1 predicts 2 (right), t = 2 ties 1/2: 1 (wrong)
      0, 0, 0, 3,   1, 1, 1, 1,   0, 0, 0, 0,   // row 1: t = 0 predicts 3 (right)
      1, 0, 0, 0,   0, 1, 0, 0,   0, 0, 1, 0};  // row 2: no answers
  const std::vector<int64_t> targets = {kIgnoreIndex, 2, 2, 3, kIgnoreIndex, kIgnoreIndex,
                                        kIgnoreIndex, kIgnoreIndex, kIgnoreIndex};
  const AnswerAccuracy a = score_answers(Tensor::from_vector(logits, {3, 3, 4}), Tensor::from_vector(targets, {3, 3}));
  EXPECT_EQ(a.answers, 3);
  EXPECT_EQ(a.correct, 2);
  EXPECT_EQ(a.sequences, 2);
  EXPECT_EQ(a.sequences_correct, 1);
  EXPECT_DOUBLE_EQ(a.accuracy(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(a.seq_accuracy(), 0.5);
  EXPECT_EQ(AnswerAccuracy{}.accuracy(), 0.0);
  expect_error([&] { score_answers(Tensor::from_vector(logits, {3, 3, 4}), Tensor::from_vector(targets, {9})); },
               {"targets"});
}

namespace {

class TaskRunTest : public lat::testing::TempDirTest {
 protected:
  // A tiny gdn + attention model on a small MQAR: seconds to train.
  Config config(std::vector<std::string> overrides = {}) const {
    std::vector<std::string> all = {"train.out_dir=" + path("run")};
    all.insert(all.end(), overrides.begin(), overrides.end());
    return parse_config(
        "model: {d_model: 16, n_layers: 2, n_heads: 2, layers: 'gdn,attn', linear: {chunk_size: 16}}\n"
        "data: {task: mqar, block_size: 32, mqar: {vocab: 64, pairs: [2, 4]}}\n"
        "train: {batch_size: 4, max_steps: 6, warmup: 1, eval_every: 3, eval_batches: 2, log_every: 1,\n"
        "        ckpt_every: 3, threads: 1}\n",
        "tiny_task.yaml", all);
  }
  TrainSummary run(std::vector<std::string> overrides = {}) {
    std::FILE* log = std::tmpfile();
    TrainOptions options;
    options.log = log;
    options.live_progress = false;
    TrainSummary summary = train(config(std::move(overrides)), options);
    std::fclose(log);
    return summary;
  }

  struct Result {
    int exit_code = -1;
    std::string out, err;
  };
  // build/lat with `args` (shell words), stdout and stderr apart.
  Result run_lat(const std::string& args) const {
    const std::string command = std::string("'") + LAT_BINARY_DIR + "/lat' " + args + " >'" + path("out") + "' 2>'" +
                                path("err") + "'";
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, lat::testing::read_bytes(path("out")),
            lat::testing::read_bytes(path("err"))};
  }
};

// The (step, loss) pairs of a metrics.jsonl.
std::vector<std::pair<int64_t, double>> losses(const fs::path& path) {
  std::vector<std::pair<int64_t, double>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r.contains("loss")) out.emplace_back(r["step"].get<int64_t>(), r["loss"].get<double>());
  }
  return out;
}

}  // namespace

TEST_F(TaskRunTest, TrainingResumesExactlyAndCountsOnlyAnswers) {
  const TrainSummary whole = run({"train.out_dir=" + path("whole")});
  EXPECT_EQ(whole.step, 6);
  EXPECT_TRUE(std::isfinite(whole.val_loss));
  run({"train.out_dir=" + path("split"), "train.stop_at=3"});
  const TrainSummary second = run({"train.out_dir=" + path("split")});
  EXPECT_EQ(second.start_step, 3);
  const auto a = losses(dir_ / "whole" / "metrics.jsonl"), b = losses(dir_ / "split" / "metrics.jsonl");
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);  // bit for bit
  EXPECT_EQ(whole.val_loss, second.val_loss);
  // tokens_seen counts answers: 4 sequences of 2 or 4 pairs per step, not 4 x 32 targets.
  std::ifstream in(dir_ / "whole" / "metrics.jsonl");
  std::string first;
  std::getline(in, first);
  const int64_t tokens = nlohmann::json::parse(first)["tokens_seen"].get<int64_t>();
  EXPECT_GE(tokens, 8);
  EXPECT_LE(tokens, 16);
}

// Bits per character mean nothing for answer tokens of a synthetic task: its eval lines give
// the loss alone, while metrics.jsonl keeps val_bpc (DESIGN.md's keys).
TEST_F(TaskRunTest, EvalLogLinesGiveTheLossWithoutBitsPerCharacter) {
  std::FILE* log = std::fopen(path("log").c_str(), "w");
  ASSERT_NE(log, nullptr);
  TrainOptions options;
  options.log = log;
  options.live_progress = false;
  train(config(), options);
  std::fclose(log);
  const std::string text = lat::testing::read_bytes(path("log"));
  EXPECT_TRUE(std::regex_search(text, std::regex("step 3: val loss [0-9.]+ \\(2 batches\\)\n"))) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("step 6: val loss [0-9.]+ \\(2 batches\\)\n"))) << text;
  EXPECT_EQ(text.find("bpc"), std::string::npos) << text;
  std::ifstream in(dir_ / "run" / "metrics.jsonl");
  int evals = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (!r.contains("val_loss")) continue;
    ++evals;
    EXPECT_DOUBLE_EQ(r["val_bpc"].get<double>(), r["val_loss"].get<double>() / std::numbers::ln2);
  }
  EXPECT_EQ(evals, 2);
}

TEST_F(TaskRunTest, EvalTaskPrintsAParseableLineAndAnUntrainedModelScoresLow) {
  run({"train.max_steps=1"});
  const Result r = run_lat("eval --checkpoint '" + path("run") + "' --task mqar --samples 40");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  const std::regex line(
      "task=mqar pairs=4 seq_len=32 samples=40 accuracy=([0-9.]+) seq_accuracy=([0-9.]+)\n");  // pairs: the mix's largest
  ASSERT_TRUE(std::regex_match(r.out, m, line)) << r.out;
  const double accuracy = std::stod(m[1]), seq_accuracy = std::stod(m[2]);
  EXPECT_GE(accuracy, 0.0);
  EXPECT_LT(accuracy, 0.25) << "one step of training cannot recall: chance is 1/32 of the values";
  EXPECT_GE(seq_accuracy, 0.0);
  EXPECT_LE(seq_accuracy, accuracy);

  const Result json = run_lat("eval --checkpoint '" + path("run") + "' --task mqar --pairs 8 --seq-len 48 --samples 10 --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["task"], "mqar");
  EXPECT_EQ(j["pairs"], 8);
  EXPECT_EQ(j["seq_len"], 48);
  EXPECT_EQ(j["samples"], 10);
  EXPECT_GE(j["accuracy"].get<double>(), 0.0);
  EXPECT_LE(j["accuracy"].get<double>(), 1.0);
  EXPECT_GE(j["seq_accuracy"].get<double>(), 0.0);
  EXPECT_LE(j["seq_accuracy"].get<double>(), 1.0);

  const Result copy = run_lat("eval --checkpoint '" + path("run") + "' --task copy --length 5 --samples 4");
  ASSERT_EQ(copy.exit_code, 0) << copy.err;
  EXPECT_TRUE(std::regex_match(copy.out, std::regex("task=copy length=5 seq_len=32 samples=4 accuracy=[0-9.]+ "
                                                    "seq_accuracy=[0-9.]+\n")))
      << copy.out;
}

TEST_F(TaskRunTest, EvalTaskOptionsThatDoNotFitAreUsageErrors) {
  run({"train.max_steps=1"});
  const std::string ckpt = "eval --checkpoint '" + path("run") + "' ";
  auto expect_usage_error = [&](const std::string& args, const std::string& part) {
    const Result r = run_lat(ckpt + args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_TRUE(contains(r.err, part)) << args << ": " << r.err;
  };
  expect_usage_error("--task mqar --pairs 9", "--pairs: 9 pairs do not fit --seq-len 32");
  expect_usage_error("--task copy --length 17", "--length");
  expect_usage_error("--task copy --pairs 4", "--pairs");
  expect_usage_error("--task mqra", "--task");
  expect_usage_error("--pairs 4", "--task");
  expect_usage_error("", "evaluate it with --task mqar");
  // A copy model has the copy task's 28 ids: the 64 of this config's MQAR do not fit it.
  run({"train.max_steps=1", "train.out_dir=" + path("copy_run"), "data.task=copy", "data.copy.length=8"});
  const Result r = run_lat("eval --checkpoint '" + path("copy_run") + "' --task mqar --samples 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "64 token ids exceed the vocabulary")) << r.err;
}
