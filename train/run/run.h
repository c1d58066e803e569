// One training run (train() in trainer.h), as a class whose state lives for the whole run:
// run_start.cpp starts it (fresh, resumed or fine-tuned: data, model, optimizer, out_dir);
// run_loop.cpp runs the steps, evals and checkpoints. Internal to train/run/.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "lat/precision.h"
#include "layers/hybrid_lm.h"
#include "optim/schedule.h"
#include "train/config/config.h"
#include "train/distributed/distributed.h"
#include "train/files/checkpoint.h"
#include "train/files/model_reader.h"
#include "train/run/finetune.h"
#include "train/run/memory_estimate.h"
#include "train/run/metrics.h"
#include "train/run/progress.h"
#include "train/run/run_dir_lock.h"
#include "train/run/run_options.h"
#include "train/run/signals.h"
#include "train/run/train_optimizer.h"

namespace lat {

/// The state of one run and the steps that make it. Rank 0 alone writes logs, progress,
/// metrics and checkpoints; the other ranks compute the same.
class Run {
 public:
  using Clock = std::chrono::steady_clock;

  /// Holds `config` (validated and resolved) for the whole run; nothing is read or written
  /// before run().
  Run(const Config& config, const TrainOptions& options);

  /// Starts (or resumes), trains to train.max_steps (or stop_at, or a stop signal), evaluates
  /// and saves the last checkpoint. Throws as train() documents.
  TrainSummary run();

 private:
  /// What building the model did, for the run's log.
  struct ModelSetup {
    std::optional<InitReport> init_report;  // fine-tuning: what init_from loaded
    size_t trainable = 0;                   // parameters the optimizer updates
    size_t lr_mults = 0;                    // parameters with an lr_mult
  };

  // ---- starting (run_start.cpp) -------------------------------------------------------
  /// train.device, the precision in effect there (bf16 falls back to fp32, with a warning,
  /// where the device has no bf16 products) and the split of each micro-batch over the
  /// ranks. Throws ConfigError when they cannot work here.
  void check_supported();
  /// The checkpoint to continue from (train.resume), as rank 0 decides it for every rank.
  std::optional<std::string> shared_resume_source();
  /// Rank 0's choice: train.resume's path, out_dir's latest checkpoint (auto), or none; throws
  /// ConfigError for train.resume never with checkpoints in out_dir.
  std::optional<std::string> resume_source();
  /// Everything before the first step: what can fail is read first, so that a bad checkpoint
  /// or config leaves out_dir untouched.
  void prepare(const std::optional<std::string>& resume_path);
  /// Throws ConfigError when out_dir exists and is not a directory.
  void check_out_dir() const;
  /// A checkpoint to resume from and the train config it was written with.
  struct ResumeCheckpoint {
    Checkpoint ckpt;
    TrainConfig writer;
  };
  /// The checkpoint at `path`, checked before anything in out_dir changes: throws ConfigError
  /// listing the keys that may not change on resume when its config differs in them, and the
  /// errors of resume_checks.h (damaged counters; a newer checkpoint in out_dir).
  ResumeCheckpoint read_resume_checkpoint(const std::string& path) const;
  /// Loads data_ (text encoded with `tokenizer` when given) and the loader, or the loader of
  /// data.task's synthetic task (data_ stays empty); returns the vocabulary size.
  int64_t load_training_data(const std::optional<Tokenizer>& tokenizer);
  /// load_training_data with the tokenizer of the checkpoint at `path`; a failure (a character
  /// its char vocabulary lacks) names that checkpoint and data.path (ConfigError unchanged).
  int64_t load_resume_data(const std::optional<Tokenizer>& tokenizer, const std::string& path);
  /// The tokenizer data.tokenizer names when it is a file's path (nullopt for char and byte,
  /// which load_data builds). Throws ConfigError naming data.tokenizer and the path when the
  /// file is not a tokenizer lat reads.
  std::optional<Tokenizer> tokenizer_from_file() const;
  /// The step this run stops at: train.stop_at when set (and below max_steps), else max_steps.
  int64_t end_step() const;
  /// model_ (from init_from's weights when fine-tuning), frozen_, optimizer_ and schedule_.
  ModelSetup build_model(int64_t vocab_size, const std::optional<ModelWeights>& init);
  /// Weights, optimizer state, generator and counters of the checkpoint `resume` read from
  /// `path`. Throws ConfigError naming a parameter without optimizer state.
  void restore(const ResumeCheckpoint& resume, const std::string& path);
  /// Rank 0's parameters and optimizer state on every rank.
  void broadcast_state();
  /// Rank 0: creates and locks out_dir, drops what an interrupted run left there, writes
  /// config.yaml and opens metrics.jsonl.
  void open_out_dir();
  /// Rank 0, out_dir open: writes the token cache load_data did not find whole (`cache`),
  /// removes the stale ones, and logs what it did.
  void write_token_cache_file(const TokenCacheLookup& cache);
  /// The run's description in the log: where it starts, data, model, optimizer, fine-tuning.
  void log_start(const std::optional<std::string>& resume_path, int64_t vocab_size, const ModelSetup& setup);

  // ---- training (run_loop.cpp) ----------------------------------------------------------
  /// One optimizer step; returns its token-weighted mean loss, `norm` the gradient norm.
  double train_step(int64_t step, double lr, GradNorm& norm);
  /// Sums the gradients over the ranks; returns the sum of the ranks' losses.
  double all_reduce_gradients(int64_t step, double local_loss);
  /// Throws lat::Error: step `step` failed for `what`; names the last good checkpoint, then
  /// `hint` in parentheses (none when empty).
  [[noreturn]] void fail_step(int64_t step, const std::string& what, const std::string& hint);
  /// The newest checkpoint of this run or the one it resumed from; empty when none.
  std::optional<std::string> last_checkpoint() const;
  /// "the last checkpoint stays: PATH" (this run's or the one it resumed from), or "this run
  /// has no checkpoint yet".
  std::string last_checkpoint_note() const;
  /// Marks the eval after `step` as compute that a stop signal's watchdog may cut.
  InterruptibleSection eval_section(int64_t step) const;
  /// The loss on eval_batches val batches (logged and recorded).
  void periodic_eval(int64_t step);
  /// The loss on the whole val split at max_steps.
  void final_eval();
  /// The unit of val_loss / ln 2 in eval log lines: "bpc" for char and byte text, else "bits per token".
  std::string bits_unit() const;
  /// Writes the checkpoint of `step` (rank 0), `latest`, and prunes old ones.
  void save(int64_t step);
  /// The run's closing log lines.
  void log_end(int stopped_by, double train_seconds);
  /// How to continue a run that ended before max_steps (the end line's last words), else "".
  std::string continue_hint() const;

  /// A line of the run's log (rank 0 alone writes it).
  void log(const std::string& text) {
    if (dist_.is_root()) progress_.message(text);
  }

  Clock::time_point created_;  // the whole run's wall time counts from here
  Config config_;
  const TrainConfig& train_;
  ProgressLine progress_;
  std::filesystem::path out_dir_;
  Generator gen_;
  Device device_ = Device::cpu();
  Precision precision_ = Precision::fp32;  // train.precision as this device runs it
  LrSchedule schedule_;
  std::optional<LoadedData> data_;  // empty for a synthetic data.task
  std::unique_ptr<BatchLoader> loader_;
  std::unique_ptr<HybridLM> model_;
  std::unique_ptr<TrainOptimizer> optimizer_;
  std::vector<std::string> frozen_;  // config freeze resolved to parameter names
  std::unique_ptr<MetricsWriter> metrics_;
  std::optional<RunDirLock> out_dir_lock_;  // rank 0: held for the whole run
  TrainSummary summary_;
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  double val_loss_ = std::numeric_limits<double>::quiet_NaN();
  double best_val_loss_ = std::numeric_limits<double>::quiet_NaN();
  int64_t saved_step_ = -1;  // step of the last checkpoint this process wrote
  double eval_seconds_ = 0.0, save_seconds_ = 0.0;
  Distributed& dist_;
  RowRange rows_;  // this rank's rows of each micro-batch
  StepMemory step_memory_;  // the estimate checked in prepare()
};

}  // namespace lat
