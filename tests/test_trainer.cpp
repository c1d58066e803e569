// The trainer on a tiny config (DESIGN.md, "The command line and the files a run writes",
// "Checkpoint"): the files of a run, metrics.jsonl records, exact resume (bit-identical losses
// at every step), config changes on resume, a truncated checkpoint, damaged or outdated
// checkpoints that resume refuses without touching a file, stray checkpoint names, learning,
// the final eval over the whole val split, SIGTERM, a non-finite loss.
#include <gtest/gtest.h>

#include <hdf5.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <source_location>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "tests/expect_error.h"
#include "tests/run_dir_snapshot.h"
#include "tests/test_files.h"
#include "train/config/config.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/run_dir.h"
#include "train/files/trained_model.h"
#include "train/inference/eval.h"
#include "train/inference/info.h"
#include "train/run/run_dir_lock.h"
#include "train/run/train_step.h"
#include "train/run/trainer.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

using testing::contains;
using testing::expect_error;
using testing::overwrite_int64_attribute;
using testing::read_bytes;
using testing::RunDirSnapshot;
using testing::write_bytes;

std::vector<nlohmann::ordered_json> read_metrics(const fs::path& path) {
  std::vector<nlohmann::ordered_json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::ordered_json::parse(line));
  return out;
}

/// Unlinks `object` (e.g. "/optimizer/norm.weight") from the HDF5 file at `path`, as a damaged
/// or hand-edited checkpoint would lack it. A fatal failure when that fails: call under
/// ASSERT_NO_FATAL_FAILURE.
void delete_hdf5_object(const std::string& path, const std::string& object) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  const herr_t status = H5Ldelete(file, object.c_str(), H5P_DEFAULT);
  H5Fclose(file);
  ASSERT_GE(status, 0) << path << ": " << object;
}

std::vector<std::string> keys_of(const nlohmann::ordered_json& j) {
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  return keys;
}

// A temporary directory with a toy corpus (a sentence repeated: easy to learn) and a tiny
// config; removed at the end of the test.
class TrainerTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    std::string text;
    for (int i = 0; i < 300; ++i) text += "the quick brown fox jumps over the lazy dog.\n";
    std::ofstream(dir_ / "toy.txt") << text;
    std::ofstream(dir_ / "tiny.yaml") << "model:\n"
                                         "  d_model: 32\n"
                                         "  n_layers: 2\n"
                                         "  n_heads: 2\n"
                                         "  layers: \"gdn,attn\"\n"
                                         "  linear: {chunk_size: 8}\n"
                                         "data:\n"
                                         "  path: "
                                      << (dir_ / "toy.txt").string()
                                      << "\n"
                                         "  block_size: 16\n"
                                         "train:\n"
                                         "  batch_size: 4\n"
                                         "  max_steps: 12\n"
                                         "  warmup: 3\n"
                                         "  lr: 3.0e-3\n"
                                         "  eval_every: 4\n"
                                         "  eval_batches: 2\n"
                                         "  log_every: 1\n"
                                         "  ckpt_every: 4\n"
                                         "  keep_last: 2\n"
                                         "  threads: 1\n"
                                         "  out_dir: "
                                      << (dir_ / "run").string() << "\n";
    log_ = std::tmpfile();
  }
  void TearDown() override {
    std::fclose(log_);
    TempDirTest::TearDown();
  }

  Config config(std::vector<std::string> overrides = {}) const {
    return load_config((dir_ / "tiny.yaml").string(), overrides);
  }
  TrainSummary run(std::vector<std::string> overrides = {}) {
    TrainOptions options;
    options.log = log_;
    options.live_progress = false;
    return train(config(std::move(overrides)), options);
  }
  fs::path run_dir() const { return dir_ / "run"; }
  std::string ckpt(int64_t step) const { return (run_dir() / checkpoint_file_name(step)).string(); }
  /// What the runs of this test wrote to their log so far.
  std::string log_text() const {
    std::fflush(log_);
    std::rewind(log_);
    std::string text;
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, log_)) > 0;) text.append(buffer, n);
    return text;
  }
  /// A run stopped at step 8: ckpt_00000004.h5 and ckpt_00000008.h5 (`latest`), config.yaml and
  /// metrics.jsonl with records up to step 8.
  void run_to_step_8() {
    TrainSummary s = run({"train.stop_at=8"});
    ASSERT_EQ(s.step, 8);
    ASSERT_TRUE(fs::exists(ckpt(4)));
    ASSERT_TRUE(fs::exists(ckpt(8)));
  }

  std::FILE* log_ = nullptr;
};

TEST_F(TrainerTest, RunWritesTheFilesOfDesign) {
  TrainSummary s = run();
  EXPECT_EQ(s.start_step, 0);
  EXPECT_EQ(s.step, 12);
  EXPECT_EQ(s.end_reason, "max_steps");
  EXPECT_EQ(s.checkpoint, (run_dir() / "ckpt_00000012.h5").string());

  // keep_last 2 leaves the two newest checkpoints; latest names the newest.
  EXPECT_FALSE(fs::exists(run_dir() / "ckpt_00000004.h5"));
  EXPECT_TRUE(fs::exists(run_dir() / "ckpt_00000008.h5"));
  EXPECT_TRUE(fs::exists(run_dir() / "ckpt_00000012.h5"));
  EXPECT_EQ(read_bytes(run_dir() / "latest").substr(0, 16), "ckpt_00000012.h5");
  for (const auto& entry : fs::directory_iterator(run_dir()))
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();

  // config.yaml is the resolved config.
  EXPECT_EQ(parse_config(read_bytes(run_dir() / "config.yaml"), "config.yaml"), config());

  // metrics.jsonl: a log record per step (log_every 1), eval records at 4 and 8 (random
  // batches) and 12 (the whole val split, marked whole_split), keys in DESIGN's order.
  const std::vector<nlohmann::ordered_json> records = read_metrics(run_dir() / "metrics.jsonl");
  const std::vector<std::string> log_keys = {"step", "loss", "lr", "grad_norm", "tokens_seen", "tokens_per_s", "time_s"};
  const std::vector<std::string> eval_keys = {"step", "val_loss", "val_bpc"};
  const std::vector<std::string> whole_split_keys = {"step", "val_loss", "val_bpc", "whole_split"};
  int64_t logs = 0;
  std::vector<int64_t> eval_steps;
  double last_val_loss = 0.0;
  for (const auto& r : records) {
    if (r.contains("loss")) {
      ++logs;
      EXPECT_EQ(keys_of(r), log_keys) << r.dump();
      EXPECT_EQ(r["step"].get<int64_t>(), logs);
      EXPECT_EQ(r["tokens_seen"].get<int64_t>(), logs * 4 * 16);
      EXPECT_TRUE(std::isfinite(r["loss"].get<double>()));
      EXPECT_GT(r["lr"].get<double>(), 0.0);
      EXPECT_GT(r["grad_norm"].get<double>(), 0.0);
      EXPECT_GT(r["tokens_per_s"].get<double>(), 0.0);
      EXPECT_GE(r["time_s"].get<double>(), 0.0);
    } else {
      const bool final_eval = r["step"] == 12;
      EXPECT_EQ(keys_of(r), final_eval ? whole_split_keys : eval_keys) << r.dump();
      if (final_eval) EXPECT_EQ(r["whole_split"], true) << r.dump();
      eval_steps.push_back(r["step"].get<int64_t>());
      last_val_loss = r["val_loss"].get<double>();
      EXPECT_DOUBLE_EQ(r["val_bpc"].get<double>(), last_val_loss / std::numbers::ln2);
    }
  }
  EXPECT_EQ(logs, 12);
  EXPECT_EQ(eval_steps, (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(last_val_loss, s.val_loss);

  // The final checkpoint holds the final val loss, the tokenizer, the model and the optimizer.
  Checkpoint c = load_checkpoint(s.checkpoint);
  EXPECT_EQ(c.step, 12);
  EXPECT_EQ(c.tokens_seen, 12 * 4 * 16);
  EXPECT_EQ(c.val_loss, s.val_loss);
  EXPECT_LE(c.best_val_loss, c.val_loss);
  EXPECT_EQ(c.tokenizer_type, "char");
  EXPECT_EQ(c.tokenizer_vocab, "\n .abcdefghijklmnopqrstuvwxyz");
  EXPECT_EQ(c.optimizer.type, "adamw");
  EXPECT_EQ(c.optimizer.step, 12);
  EXPECT_EQ(c.data.counters.at("step"), 12);
  TrainedModel trained = load_trained_model(s.checkpoint);
  ASSERT_EQ(c.model.size(), trained.model->named_parameters().size());
  for (size_t i = 0; i < c.model.size(); ++i) EXPECT_EQ(c.model[i].first, trained.model->named_parameters()[i].first);
}

// A run of max_steps in one go and the same run stopped at stop_at then resumed give the same
// loss at every step, bit for bit, and the same final weights.
TEST_F(TrainerTest, StopAndResumeIsBitIdentical) {
  const std::vector<std::string> accum = {"train.grad_accum=2", "train.batch_size=2"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), accum.begin(), accum.end());
    return extra;
  };
  TrainSummary whole = run(with({"train.out_dir=" + (dir_ / "whole").string()}));
  TrainSummary first = run(with({"train.out_dir=" + (dir_ / "split").string(), "train.stop_at=6"}));
  EXPECT_EQ(first.step, 6);
  EXPECT_EQ(first.end_reason, "stop_at");
  EXPECT_TRUE(fs::exists(dir_ / "split" / "ckpt_00000006.h5"));
  TrainSummary second = run(with({"train.out_dir=" + (dir_ / "split").string()}));
  EXPECT_EQ(second.start_step, 6);
  EXPECT_EQ(second.step, 12);

  auto losses = [](const fs::path& path) {
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& r : read_metrics(path))
      if (r.contains("loss")) out.emplace_back(r["step"].get<int64_t>(), r["loss"].get<double>());
    return out;
  };
  const auto a = losses(dir_ / "whole" / "metrics.jsonl");
  const auto b = losses(dir_ / "split" / "metrics.jsonl");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second, b[i].second) << "step " << a[i].first;  // exact
  }
  EXPECT_EQ(whole.val_loss, second.val_loss);
  Checkpoint ca = load_checkpoint(whole.checkpoint), cb = load_checkpoint(second.checkpoint);
  ASSERT_EQ(ca.model.size(), cb.model.size());
  for (size_t i = 0; i < ca.model.size(); ++i)
    EXPECT_EQ(ca.model[i].second.to_vector<float>(), cb.model[i].second.to_vector<float>()) << ca.model[i].first;
}

// The step's loss and gradients on a packed batch (two rows, three documents, cu_seqlens) equal
// those of the documents run alone: the trainer hands the batch's boundaries to the model, and
// the eval's loss sum agrees.
TEST_F(TrainerTest, PackedBatchLossAndGradientsEqualTheDocumentsAlone) {
  const Config c = config();
  Generator gen(7);
  HybridLM model(hybrid_lm_config(c.model, 30), gen);
  // Row 0 holds document A (5 tokens) and the start of B (3 tokens); row 1 the rest of B
  // (4 tokens, a new sequence) and C (4 tokens). Last targets of each document are ignored.
  const std::vector<int64_t> inputs = {1, 2, 3, 4, 5, 6, 7, 8, /**/ 9, 10, 11, 12, 13, 14, 15, 16};
  const int64_t I = kIgnoreIndex;
  const std::vector<int64_t> targets = {2, 3, 4, 5, I, 7, 8, I, /**/ 10, 11, 12, I, 14, 15, 16, I};
  Batch packed;
  packed.inputs = Tensor::from_vector(inputs, {2, 8});
  packed.targets = Tensor::from_vector(targets, {2, 8});
  packed.cu_seqlens = Tensor::from_vector(std::vector<int64_t>{0, 5, 8, 12, 16}, {5});
  packed.tokens = 12;

  const double loss = accumulate_gradients(model, {packed}, packed.tokens, Device::cpu());
  std::vector<std::vector<float>> packed_grads;
  for (auto& [name, p] : model.named_parameters()) packed_grads.push_back(p.grad().to_vector<float>());
  model.zero_grad();

  // The same documents as separate one-row batches, weighted by their targets.
  const std::vector<std::pair<int64_t, int64_t>> pieces = {{0, 5}, {5, 8}, {8, 12}, {12, 16}};
  std::vector<Batch> alone;
  double eval_sum = 0.0;
  for (auto [begin, end] : pieces) {
    Batch b;
    const int64_t n = end - begin;
    b.inputs = Tensor::from_vector(std::vector<int64_t>(inputs.begin() + begin, inputs.begin() + end), {1, n});
    b.targets = Tensor::from_vector(std::vector<int64_t>(targets.begin() + begin, targets.begin() + end), {1, n});
    b.tokens = n - 1;
    eval_sum += batch_loss_sum(model, b, Device::cpu());
    alone.push_back(b);
  }
  const double alone_loss = accumulate_gradients(model, alone, packed.tokens, Device::cpu());
  EXPECT_NEAR(loss, alone_loss, 1e-5 * std::abs(alone_loss));
  EXPECT_NEAR(batch_loss_sum(model, packed, Device::cpu()), eval_sum, 1e-5 * eval_sum);
  size_t i = 0;
  for (auto& [name, p] : model.named_parameters()) {
    const std::vector<float> g = p.grad().to_vector<float>();
    double diff = 0.0, norm = 0.0;
    for (size_t j = 0; j < g.size(); ++j) {
      diff += std::pow(static_cast<double>(g[j]) - packed_grads[i][j], 2);
      norm += std::pow(static_cast<double>(g[j]), 2);
    }
    EXPECT_LE(std::sqrt(diff), 1e-4 * std::sqrt(norm) + 1e-9) << name;
    ++i;
  }
  // Without the boundaries the same tokens give another loss: the check above can fail.
  Batch unbounded = packed;
  unbounded.cu_seqlens = Tensor();
  EXPECT_GT(std::abs(batch_loss_sum(model, unbounded, Device::cpu()) - eval_sum), 1e-3);
}

// Packing keeps resume exact: stopped at step 6 and resumed equals the run in one go.
TEST_F(TrainerTest, PackedStopAndResumeIsBitIdentical) {
  const std::vector<std::string> packing = {"data.doc_separator=\"\\n\"", "data.packing=true"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), packing.begin(), packing.end());
    return extra;
  };
  TrainSummary whole = run(with({"train.out_dir=" + (dir_ / "whole").string()}));
  run(with({"train.out_dir=" + (dir_ / "split").string(), "train.stop_at=6"}));
  TrainSummary second = run(with({"train.out_dir=" + (dir_ / "split").string()}));
  EXPECT_EQ(second.start_step, 6);
  auto losses = [](const fs::path& path) {
    std::vector<double> out;
    for (const auto& r : read_metrics(path))
      if (r.contains("loss")) out.push_back(r["loss"].get<double>());
    return out;
  };
  const std::vector<double> a = losses(dir_ / "whole" / "metrics.jsonl");
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a, losses(dir_ / "split" / "metrics.jsonl"));  // exact
  EXPECT_EQ(whole.val_loss, second.val_loss);
  // And packing changed the training: the unpacked run's first loss differs.
  const TrainSummary unpacked = run({"train.out_dir=" + (dir_ / "unpacked").string(), "train.max_steps=1"});
  EXPECT_NE(losses(dir_ / "unpacked" / "metrics.jsonl").at(0), a.at(0));
  EXPECT_EQ(unpacked.step, 1);
}

TEST_F(TrainerTest, ResumeWithChangedModelKeysIsAConfigErrorListingThem) {
  run({"train.stop_at=4"});
  const std::string what = expect_error<ConfigError>(
      [&] {
        run({"model.d_model=64", "data.block_size=8", "train.lr=1.0e-3"});
      },
      {"model.d_model", "data.block_size"});
  EXPECT_EQ(what.find("train.lr"), std::string::npos) << "train.lr may change: " << what;
  // train.* keys other than batch_size, grad_accum and seed may change.
  TrainSummary s = run({"train.lr=1.0e-3", "train.stop_at=6"});
  EXPECT_EQ(s.start_step, 4);
  expect_error<ConfigError>([&] { run({"train.seed=7"}); },
                            {"was trained with another config; these keys may not change on resume: train.seed"});
}

TEST_F(TrainerTest, TruncatedCheckpointIsAnErrorNamingItAndIsLeftUntouched) {
  run({"train.stop_at=4"});
  const fs::path ckpt = run_dir() / "ckpt_00000004.h5";
  const std::string bytes = read_bytes(ckpt);
  const std::string truncated = bytes.substr(0, bytes.size() / 2);
  write_bytes(ckpt, truncated);
  // A lat::Error, not a ConfigError: a bad checkpoint is a failure while running.
  expect_error([&] { run(); }, {ckpt.string()});
  EXPECT_EQ(read_bytes(ckpt), truncated);
  EXPECT_EQ(read_bytes(run_dir() / "latest").substr(0, 16), "ckpt_00000004.h5");
  EXPECT_FALSE(fs::exists(run_dir() / "ckpt_00000008.h5"));
}

TEST_F(TrainerTest, DataBannerShowsPackingAndTheDocumentCount) {
  run({"train.max_steps=1"});
  EXPECT_TRUE(contains(log_text(), "val tokens, block 16, packing off\n")) << log_text();
  fs::remove_all(run_dir());
  // 300 lines, each ending at its "\n": 300 documents.
  run({"train.max_steps=1", "data.doc_separator=\"\\n\"", "data.packing=true"});
  EXPECT_TRUE(contains(log_text(), "val tokens, block 16, packing on: 300 documents ending at \"\\n\"\n"))
      << log_text();
}

// tokens_per_s counts batch_size x grad_accum x block_size input tokens per step, also for a
// synthetic task whose targets (tokens_seen) are its answers only. time_s covers at least the
// step that tokens_per_s is measured over, so tokens_per_s * time_s >= the step's tokens.
TEST_F(TrainerTest, TokensPerSecondCountsEveryInputTokenOfTheStep) {
  run({"train.max_steps=1", "train.grad_accum=2", "data.path=null", "data.task=mqar", "data.mqar.vocab=32",
       "data.mqar.pairs=2"});
  const std::vector<nlohmann::ordered_json> records = read_metrics(run_dir() / "metrics.jsonl");
  ASSERT_FALSE(records.empty());
  const nlohmann::ordered_json& first = records.front();
  ASSERT_EQ(first["step"], 1);
  const int64_t step_tokens = 4 * 2 * 16;  // batch_size x grad_accum x block_size
  EXPECT_GT(first["tokens_seen"].get<int64_t>(), 0);
  EXPECT_LT(first["tokens_seen"].get<int64_t>(), step_tokens / 4);  // the answers only
  EXPECT_GE(first["tokens_per_s"].get<double>() * first["time_s"].get<double>(), step_tokens * (1 - 1e-9));
}

TEST_F(TrainerTest, LossDecreasesOnALearnableStream) {
  TrainSummary s = run({"train.max_steps=40", "train.eval_every=0", "train.ckpt_every=0"});
  const auto records = read_metrics(run_dir() / "metrics.jsonl");
  const double first = records.front()["loss"].get<double>();
  double last = 0.0;
  for (const auto& r : records)
    if (r.contains("loss")) last = r["loss"].get<double>();
  EXPECT_NEAR(first, std::log(29.0), 0.3);  // about uniform over the 29 characters at init
  EXPECT_LT(last, 0.5 * first);
  EXPECT_LT(s.val_loss, 0.5 * first);
}

// A Mamba-2 hybrid (model.layers "mamba2,attn") learns the stream in fp32 and in bf16, and its
// checkpoint reads back to the same val loss (lat eval computes in fp32: a bf16 run's final eval
// differs by its products' rounding, u = 2^-8 per input, far less on the mean loss).
TEST_F(TrainerTest, Mamba2HybridLearnsAndReadsBack) {
  for (const std::string precision : {"fp32", "bf16"}) {
    std::filesystem::remove_all(run_dir());
    TrainSummary s = run({"train.max_steps=40", "train.eval_every=0", "train.ckpt_every=0", "model.layers=mamba2,attn",
                          "model.mamba.d_state=16", "model.mamba.head_dim=16", "model.mamba.n_groups=2",
                          "model.mamba.chunk_size=8", "train.precision=" + precision});
    const auto records = read_metrics(run_dir() / "metrics.jsonl");
    const double first = records.front()["loss"].get<double>();
    EXPECT_NEAR(first, std::log(29.0), 0.3) << precision;
    EXPECT_LT(s.val_loss, 0.5 * first) << precision;
    CheckpointEval e = evaluate_checkpoint(s.checkpoint);
    const double tolerance = precision == "fp32" ? 1e-6 : 1e-3;
    EXPECT_NEAR(e.result.loss, records.back()["val_loss"].get<double>(), tolerance * e.result.loss) << precision;
  }
}

// A Kimi Delta Attention hybrid (model.layers "kda,attn") learns the stream in fp32 and in
// bf16, and its checkpoint reads back to the same val loss (bf16: as the Mamba-2 hybrid's).
TEST_F(TrainerTest, KdaHybridLearnsAndReadsBack) {
  for (const std::string precision : {"fp32", "bf16"}) {
    std::filesystem::remove_all(run_dir());
    // 60 steps: at 40 the val loss of kda,attn (and of gdn,attn) is only just below half.
    TrainSummary s = run({"train.max_steps=60", "train.eval_every=0", "train.ckpt_every=0", "model.layers=kda,attn",
                          "train.precision=" + precision});
    const auto records = read_metrics(run_dir() / "metrics.jsonl");
    const double first = records.front()["loss"].get<double>();
    EXPECT_NEAR(first, std::log(29.0), 0.3) << precision;
    EXPECT_LT(s.val_loss, 0.5 * first) << precision;
    CheckpointEval e = evaluate_checkpoint(s.checkpoint);
    const double tolerance = precision == "fp32" ? 1e-6 : 1e-3;
    EXPECT_NEAR(e.result.loss, records.back()["val_loss"].get<double>(), tolerance * e.result.loss) << precision;
  }
}

// A Kimi-Linear-style hybrid (model.layers "gdn,mla", a low-rank query, RoPE on the shared key
// part) learns the stream, and its checkpoint loads (every mla tensor's shape checked against
// model.mla) to the same val loss.
TEST_F(TrainerTest, MlaHybridLearnsAndReadsBack) {
  TrainSummary s = run({"train.max_steps=40", "train.eval_every=0", "train.ckpt_every=0", "model.layers=gdn,mla",
                        "model.mla.q_lora_rank=8", "model.mla.kv_lora_rank=16", "model.mla.qk_nope_head_dim=8",
                        "model.mla.qk_rope_head_dim=8", "model.mla.v_head_dim=16", "model.mla.rope=true"});
  const auto records = read_metrics(run_dir() / "metrics.jsonl");
  const double first = records.front()["loss"].get<double>();
  EXPECT_NEAR(first, std::log(29.0), 0.3);
  EXPECT_LT(s.val_loss, 0.5 * first);
  CheckpointEval e = evaluate_checkpoint(s.checkpoint);
  EXPECT_NEAR(e.result.loss, records.back()["val_loss"].get<double>(), 1e-6 * e.result.loss);
}

// The final eval record is the loss over every target of the val split: it equals an
// independent evaluation of the final checkpoint, which scores val_size - 1 targets.
TEST_F(TrainerTest, FinalEvalCoversTheWholeValSplit) {
  TrainSummary s = run({"train.max_steps=5", "train.eval_every=0", "train.batch_size=3"});
  const auto records = read_metrics(run_dir() / "metrics.jsonl");
  ASSERT_TRUE(records.back().contains("val_loss"));
  EXPECT_EQ(records.back()["step"].get<int64_t>(), 5);
  CheckpointEval e = evaluate_checkpoint(s.checkpoint);
  const std::string text = read_bytes(dir_ / "toy.txt");
  const int64_t n = static_cast<int64_t>(text.size());
  const int64_t n_val = n - static_cast<int64_t>(std::floor(static_cast<double>(n) * 0.9));
  EXPECT_EQ(e.result.tokens, n_val - 1);
  EXPECT_NEAR(e.result.loss, records.back()["val_loss"].get<double>(), 1e-6 * e.result.loss);
}

TEST_F(TrainerTest, SigtermFinishesTheStepAndSavesACheckpoint) {
  std::thread killer([this] {
    // Wait for the third log record: the handlers are installed and training is under way.
    const fs::path metrics = run_dir() / "metrics.jsonl";
    for (int i = 0; i < 6000; ++i) {
      if (read_metrics(metrics).size() >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::raise(SIGTERM);
  });
  TrainSummary s = run({"train.max_steps=100000", "train.eval_every=0", "train.ckpt_every=0"});
  killer.join();
  EXPECT_EQ(s.end_reason, "SIGTERM");
  EXPECT_GE(s.step, 3);
  EXPECT_LT(s.step, 100000);
  EXPECT_EQ(s.checkpoint, (run_dir() / checkpoint_file_name(s.step)).string());
  EXPECT_EQ(load_checkpoint(s.checkpoint).step, s.step);
  EXPECT_TRUE(std::isnan(s.val_loss));  // no final eval: the run did not reach max_steps
  // The default action is back after the run: the handlers were scoped to it.
  struct sigaction current {};
  sigaction(SIGTERM, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);

  TrainSummary resumed = run({"train.max_steps=100000", "train.stop_at=" + std::to_string(s.step + 2)});
  EXPECT_EQ(resumed.start_step, s.step);
  EXPECT_EQ(resumed.step, s.step + 2);
}

TEST_F(TrainerTest, NonFiniteLossIsAnErrorNamingTheStepAndKeepsTheLastCheckpoint) {
  // Attention only: a linear layer's kernels may reject the NaN decay before the loss exists.
  // SGD at the largest lr train.lr allows, unclipped, overflows within a few steps (AdamW's
  // steps are bounded by lr and would not).
  const std::string what = expect_error(
      [&] {
        run({"model.layers=attn", "train.optimizer=sgd", "train.lr=10", "train.warmup=0", "train.grad_clip=0",
             "train.ckpt_every=1", "train.max_steps=50"});
      },
      {"training loss is", "step "});
  ASSERT_FALSE(what.empty());
  const std::string latest = read_bytes(run_dir() / "latest").substr(0, 16);
  EXPECT_NE(what.find(latest), std::string::npos) << what;
  // ckpt_every 1: the checkpoint of the step before the failure is the last one written.
  const int64_t failed_step = std::stoll(what.substr(what.find("step ") + 5));
  EXPECT_EQ(latest, checkpoint_file_name(failed_step - 1));
}

TEST_F(TrainerTest, OutDirThatIsAFileIsAConfigErrorAndTheFileIsKept) {
  write_bytes(run_dir().string(), "not a directory");
  expect_error<ConfigError>([&] { run(); },
                            {"train.out_dir: '" + run_dir().string() + "' exists and is not a directory"});
  EXPECT_EQ(read_bytes(run_dir().string()), "not a directory");
}

TEST_F(TrainerTest, ModelTooLargeForMemoryIsAConfigErrorBeforeItsPagesAreTouched) {
  // Within the schema's bounds, but one 65536 x 65536 projection alone is 16 GiB: refused by
  // the step's memory estimate before the model is built, with nothing written.
  expect_error<ConfigError>([&] { run({"model.d_model=65536", "model.n_heads=1024"}); },
                            {"train: one training step needs about", "make model.d_model (65536) or model.n_layers"});
  EXPECT_FALSE(fs::exists(run_dir() / "metrics.jsonl"));
}

TEST_F(TrainerTest, UnavailableCudaDeviceIsAConfigErrorNamingTrainDevice) {
  if (cuda_device_count() > 7) GTEST_SKIP() << "this machine has a cuda:7";
  const std::string message = expect_error<ConfigError>([&] { run({"train.device=cuda:7"}); }, {"train.device"});
  EXPECT_EQ(message.rfind("train.device: 'cuda:7': ", 0), 0u) << message;
  EXPECT_FALSE(fs::exists(run_dir() / "metrics.jsonl"));
}

TEST_F(TrainerTest, OutDirInUseByAnotherRunIsAConfigErrorAndNothingChanges) {
  run({"train.stop_at=4"});
  const std::string metrics = read_bytes((run_dir() / "metrics.jsonl").string());
  const std::string config_yaml = read_bytes((run_dir() / "config.yaml").string());
  {
    const RunDirLock other(run_dir().string());  // as another lat train would hold it
    expect_error<ConfigError>([&] { run(); },
                              {"train.out_dir: '" + run_dir().string() + "' is in use by another lat train"});
    EXPECT_EQ(read_bytes((run_dir() / "metrics.jsonl").string()), metrics);
    EXPECT_EQ(read_bytes((run_dir() / "config.yaml").string()), config_yaml);
  }
  EXPECT_EQ(run().step, 12);  // the lock is gone with its holder: the run resumes
}

TEST_F(TrainerTest, EvalWithoutDataOfACheckpointWhoseDataIsGoneAsksForData) {
  run({"train.stop_at=4"});
  fs::rename(dir_ / "toy.txt", dir_ / "moved.txt");
  expect_error<ConfigError>([&] { evaluate_checkpoint(run_dir().string(), ""); },
                            {"eval: '" + (run_dir() / checkpoint_file_name(4)).string() + "': its data.path '" +
                             (dir_ / "toy.txt").string() + "' does not exist: give the text to evaluate with --data FILE"});
  EXPECT_GT(evaluate_checkpoint(run_dir().string(), (dir_ / "moved.txt").string()).result.tokens, 0);
  // Text holding a character the checkpoint's tokenizer never saw: the error names the file.
  write_bytes((dir_ / "other.txt").string(), "# THE QUICK BROWN FOX\n");
  expect_error([&] { evaluate_checkpoint(run_dir().string(), (dir_ / "other.txt").string()); },
               {"load_data: " + (dir_ / "other.txt").string() + ": ", "Tokenizer::encode"});
}

TEST_F(TrainerTest, EvalOnDataOfAnotherKindIsAConfigError) {
  run({"train.stop_at=4"});
  // Token ids (uint16, as nanoGPT writes them) for a model trained on text: refused.
  std::string ids;
  for (uint16_t i = 0; i < 400; ++i) ids.append(reinterpret_cast<const char*>(&i), sizeof i);
  write_bytes((dir_ / "ids.bin").string(), ids);
  expect_error<ConfigError>([&] { evaluate_checkpoint(run_dir().string(), (dir_ / "ids.bin").string()); },
                            {"eval: --data: '" + (dir_ / "ids.bin").string() + "' holds token ids (bin)"});
  // Text goes through the checkpoint's own tokenizer.
  EXPECT_GT(evaluate_checkpoint(run_dir().string(), (dir_ / "toy.txt").string()).result.tokens, 0);
}

TEST_F(TrainerTest, ResumeNeverRefusesAnOutDirWithCheckpoints) {
  run({"train.stop_at=4"});
  expect_error<ConfigError>(
      [&] { run({"train.resume=never"}); },
      {"train.resume: never, but train.out_dir '" + run_dir().string() + "' already holds ckpt_00000004.h5"});
}

// ---- resume never destroys a complete checkpoint or metrics ----------------------------------

TEST_F(TrainerTest, ResumeRefusesACheckpointWhoseStepDisagreesWithItsName) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  ASSERT_NO_FATAL_FAILURE(overwrite_int64_attribute(ckpt(8), "step", 0));
  const RunDirSnapshot before(run_dir());
  // Resuming at step 0 would have overwritten ckpt_4 and ckpt_8 and emptied metrics.jsonl.
  expect_error<ConfigError>([&] { run(); }, {"resume: '" + ckpt(8) +
                                             "': attribute step: expected 8 (the step its file name carries), "
                                             "found 0"});
  before.expect_unchanged();
}

TEST_F(TrainerTest, ResumeRefusesAnOlderCheckpointWhileANewerOneExistsNamingBoth) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  write_latest(run_dir().string(), checkpoint_file_name(4));
  const RunDirSnapshot before(run_dir());
  expect_error<ConfigError>([&] { run(); },
                            {"resume: '" + (run_dir() / "latest").string() + "' names '" + ckpt(4) + "' (step 4)",
                             "train.out_dir holds the newer '" + ckpt(8) + "' (step 8)",
                             "would overwrite or prune it, so nothing was changed", "train.resume: " + ckpt(8)});
  before.expect_unchanged();
  // Named explicitly, the older checkpoint is refused too: the error says what resuming from
  // it would do to the newer one.
  expect_error<ConfigError>(
      [&] { run({"train.resume=" + ckpt(4)}); },
      {"resume: train.resume names '" + ckpt(4) + "' (step 4)",
       "train.out_dir holds the newer '" + ckpt(8) + "' (step 8)", "would overwrite or prune it"});
  before.expect_unchanged();
}

// A run killed after renaming ckpt_8.h5 into place but before pointing `latest` at it leaves
// `latest` older than that file: the same command resumes from ckpt_8 (with a warning).
TEST_F(TrainerTest, ARunKilledBeforeUpdatingLatestResumesFromTheCheckpointWrittenAfterIt) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  write_latest(run_dir().string(), checkpoint_file_name(4));
  fs::last_write_time(run_dir() / "latest", fs::last_write_time(ckpt(8)) - std::chrono::seconds(5));
  const TrainSummary resumed = run();
  EXPECT_EQ(resumed.start_step, 8);
  EXPECT_EQ(resumed.step, 12);
  EXPECT_EQ(read_bytes((run_dir() / "latest").string()), checkpoint_file_name(12) + "\n");
}

TEST_F(TrainerTest, ResumeBesideANewerDamagedCheckpointDoesNotAdviseResumingFromIt) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  write_latest(run_dir().string(), checkpoint_file_name(4));
  const std::string whole = read_bytes(ckpt(8));
  write_bytes(ckpt(8), whole.substr(0, whole.size() / 2));  // truncated, as by a full disk
  // `latest` pointed back after that (not a run killed before updating it, which resumes).
  fs::last_write_time(run_dir() / "latest", fs::last_write_time(ckpt(8)) + std::chrono::seconds(5));
  const RunDirSnapshot before(run_dir());
  const std::string what = expect_error<ConfigError>(
      [&] { run(); }, {"train.out_dir holds the newer '" + ckpt(8) + "' (step 8)", "it cannot be read (",
                       "move it out of train.out_dir, or choose another train.out_dir"});
  EXPECT_EQ(what.find("train.resume: " + ckpt(8)), std::string::npos) << what;
  before.expect_unchanged();
}

TEST_F(TrainerTest, ResumeRefusesNegativeCountersBeforeMetricsChange) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  const std::string good = read_bytes(ckpt(8));
  ASSERT_NO_FATAL_FAILURE(overwrite_int64_attribute(ckpt(8), "step", -5));
  RunDirSnapshot before(run_dir());
  expect_error([&] { run(); }, {"load_checkpoint: '" + ckpt(8) + "': root attribute 'step': expected >= 0, found -5"});
  before.expect_unchanged();

  write_bytes(ckpt(8), good);
  ASSERT_NO_FATAL_FAILURE(overwrite_int64_attribute(ckpt(8), "tokens_seen", -1));
  before = RunDirSnapshot(run_dir());
  expect_error([&] { run(); },
               {"load_checkpoint: '" + ckpt(8) + "': root attribute 'tokens_seen': expected >= 0, found -1"});
  before.expect_unchanged();
}

TEST_F(TrainerTest, ResumeRefusesAStepBeyondMaxStepsThatDisagreesWithItsName) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  const std::string good = read_bytes(ckpt(8));
  ASSERT_NO_FATAL_FAILURE(overwrite_int64_attribute(ckpt(8), "step", 1000000000000000));
  const RunDirSnapshot before(run_dir());
  // Not "nothing to do" with exit 0: the file name says step 8.
  expect_error<ConfigError>([&] { run(); }, {"resume: '" + ckpt(8) +
                                             "': attribute step: expected 8 (the step its file name carries), "
                                             "found 1000000000000000"});
  before.expect_unchanged();

  // A step beyond train.max_steps that the name confirms is a finished run: nothing to do,
  // and no file changes (config.yaml, which holds the new max_steps, included).
  write_bytes(ckpt(8), good);
  const RunDirSnapshot finished(run_dir());
  TrainSummary s = run({"train.max_steps=6"});
  EXPECT_EQ(s.end_reason, "nothing to do");
  EXPECT_EQ(s.step, 8);
  finished.expect_unchanged();
}

TEST_F(TrainerTest, ResumeRefusesACheckpointMissingOptimizerStateNamingTheParameter) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  const std::string good = read_bytes(ckpt(8));
  const std::string name = load_checkpoint(ckpt(8)).optimizer.params.at(1).name;
  ASSERT_NO_FATAL_FAILURE(delete_hdf5_object(ckpt(8), "/optimizer/" + name));
  RunDirSnapshot before(run_dir());
  expect_error<ConfigError>(
      [&] { run(); },
      {"resume: '" + ckpt(8) + "': no optimizer state for parameter '" + name + "': expected /optimizer/" + name +
       "/exp_avg (adamw after 8 updates), found no /optimizer/" + name + " group"});
  before.expect_unchanged();

  // One buffer of the group missing is refused the same way, naming the buffer.
  write_bytes(ckpt(8), good);
  ASSERT_NO_FATAL_FAILURE(delete_hdf5_object(ckpt(8), "/optimizer/" + name + "/exp_avg_sq"));
  before = RunDirSnapshot(run_dir());
  expect_error<ConfigError>([&] { run(); }, {"no optimizer state for parameter '" + name + "': expected /optimizer/" +
                                             name + "/exp_avg_sq (adamw after 8 updates), found none"});
  before.expect_unchanged();

  // Fine-tuning reads weights only (init_from): the same file starts a new run.
  TrainSummary s = run({"init_from=" + ckpt(8), "train.out_dir=" + (dir_ / "finetune").string(), "train.max_steps=2",
                        "train.eval_every=0"});
  EXPECT_EQ(s.step, 2);
  before.expect_unchanged();
}

TEST_F(TrainerTest, ResumeRefusesOptimizerStateOfTheWrongShapeNamingTheFile) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  Checkpoint c = load_checkpoint(ckpt(8));
  CheckpointParamState& param = c.optimizer.params.at(1);
  param.buffers.at(0).second = Tensor::zeros({3});
  save_checkpoint(path("wrong_shape.h5"), c);
  write_bytes(ckpt(8), read_bytes(path("wrong_shape.h5")));
  const RunDirSnapshot before(run_dir());
  expect_error([&] { run(); },
               {"resume: '" + ckpt(8) + "': ", "'" + param.name + "/exp_avg': expected ", "got [3] f32"});
  before.expect_unchanged();
}

TEST_F(TrainerTest, StrayCheckpointNamesAreIgnoredWithAWarning) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  // Not int64, and not checkpoint_file_name's form: neither is step 12 nor newer than ckpt_8.
  const std::vector<std::string> strays = {"ckpt_99999999999999999999.h5", "ckpt_12.h5"};
  for (const std::string& stray : strays) fs::copy_file(ckpt(8), run_dir() / stray);
  const RunDirSnapshot before(run_dir());
  TrainSummary s = run({"train.keep_last=0"});
  EXPECT_EQ(s.start_step, 8);
  EXPECT_EQ(s.step, 12);
  const std::string log = log_text();
  for (const std::string& stray : strays) {
    EXPECT_TRUE(contains(log, "warning: ignoring " + (run_dir() / stray).string() +
                                  ": not a checkpoint name lat writes (ckpt_<step>.h5, the step an int64 in 8 or more "
                                  "digits)\n"))
        << log;
    EXPECT_EQ(read_bytes(run_dir() / stray), before.bytes(stray)) << stray;
  }
  EXPECT_EQ(read_bytes(ckpt(4)), before.bytes("ckpt_00000004.h5"));
  EXPECT_EQ(read_bytes(ckpt(8)), before.bytes("ckpt_00000008.h5"));
  EXPECT_TRUE(fs::exists(ckpt(12)));
  EXPECT_EQ(read_bytes(run_dir() / "latest"), "ckpt_00000012.h5\n");
  // metrics.jsonl is extended, its records up to step 8 kept as they were.
  EXPECT_EQ(read_bytes(run_dir() / "metrics.jsonl").rfind(before.bytes("metrics.jsonl"), 0), 0u);
}

// generate and eval (load_trained_model), info (inspect) on a run directory holding stray
// names: the newest real checkpoint, and one warning line per stray name on stderr.
TEST_F(TrainerTest, StrayCheckpointNamesAreIgnoredWithAWarningByTheDirectoryLookup) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  const fs::path stray = run_dir() / "ckpt_99999999999999999999.h5";
  fs::copy_file(ckpt(8), stray);
  fs::remove(run_dir() / "latest");  // the lookup then goes by the names alone
  const RunDirSnapshot before(run_dir());
  const std::string warning = "warning: ignoring " + stray.string() + ": not a checkpoint name lat writes";
  auto expect_one_warning = [&](const std::string& err, const char* what) {
    EXPECT_EQ(err.find(warning), err.rfind(warning)) << what << ": " << err;
    EXPECT_TRUE(contains(err, warning)) << what << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << what << ": " << err;
  };

  ::testing::internal::CaptureStderr();
  const TrainedModel trained = load_trained_model(run_dir().string());
  expect_one_warning(::testing::internal::GetCapturedStderr(), "generate");
  EXPECT_EQ(trained.path, ckpt(8));
  EXPECT_EQ(trained.step, 8);

  ::testing::internal::CaptureStderr();
  const CheckpointEval e = evaluate_checkpoint(run_dir().string());
  expect_one_warning(::testing::internal::GetCapturedStderr(), "eval");
  EXPECT_EQ(e.checkpoint, ckpt(8));

  ::testing::internal::CaptureStderr();
  const ModelInfo info = inspect(run_dir().string(), 64);
  expect_one_warning(::testing::internal::GetCapturedStderr(), "info");
  ASSERT_TRUE(info.checkpoint.has_value());
  EXPECT_EQ(info.checkpoint->path, ckpt(8));

  before.expect_unchanged();
}

// The last line of defence: a checkpoint at or above the step a run is about to save appears
// in out_dir while it trains (another tool, a copy): the run stops rather than replace it or
// leave it newer than `latest` to be pruned.
TEST_F(TrainerTest, SaveRefusesToWriteBelowANewerCheckpointThatAppearedDuringTheRun) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  const std::string planted = ckpt(99999999);
  std::thread planter([&] {
    // Wait until the resumed run has logged a step past 8, then plant the checkpoint and stop
    // the run, which saves at the step it finishes.
    for (int i = 0; i < 6000; ++i) {
      if (read_metrics(run_dir() / "metrics.jsonl").size() >= 12) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    fs::copy_file(ckpt(8), planted);
    std::raise(SIGTERM);
  });
  expect_error(
      [&] {
        run({"train.max_steps=100000", "train.eval_every=0", "train.ckpt_every=0"});
      },
      {"not writing " + run_dir().string() + "/ckpt_", "train.out_dir already holds " + planted +
                                                           " (step 99999999), which lat never replaces or outdates; "
                                                           "stopping"});
  planter.join();
  EXPECT_EQ(read_bytes(planted), read_bytes(ckpt(8)));
  EXPECT_EQ(read_bytes(run_dir() / "latest"), "ckpt_00000008.h5\n");
  for (const auto& entry : fs::directory_iterator(run_dir())) {
    const std::optional<int64_t> step = checkpoint_step(entry.path().filename().string());
    if (step) {
      EXPECT_TRUE(*step == 4 || *step == 8 || *step == 99999999) << entry.path();
    }
  }
}

}  // namespace
}  // namespace lat
