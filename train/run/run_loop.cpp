// The training loop: steps with gradient accumulation, logs, evals, checkpoints, graceful
// stop (run.h; how a run starts is run_start.cpp).
#include "train/run/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>

#include "autograd/host_allocation_limit.h"
#include "lat/ops.h"
#include "lat/tape.h"
#include "train/config/thread_count.h"
#include "train/distributed/eval.h"
#include "train/files/run_dir.h"
#include "train/files/tokenizer_files.h"
#include "train/inference/task_eval.h"
#include "train/run/heap.h"
#include "train/run/signals.h"
#include "train/run/train_step.h"
#include "train/text/format.h"

namespace lat {
namespace {

double seconds_since(Run::Clock::time_point t) {
  return std::chrono::duration<double>(Run::Clock::now() - t).count();
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

// fail_step's hints: what usually causes a non-finite loss, and what makes a step too large.
const std::string kDivergedHint = "If training diverged, try a lower train.lr or train.grad_clip.";
const std::string kTooLargeHint =
    "One step needs more memory than this machine gives: make data.block_size, train.batch_size, "
    "model.vocab_size, model.d_model or model.n_layers smaller.";
const std::string kNoHint;

}  // namespace

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
  const InterruptibleSection compute("step " + std::to_string(step),
                                     "no checkpoint was written because the step was not finished; " +
                                         last_checkpoint_note());
  try {
    loss = accumulate_gradients(*model_, micro, tokens, device_);
  } catch (const HostMemoryError& e) {
    clear_tape();
    fail_step(step, e.what(), kTooLargeHint);
  } catch (const Error& e) {
    // Diverging weights can trip a kernel's input check (e.g. a NaN log-decay) before the
    // loss is computed: name the step and the checkpoint to go back to.
    clear_tape();
    fail_step(step, e.what(), kDivergedHint);
  }
  if (dist_.world_size() > 1) loss = all_reduce_gradients(step, loss);
  if (!std::isfinite(loss))
    fail_step(step, std::string("the training loss is ") + (std::isnan(loss) ? "nan" : "inf"), kDivergedHint);
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
                        " parameter elements, not the same as every other rank",
              kNoHint);
  dist_.all_reduce_sum(grads);
  return sums[0];
}

std::optional<std::string> Run::last_checkpoint() const {
  const int64_t last_saved = std::max(saved_step_, summary_.start_step);
  if (last_saved <= 0) return std::nullopt;
  return (out_dir_ / checkpoint_file_name(last_saved)).string();
}

std::string Run::last_checkpoint_note() const {
  const std::optional<std::string> last = last_checkpoint();
  return last ? "the last checkpoint stays: " + *last : std::string("this run has no checkpoint yet");
}

void Run::fail_step(int64_t step, const std::string& what, const std::string& hint) {
  optimizer_->zero_grad();
  const std::optional<std::string> last = last_checkpoint();
  throw Error("train: step " + std::to_string(step) + ": " + what + "; stopping. " +
              (last ? "The last good checkpoint is kept: " + *last : std::string("No checkpoint was written yet.")) +
              (hint.empty() ? "" : " (" + hint + ")"));
}

InterruptibleSection Run::eval_section(int64_t step) const {
  return InterruptibleSection("the eval after step " + std::to_string(step),
                              "no checkpoint of step " + std::to_string(step) +
                                  " was written because its eval was not finished; " + last_checkpoint_note());
}

void Run::periodic_eval(int64_t step) {
  const InterruptibleSection compute = eval_section(step);
  const auto t0 = Clock::now();
  EvalResult r = evaluate_val_batches(*model_, *loader_, train_.eval_batches, train_.batch_size, device_, dist_);
  val_loss_ = r.loss;
  best_val_loss_ = std::isnan(best_val_loss_) ? r.loss : std::min(best_val_loss_, r.loss);
  if (metrics_) metrics_->eval(step, r.loss);
  // Bits per character mean something for text; a synthetic task's loss is over answer tokens.
  const std::string bpc = data_ ? format_fixed(r.bpc(), 4) + " " + bits_unit() + ", " : "";
  log("step " + std::to_string(step) + ": val loss " + format_fixed(r.loss, 4) + " (" + bpc +
      std::to_string(train_.eval_batches) + " batches)");
  eval_seconds_ += seconds_since(t0);
}

std::string Run::bits_unit() const {
  // val_loss / ln 2 is bits per token: per character for char, per byte for byte; a subword
  // token or a token id of bin/h5 data is neither.
  return data_->tokenizer && !data_->tokenizer->subword_model() ? "bpc" : "bits per token";
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
      log("step " + std::to_string(step_) + ": answer accuracy " + format_fixed(a.accuracy(), 4) +
          ", sequence accuracy " + format_fixed(a.seq_accuracy(), 4) + " (" + std::to_string(a.answers) +
          " answers in the val batches)");
    }
    eval_seconds_ += seconds_since(t0);
    return;
  }
  const InterruptibleSection compute = eval_section(step_);
  const auto t0 = Clock::now();
  EvalResult r = evaluate_val_split(*model_, data_->dataset, train_.batch_size, device_, dist_);
  val_loss_ = r.loss;
  best_val_loss_ = std::isnan(best_val_loss_) ? r.loss : std::min(best_val_loss_, r.loss);
  summary_.val_loss = r.loss;
  // A subword token is no character: bits per byte compare it with other vocabularies.
  std::optional<double> bpb;
  if (data_->tokenizer && data_->tokenizer->subword_model()) {
    r.text_bytes = target_text_bytes(data_->dataset, Split::val, *data_->tokenizer);
    bpb = r.bits_per_byte();
  }
  if (metrics_) metrics_->eval(step_, r.loss, ValScope::whole_split, bpb);
  log("step " + std::to_string(step_) + ": val loss " + format_fixed(r.loss, 4) + " (" + format_fixed(r.bpc(), 4) +
      " " + bits_unit() + (bpb ? ", " + format_fixed(*bpb, 4) + " bits per byte" : std::string()) + ") on the whole val split (" +
      std::to_string(r.tokens) + " tokens, " + format_fixed(seconds_since(t0), 1) + " s)");
  eval_seconds_ += seconds_since(t0);
}

void Run::save(int64_t step) {
  const UninterruptibleSection write;
  const auto t0 = Clock::now();
  Checkpoint c;
  c.step = step;
  c.tokens_seen = tokens_seen_;
  c.val_loss = val_loss_;
  c.best_val_loss = best_val_loss_;
  c.world_size = dist_.world_size();
  c.frozen = frozen_;
  c.config_yaml = to_yaml(config_);
  set_checkpoint_tokenizer(c, data_ ? data_->tokenizer : std::nullopt);
  for (auto& [name, tensor] : model_->named_parameters()) c.model.emplace_back(name, tensor);
  optimizer_->save_to(c);
  c.rng_state = gen_.state();
  c.data = data_state(train_, step, loader_->sampler());
  const std::string name = checkpoint_file_name(step);
  if (dist_.is_root()) {
    // The run started from the newest checkpoint of out_dir (resume_checks.h), so one at this
    // step or above can only have come from elsewhere since: never replace it, never leave it
    // newer than `latest` for the pruning below.
    const auto existing = list_checkpoints(out_dir_.string()).checkpoints;
    if (!existing.empty() && existing.back().first >= step)
      throw Error("train: step " + std::to_string(step) + ": not writing " + (out_dir_ / name).string() +
                  ": train.out_dir already holds " + (out_dir_ / existing.back().second).string() + " (step " +
                  std::to_string(existing.back().first) + "), which lat never replaces or outdates; stopping");
    save_checkpoint((out_dir_ / name).string(), c);
    write_latest(out_dir_.string(), name);
    prune_checkpoints(out_dir_.string(), train_.keep_last);
  }
  saved_step_ = step;
  summary_.checkpoint = (out_dir_ / name).string();
  save_seconds_ += seconds_since(t0);
}

std::string Run::continue_hint() const {
  if (step_ >= train_.max_steps) return "";
  if (train_.stop_at > 0 && step_ >= train_.stop_at)
    return " (to continue, run the same command with train.stop_at raised or removed)";
  return " (run the same command to resume)";
}

void Run::log_end(int stopped_by, double train_seconds) {
  const std::string how = stopped_by != 0 ? "stopped by " + summary_.end_reason + " after step "
                                          : "finished at step ";
  log(how + std::to_string(step_) + " in " + format_duration(seconds_since(created_)) + " (training " +
      format_duration(train_seconds) + ", evals " + format_duration(eval_seconds_) + ", checkpoints " +
      format_duration(save_seconds_) + "); checkpoint " + summary_.checkpoint +
      continue_hint());
  if (summary_.skipped_steps > 0)
    log("warning: " + std::to_string(summary_.skipped_steps) + " steps were skipped for a non-finite gradient norm");
  if (dist_.world_size() > 1) {
    const CollectiveStats& stats = dist_.stats();
    const double steps = static_cast<double>(std::max<int64_t>(1, stats.all_reduce_calls));
    summary_.all_reduce_seconds = stats.all_reduce_seconds;
    log("data-parallel: " + std::to_string(dist_.world_size()) + " ranks x " + std::to_string(get_num_threads()) +
        " threads; gradient all-reduce " + format_fixed(1e3 * stats.all_reduce_seconds / steps, 3) + " ms/step (" +
        format_fixed(100.0 * stats.all_reduce_seconds / std::max(train_seconds, 1e-9), 1) + "% of training time, " +
        format_fixed(static_cast<double>(stats.all_reduce_buckets) / steps, 1) + " buckets of <= " +
        std::to_string(dist_.bucket_bytes() >> 10) + " KiB per step, waits for the slowest rank included)");
  }
}

TrainSummary Run::run() {
  keep_freed_memory();
  check_supported();
  // The whole run computes in it: training steps and evals, forward and backward.
  const PrecisionGuard precision(precision_);
  dist_.reset_stats();
  set_num_threads(training_threads(train_.threads, dist_.default_threads()));
  prepare(shared_resume_source());

  const int64_t end = end_step();
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
    const auto t0 = Clock::now();
    GradNorm norm;
    const double loss = train_step(step, lr, norm);
    const double dt = seconds_since(t0);
    step_ = step;
    window_seconds += dt;
    train_seconds += dt;
    // Throughput counts every input token of the step, whatever carries a loss (tokens_seen).
    window_tokens += train_.batch_size * train_.grad_accum * loader_->block_size();

    const bool log_step = step % train_.log_every == 0;
    const double tokens_per_s = window_seconds > 0 ? static_cast<double>(window_tokens) / window_seconds : 0.0;
    if (log_step) {
      if (metrics_) metrics_->log({step, loss, lr, norm.norm, tokens_seen_, tokens_per_s, seconds_since(start)});
      window_seconds = 0.0;
      window_tokens = 0;
    }
    const double eta = train_seconds / static_cast<double>(step - first_step + 1) * static_cast<double>(end - step);
    if (dist_.is_root()) progress_.update({step, train_.max_steps, loss, lr, norm.norm, tokens_per_s, eta}, log_step);

    // A signal may reach the ranks at different steps: all stop after the same one, and
    // after a stop request no eval runs.
    stopped_by = static_cast<int>(dist_.all_reduce_max(stop_signal()));
    if (train_.eval_every > 0 && step % train_.eval_every == 0 && step != train_.max_steps && stopped_by == 0)
      periodic_eval(step);
    if (train_.ckpt_every > 0 && step % train_.ckpt_every == 0 && step != end && stopped_by == 0) save(step);
    if (stopped_by != 0) break;
  }
  if (dist_.is_root()) progress_.finish();

  if (step_ == train_.max_steps && stopped_by == 0) final_eval();
  if (saved_step_ != step_) save(step_);
  summary_.step = step_;
  summary_.end_reason = stopped_by == SIGINT    ? "SIGINT"
                        : stopped_by == SIGTERM ? "SIGTERM"
                        : step_ == train_.max_steps ? "max_steps"
                                                    : "stop_at";
  log_end(stopped_by, train_seconds);
  return summary_;
}

}  // namespace lat
