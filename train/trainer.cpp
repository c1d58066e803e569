// The training loop: start or resume, steps with gradient accumulation, logs, evals,
// checkpoints, graceful stop.
#include "train/trainer.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "data/dataset.h"
#include "data/loader.h"
#include "lat/ops.h"
#include "lat/tape.h"
#include "optim/schedule.h"
#include "train/checkpoint.h"
#include "train/distributed.h"
#include "train/distributed_eval.h"
#include "train/distributed_nccl.h"
#include "train/eval.h"
#include "train/export.h"
#include "train/finetune.h"
#include "train/metrics.h"
#include "train/model.h"
#include "train/progress.h"
#include "train/run_dir_lock.h"
#include "train/signals.h"
#include "train/task_eval.h"
#include "train/train_optimizer.h"
#include "train/train_step.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// value with up to 6 significant digits: 0.003, 1e-05, 1e+30 (learning rates).
std::string general(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

std::string fixed(double value, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << value;
  return os.str();
}

// config.yaml through a temporary file and a rename, like the other run files.
void write_text_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    LAT_CHECK(out.good(), "train: cannot write '" << tmp.string() << "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  LAT_CHECK(!ec, "train: cannot rename '" << tmp.string() << "' to '" << path.string() << "': " << ec.message());
}

// The loader counters saved in /data: the step is the data position (the loader is a pure
// function of (seed, step, micro-batch, row)); the rest records what that position means.
DataState data_state(const TrainConfig& train, int64_t step, const std::string& sampler) {
  DataState d;
  d.counters = {{"step", step}, {"seed", train.seed}, {"batch_size", train.batch_size},
                {"grad_accum", train.grad_accum}};
  d.state = sampler;
  return d;
}

// Test hook of the MPI tests (tests/mpi/train_ranks.sh): LAT_TEST_FAIL_AT=R:S:throw makes rank
// R throw at step S, as a failing rank would; R:S:kill makes it die of SIGKILL there, as a
// killed process. step 0 (never) when unset or naming another rank.
struct TestFailure {
  int64_t step = 0;
  bool kill = false;
};

TestFailure test_failure(int rank) {
  const char* spec = std::getenv("LAT_TEST_FAIL_AT");
  int fail_rank = -1;
  long long fail_step = 0;
  char how[8] = {};
  if (spec == nullptr || std::sscanf(spec, "%d:%lld:%7s", &fail_rank, &fail_step, how) != 3 || fail_rank != rank)
    return {};
  return {fail_step, std::string(how) == "kill"};
}

class Run {
 public:
  Run(const Config& config, const TrainOptions& options)
      : created_(Clock::now()),
        config_(config),
        train_(config_.train),
        progress_(options.live_progress ? ProgressLine(options.log, *options.live_progress)
                                        : ProgressLine(options.log)),
        out_dir_(train_.out_dir),
        gen_(static_cast<uint64_t>(train_.seed)),
        dist_(Distributed::get()),
        test_failure_(test_failure(dist_.rank())) {}

  TrainSummary run();

 private:
  void check_supported();
  std::optional<std::string> resume_source();
  std::optional<std::string> shared_resume_source();
  void broadcast_state();
  void prepare(const std::optional<std::string>& resume_path);
  double train_step(int64_t step, double lr, GradNorm& norm);
  double all_reduce_gradients(int64_t step, double local_loss);
  /// Throws lat::Error: step `step` failed for `what`; names the last good checkpoint.
  [[noreturn]] void fail_step(int64_t step, const std::string& what);
  void periodic_eval(int64_t step);
  void final_eval();
  void save(int64_t step);
  // Rank 0 alone writes logs, progress, metrics and checkpoints (the others compute the same).
  void log(const std::string& text) {
    if (dist_.is_root()) progress_.message(text);
  }

  Clock::time_point created_;  // the whole run's wall time counts from here
  Config config_;
  const TrainConfig& train_;
  ProgressLine progress_;
  fs::path out_dir_;
  Generator gen_;
  Device device_ = Device::cpu();
  LrSchedule schedule_;
  std::optional<LoadedData> data_;
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
  TestFailure test_failure_;
};

void Run::check_supported() {
  device_ = parse_device(train_.device);
  const int ranks = dist_.world_size();
  if (train_.batch_size % ranks != 0)
    throw ConfigError("train.batch_size: " + std::to_string(train_.batch_size) + " sequences cannot be split evenly over " +
                      std::to_string(ranks) + " ranks: choose a batch_size divisible by " + std::to_string(ranks) +
                      " (it is the global micro-batch, summed over the ranks)");
  rows_ = rank_rows(train_.batch_size, dist_.rank(), ranks);
  if (ranks > 1 && device_.is_cuda()) {
    if (!nccl::built())
      throw ConfigError("train.device: " + train_.device + " with " + std::to_string(ranks) +
                        " ranks needs NCCL, and this lat was built without it");
    // One GPU per rank: "cuda" means this rank's own device on its host.
    if (train_.device == "cuda") device_ = Device::cuda(dist_.local_rank());
  }
}

// The checkpoint to continue from, if any (train.resume).
std::optional<std::string> Run::resume_source() {
  const std::string& resume = train_.resume;
  if (resume != "auto" && resume != "never") return resolve_checkpoint(resume);
  std::error_code ec;
  if (!fs::is_directory(out_dir_, ec)) return std::nullopt;
  std::optional<std::string> latest = find_latest_checkpoint(out_dir_.string());
  if (resume == "auto" || !latest) return latest;
  throw ConfigError("train.resume: never, but train.out_dir '" + out_dir_.string() + "' already holds " +
                    fs::path(*latest).filename().string() +
                    ": remove its checkpoints, choose another train.out_dir, or resume with train.resume: auto");
}

// Rank 0 decides where to start (its out_dir is the one that counts); every rank then reads
// that checkpoint (a path all ranks can see: a shared file system on several hosts).
std::optional<std::string> Run::shared_resume_source() {
  std::optional<std::string> source = dist_.is_root() ? resume_source() : std::nullopt;
  if (dist_.world_size() == 1) return source;
  const std::string path = dist_.broadcast(source.value_or(""));
  return path.empty() ? std::nullopt : std::optional<std::string>(path);
}

// Rank 0's parameters and optimizer state on every rank, at start and after a resume, so the
// ranks start bit-identical whatever their own initialization or reads gave.
void Run::broadcast_state() {
  std::vector<Tensor> tensors;
  for (auto& [name, tensor] : model_->named_parameters()) tensors.push_back(tensor);
  for (auto& param : optimizer_->snapshot().params)
    for (auto& [buffer, tensor] : param.buffers) tensors.push_back(tensor);
  dist_.broadcast(tensors);
}

void Run::prepare(const std::optional<std::string>& resume_path) {
  // Read everything that can fail before any file of out_dir is touched: a bad checkpoint
  // stays as it is, for the user to inspect.
  std::error_code ec;
  if (fs::exists(out_dir_, ec) && !fs::is_directory(out_dir_, ec))
    throw ConfigError("train.out_dir: '" + out_dir_.string() +
                      "' exists and is not a directory (expected a run directory, or a path to create)");
  std::optional<Checkpoint> ckpt;
  std::optional<Tokenizer> tokenizer;
  if (resume_path) {
    ckpt = load_checkpoint(*resume_path);
    const Config saved = parse_config(ckpt->config_yaml, *resume_path);
    const std::vector<std::string> keys = resume_incompatible_keys(saved, config_);
    if (!keys.empty())
      throw ConfigError("resume: " + *resume_path + " was trained with another config; these keys may not change " +
                        "on resume: " + join(keys, ", ") +
                        " (restore them, or start a new run with another train.out_dir)");
    if (ckpt->tokenizer_type == "char")
      tokenizer = Tokenizer::char_from_vocab(ckpt->tokenizer_vocab);
    else if (ckpt->tokenizer_type == "byte")
      tokenizer = Tokenizer::byte();
  }
  // Fine-tuning starts from another model's weights, and encodes its text with that model's
  // tokenizer so that ids keep their meaning (a synthetic task has ids and no tokenizer). A
  // run that resumes has its own checkpoint.
  const bool synthetic = config_.data.task != "none";
  std::optional<ModelWeights> init;
  if (!resume_path && !config_.init_from.empty()) {
    init = load_model_weights(config_.init_from);
    if (!synthetic) tokenizer = finetune_tokenizer(init->checkpoint, config_.data, config_.init_from_strict);
  }

  int64_t vocab_size = config_.model.vocab_size;
  std::string data_line;  // logged below
  if (synthetic) {
    const SyntheticTask task = SyntheticTask::named(config_.data.task, config_.data.mqar, config_.data.copy,
                                                    config_.data.block_size);
    if (vocab_size == 0) vocab_size = task.vocab_size();
    loader_ = std::make_unique<BatchLoader>(task, static_cast<uint64_t>(train_.seed));
    data_line = "synthetic task " + task.describe() + ", sequences of " + std::to_string(config_.data.block_size) +
                " tokens generated from train.seed, vocab " + std::to_string(vocab_size);
  } else {
    DataOptions data_options;
    data_options.path = config_.data.path;
    data_options.format = config_.data.format;
    data_options.tokenizer = config_.data.tokenizer;
    data_options.bin_dtype = config_.data.bin_dtype;
    data_options.h5_dataset = config_.data.h5_dataset;
    data_options.block_size = config_.data.block_size;
    data_options.val_fraction = config_.data.val_fraction;
    data_options.vocab_size = config_.model.vocab_size;
    data_.emplace(load_data(data_options, tokenizer));
    const Dataset& dataset = data_->dataset;
    if (vocab_size == 0) vocab_size = data_->tokenizer ? data_->tokenizer->vocab_size() : int64_t{dataset.max_id()} + 1;
    loader_ = std::make_unique<BatchLoader>(dataset, static_cast<uint64_t>(train_.seed));
    data_line = config_.data.path + " (" + data_->format +
                (data_->tokenizer ? ", " + data_->tokenizer->type() + " tokenizer" : std::string()) + ", vocab " +
                std::to_string(vocab_size) + "): " + std::to_string(dataset.split_size(Split::train)) + " train / " +
                std::to_string(dataset.split_size(Split::val)) + " val tokens, block " +
                std::to_string(config_.data.block_size);
  }

  model_ = std::make_unique<HybridLM>(hybrid_lm_config(config_.model, vocab_size), gen_);
  std::optional<InitReport> init_report;
  if (init) init_report = init_from_weights(*model_, *init, config_.init_from_strict);
  // Frozen parameters keep no gradient and get no optimizer state.
  frozen_ = frozen_names(model_->named_parameters(), config_.freeze);
  const std::vector<NamedTensor> trainable = freeze_parameters(model_->named_parameters(), frozen_);
  optimizer_ = std::make_unique<TrainOptimizer>(train_, trainable);
  const std::vector<std::pair<std::string, double>> lr_mults = lr_multipliers(trainable, config_.lr_mult);
  for (const auto& [name, mult] : lr_mults) optimizer_->set_lr_mult(name, mult);
  schedule_ = LrSchedule{train_.schedule, train_.lr, train_.min_lr, train_.warmup, train_.max_steps};
  schedule_.validate();

  if (ckpt) {
    load_weights(*model_, ckpt->model, *resume_path);
    if (ckpt->optimizer.type == optimizer_->type())
      optimizer_->load_from(*ckpt, *resume_path);
    else
      log("warning: " + *resume_path + " holds " + (ckpt->optimizer.type.empty() ? "no" : ckpt->optimizer.type) +
          " optimizer state; " + optimizer_->type() + " starts from fresh state");
    if (!ckpt->rng_state.empty()) gen_.set_state(ckpt->rng_state);
    if (ckpt->data.state != loader_->sampler())
      log("warning: " + *resume_path + " was written with data sampler '" + ckpt->data.state + "', this lat uses '" +
          loader_->sampler() + "': the batches after the resume differ from an uninterrupted run");
    if (ckpt->world_size != dist_.world_size())
      log("warning: " + *resume_path + " was written by " + std::to_string(ckpt->world_size) + " ranks, now " +
          std::to_string(dist_.world_size()) + ": the global batch (train.batch_size x grad_accum) and so the data " +
          "order are kept, but sums are grouped differently, so the run differs from an uninterrupted one by rounding");
    step_ = ckpt->step;
    tokens_seen_ = ckpt->tokens_seen;
    val_loss_ = ckpt->val_loss;
    best_val_loss_ = ckpt->best_val_loss;
  }
  if (dist_.world_size() > 1) broadcast_state();
  move_parameters(*model_, device_);
  summary_.start_step = step_;

  if (dist_.is_root()) {
    fs::create_directories(out_dir_, ec);
    LAT_CHECK(!ec, "train.out_dir: cannot create '" << out_dir_.string() << "': " << ec.message());
    out_dir_lock_.emplace(out_dir_.string());  // before anything in out_dir changes
    for (const std::string& name : clean_stale_tmp(out_dir_.string())) log("removed stale " + name);
    const fs::path metrics_path = out_dir_ / "metrics.jsonl";
    const int64_t dropped = truncate_metrics(metrics_path.string(), step_);
    if (dropped > 0)
      log("metrics.jsonl: dropped " + std::to_string(dropped) + " records after step " + std::to_string(step_));
    write_text_atomically(out_dir_ / "config.yaml", to_yaml(config_));
    metrics_ = std::make_unique<MetricsWriter>(metrics_path.string());
  }

  log("lat train: " + (resume_path ? "resuming from " + *resume_path + " at step " + std::to_string(step_)
                                   : std::string("fresh run")) +
      ", out_dir " + out_dir_.string());
  log("data: " + data_line);
  log("model: " + std::to_string(model_->n_layers()) + " layers (" + join(model_->config().layers, ",") +
      "), d_model " + std::to_string(config_.model.d_model) + ", " + std::to_string(config_.model.n_heads) +
      " heads: " + fixed(static_cast<double>(model_->num_parameters()) / 1e6, 3) + "M parameters");
  log("optimizer: " + optimizer_->type() + ", lr " + general(train_.lr) + " (" + train_.schedule + ", warmup " +
      std::to_string(train_.warmup) + ", min " + general(train_.min_lr) + "), batch " +
      std::to_string(train_.batch_size) + " x " + std::to_string(train_.grad_accum) + " x " +
      std::to_string(config_.data.block_size) + " tokens, " + std::to_string(get_num_threads()) + " threads, " +
      device_.str() +
      (dist_.world_size() > 1 ? " (per rank; " + std::to_string(dist_.world_size()) + " ranks, " +
                                    std::to_string(rows_.end - rows_.begin) + " sequences each per micro-batch)"
                              : std::string()));
  std::istringstream groups(optimizer_->describe_groups());
  for (std::string line; std::getline(groups, line);) log("  " + line);
  if (init_report) log(init_report->describe());
  if (!frozen_.empty())
    log("frozen: " + std::to_string(frozen_.size()) + " parameters (" + join(config_.freeze, ", ") + "), " +
        std::to_string(trainable.size()) + " trainable");
  for (const auto& [pattern, mult] : config_.lr_mult) log("lr_mult: " + pattern + " x" + fixed(mult, 4));
  if (lr_mults.size() > 0) log("lr_mult: applies to " + std::to_string(lr_mults.size()) + " parameters");
  // The starting point of a fine-tuning run, so that metrics.jsonl shows the val loss moving.
  if (init) periodic_eval(0);
}

// One optimizer step: forward/backward over the micro-batches, clipping, update. Returns
// the step's token-weighted mean loss; `norm` receives the gradient norm.
//
// With N ranks each takes its rows of every micro-batch and weights its losses by its tokens'
// share of the whole step's (all ranks') tokens: the sum over ranks of the gradients is then
// the gradient of the global token-weighted mean, the 1-rank update. The gradients are summed
// over the ranks before clipping, so the norm, the clipping and the update are the same on
// every rank.
double Run::train_step(int64_t step, double lr, GradNorm& norm) {
  std::vector<Batch> micro;
  int64_t tokens = 0;
  for (int64_t m = 0; m < train_.grad_accum; ++m) {
    micro.push_back(loader_->batch(Split::train, step, m, rows_));
    tokens += micro.back().tokens;
  }
  if (dist_.world_size() > 1) {
    std::vector<double> global = {static_cast<double>(tokens)};
    dist_.all_reduce_sum(global);
    tokens = static_cast<int64_t>(global[0]);
  }
  double loss = 0.0;
  try {
    if (step == test_failure_.step) {
      if (test_failure_.kill) std::raise(SIGKILL);
      throw Error("rank " + std::to_string(dist_.rank()) + " fails here on purpose (LAT_TEST_FAIL_AT test hook)");
    }
    loss = accumulate_gradients(*model_, micro, tokens, device_);
  } catch (const Error& e) {
    // Diverging weights can trip a kernel's input check (e.g. a NaN log-decay) before the
    // loss is computed: name the step and the checkpoint to go back to.
    clear_tape();
    fail_step(step, e.what());
  }
  if (dist_.world_size() > 1) loss = all_reduce_gradients(step, loss);
  if (!std::isfinite(loss)) fail_step(step, std::string("the training loss is ") + (std::isnan(loss) ? "nan" : "inf"));
  norm = optimizer_->clip_grad_norm(train_.grad_clip);
  if (!norm.finite) {
    log("warning: step " + std::to_string(step) + ": gradient norm is " + std::to_string(norm.norm) +
        "; step skipped (" + std::to_string(++summary_.skipped_steps) + " so far)");
    optimizer_->zero_grad();
  } else {
    optimizer_->step(lr);
  }
  tokens_seen_ += tokens;
  return loss;
}

// Sums the gradients over the ranks (bucketed) and returns the sum of the ranks' losses.
// Ranks build the same model, so they hold gradients for the same parameters; a rank that
// does not (a bug) is caught before the bucketed all-reduce would mismatch.
double Run::all_reduce_gradients(int64_t step, double local_loss) {
  std::vector<Tensor> grads;
  int64_t elements = 0;
  for (auto& [name, tensor] : model_->named_parameters()) {
    Tensor g = tensor.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    elements += g.numel();
  }
  std::vector<double> sums = {local_loss, static_cast<double>(elements)};
  dist_.all_reduce_sum(sums);
  if (sums[1] != static_cast<double>(elements) * dist_.world_size())
    fail_step(step, "rank " + std::to_string(dist_.rank()) + " has gradients for " + std::to_string(elements) +
                        " parameter elements, not the same as every other rank");
  dist_.all_reduce_sum(grads);
  return sums[0];
}

void Run::fail_step(int64_t step, const std::string& what) {
  optimizer_->zero_grad();
  const int64_t last_saved = std::max(saved_step_, summary_.start_step);
  throw Error("train: step " + std::to_string(step) + ": " + what + "; stopping. " +
              (last_saved > 0 ? "The last good checkpoint is kept: " + (out_dir_ / checkpoint_file_name(last_saved)).string()
                              : std::string("No checkpoint was written yet.")) +
              " (If training diverged, try a lower train.lr or train.grad_clip.)");
}

void Run::periodic_eval(int64_t step) {
  const auto t0 = Clock::now();
  EvalResult r = evaluate_val_batches(*model_, *loader_, train_.eval_batches, train_.batch_size, device_, dist_);
  val_loss_ = r.loss;
  best_val_loss_ = std::isnan(best_val_loss_) ? r.loss : std::min(best_val_loss_, r.loss);
  if (metrics_) metrics_->eval(step, r.loss);
  log("step " + std::to_string(step) + ": val loss " + fixed(r.loss, 4) + " (" + fixed(r.bpc(), 4) + " bpc, " +
      std::to_string(train_.eval_batches) + " batches)");
  eval_seconds_ += seconds_since(t0);
}

void Run::final_eval() {
  if (!data_) {
    // A synthetic task has no val split to walk: its val batches, and the recall on them.
    periodic_eval(step_);
    summary_.val_loss = val_loss_;
    const auto t0 = Clock::now();
    if (dist_.is_root()) {
      const AnswerAccuracy a =
          val_accuracy(*model_, *loader_, train_.eval_batches * train_.batch_size, train_.batch_size, device_);
      log("step " + std::to_string(step_) + ": answer accuracy " + fixed(a.accuracy(), 4) + ", sequence accuracy " +
          fixed(a.seq_accuracy(), 4) + " (" + std::to_string(a.answers) + " answers in the val batches)");
    }
    eval_seconds_ += seconds_since(t0);
    return;
  }
  const auto t0 = Clock::now();
  EvalResult r = evaluate_val_split(*model_, data_->dataset, train_.batch_size, device_, dist_);
  val_loss_ = r.loss;
  best_val_loss_ = std::isnan(best_val_loss_) ? r.loss : std::min(best_val_loss_, r.loss);
  summary_.val_loss = r.loss;
  if (metrics_) metrics_->eval(step_, r.loss);
  log("step " + std::to_string(step_) + ": val loss " + fixed(r.loss, 4) + " (" + fixed(r.bpc(), 4) +
      " bpc) on the whole val split (" + std::to_string(r.tokens) + " tokens, " + fixed(seconds_since(t0), 1) + " s)");
  eval_seconds_ += seconds_since(t0);
}

void Run::save(int64_t step) {
  const auto t0 = Clock::now();
  Checkpoint c;
  c.step = step;
  c.tokens_seen = tokens_seen_;
  c.val_loss = val_loss_;
  c.best_val_loss = best_val_loss_;
  c.world_size = dist_.world_size();
  c.frozen = frozen_;
  c.config_yaml = to_yaml(config_);
  if (data_ && data_->tokenizer) {
    c.tokenizer_type = data_->tokenizer->type();
    if (c.tokenizer_type == "char") c.tokenizer_vocab = data_->tokenizer->vocab_string();
  } else {
    c.tokenizer_type = "none";  // bin/h5 token ids: no tokenizer to save
  }
  for (auto& [name, tensor] : model_->named_parameters()) c.model.emplace_back(name, tensor);
  optimizer_->save_to(c);
  c.rng_state = gen_.state();
  c.data = data_state(train_, step, loader_->sampler());
  const std::string name = checkpoint_file_name(step);
  if (dist_.is_root()) {
    save_checkpoint((out_dir_ / name).string(), c);
    write_latest(out_dir_.string(), name);
    prune_checkpoints(out_dir_.string(), train_.keep_last);
  }
  saved_step_ = step;
  summary_.checkpoint = (out_dir_ / name).string();
  save_seconds_ += seconds_since(t0);
}

// Keeps freed memory in the heap instead of returning it to the kernel: each step allocates
// and frees the same activation sizes, and fresh pages cost a page fault plus zeroing (about
// 7% of a step on the nanoGPT-size model without this).
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum: blocks below 32 MiB come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

TrainSummary Run::run() {
  keep_freed_memory();
  check_supported();
  dist_.reset_stats();
  set_num_threads(static_cast<int>(train_.threads > 0 ? train_.threads : dist_.default_threads()));
  prepare(shared_resume_source());

  const int64_t end = train_.stop_at > 0 ? std::min(train_.stop_at, train_.max_steps) : train_.max_steps;
  if (step_ >= end) {
    log("nothing to do: the checkpoint is at step " + std::to_string(step_) + ", the run ends at step " +
        std::to_string(end) + (train_.stop_at > 0 ? " (train.stop_at)" : " (train.max_steps)"));
    summary_.step = step_;
    summary_.end_reason = "nothing to do";
    return summary_;
  }

  StopSignalScope signals;
  const auto start = Clock::now();
  const int64_t first_step = step_ + 1;
  double window_seconds = 0.0, train_seconds = 0.0;  // time in train_step: since the last log, in total
  int64_t window_tokens = 0;
  int stopped_by = 0;
  while (step_ < end) {
    const int64_t step = step_ + 1;
    const double lr = schedule_.at(step);
    const int64_t tokens_before = tokens_seen_;
    const auto t0 = Clock::now();
    GradNorm norm;
    const double loss = train_step(step, lr, norm);
    const double dt = seconds_since(t0);
    step_ = step;
    window_seconds += dt;
    train_seconds += dt;
    window_tokens += tokens_seen_ - tokens_before;

    const bool log_step = step % train_.log_every == 0;
    const double tokens_per_s = window_seconds > 0 ? static_cast<double>(window_tokens) / window_seconds : 0.0;
    if (log_step) {
      if (metrics_) metrics_->log({step, loss, lr, norm.norm, tokens_seen_, tokens_per_s, seconds_since(start)});
      window_seconds = 0.0;
      window_tokens = 0;
    }
    const double eta = train_seconds / static_cast<double>(step - first_step + 1) * static_cast<double>(end - step);
    if (dist_.is_root()) progress_.update({step, train_.max_steps, loss, lr, norm.norm, tokens_per_s, eta}, log_step);

    if (train_.eval_every > 0 && step % train_.eval_every == 0 && step != train_.max_steps) periodic_eval(step);
    // A signal may reach the ranks at different steps: all stop after the same one.
    stopped_by = static_cast<int>(dist_.all_reduce_max(stop_signal()));
    if (train_.ckpt_every > 0 && step % train_.ckpt_every == 0 && step != end && stopped_by == 0) save(step);
    if (stopped_by != 0) break;
  }
  if (dist_.is_root()) progress_.finish();

  if (step_ == train_.max_steps) final_eval();
  if (saved_step_ != step_) save(step_);
  summary_.step = step_;
  summary_.end_reason = stopped_by == SIGINT    ? "SIGINT"
                        : stopped_by == SIGTERM ? "SIGTERM"
                        : step_ == train_.max_steps ? "max_steps"
                                                    : "stop_at";
  const std::string how = stopped_by != 0 ? "stopped by " + summary_.end_reason + " after step "
                                          : "finished at step ";
  log(how + std::to_string(step_) + " in " + format_duration(seconds_since(created_)) + " (training " +
      format_duration(train_seconds) + ", evals " + format_duration(eval_seconds_) + ", checkpoints " +
      format_duration(save_seconds_) + "); checkpoint " + summary_.checkpoint +
      (step_ < train_.max_steps ? " (run the same command to resume)" : ""));
  if (summary_.skipped_steps > 0)
    log("warning: " + std::to_string(summary_.skipped_steps) + " steps were skipped for a non-finite gradient norm");
  if (dist_.world_size() > 1) {
    const CollectiveStats& stats = dist_.stats();
    const double steps = static_cast<double>(std::max<int64_t>(1, stats.all_reduce_calls));
    summary_.all_reduce_seconds = stats.all_reduce_seconds;
    log("data-parallel: " + std::to_string(dist_.world_size()) + " ranks x " + std::to_string(get_num_threads()) +
        " threads; gradient all-reduce " + fixed(1e3 * stats.all_reduce_seconds / steps, 3) + " ms/step (" +
        fixed(100.0 * stats.all_reduce_seconds / std::max(train_seconds, 1e-9), 1) + "% of training time, " +
        fixed(static_cast<double>(stats.all_reduce_buckets) / steps, 1) + " buckets of <= " +
        std::to_string(dist_.bucket_bytes() >> 10) + " KiB per step, waits for the slowest rank included)");
  }
  return summary_;
}

}  // namespace

TrainSummary train(const Config& config, const TrainOptions& options) {
  Distributed& dist = Distributed::get();
  if (dist.world_size() == 1) {
    Run run(config, options);
    return run.run();
  }
  // A failure on one rank ends the job: its error names the rank, and MPI_Abort ends the other
  // ranks, which would otherwise wait forever in their next collective.
  try {
    Run run(config, options);
    return run.run();
  } catch (const ConfigError& e) {
    dist.abort(e.what(), 2);
  } catch (const std::exception& e) {
    dist.abort(e.what(), 1);
  }
}

}  // namespace lat
