// How a run starts: fresh, resumed from its own checkpoint, or fine-tuned from another
// model's weights (run.h). Everything that can fail is read before out_dir is touched.
#include "train/run/run.h"

#include <sstream>

#include "autograd/host_allocation_limit.h"
#include "lat/ops.h"
#include "train/config/data_options.h"
#include "train/config/model_config.h"
#include "train/distributed/nccl.h"
#include "train/files/atomic_file.h"
#include "train/files/run_dir.h"
#include "train/files/tokenizer_files.h"
#include "train/files/trained_model.h"
#include "train/run/device.h"
#include "train/run/memory_estimate.h"
#include "train/run/resume_checks.h"
#include "train/run/wait_policy.h"
#include "train/text/format.h"

namespace fs = std::filesystem;

namespace lat {

Run::Run(const Config& config, const TrainOptions& options)
    : created_(Clock::now()),
      config_(config),
      train_(config_.train),
      progress_(options.live_progress ? ProgressLine(options.log, *options.live_progress) : ProgressLine(options.log)),
      out_dir_(train_.out_dir),
      gen_(static_cast<uint64_t>(train_.seed)),
      dist_(Distributed::get()) {}

void Run::check_supported() {
  device_ = parse_device(train_.device);
  const Precision requested = parse_precision(train_.precision);
  precision_ = effective_precision(requested, device_);
  if (precision_ != requested)
    log("warning: train.precision: " + device_.str() + " has no bf16 matrix products (" +
        (device_.is_cpu() ? "AVX512-BF16, or DNNL_MAX_CPU_ISA caps oneDNN below it" : "compute capability 8.0") +
        "): training in fp32");
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

std::optional<std::string> Run::resume_source() {
  const std::string& resume = train_.resume;
  const WarningSink warn = [this](const std::string& line) { log("warning: " + line); };
  if (resume != "auto" && resume != "never") return resolve_checkpoint(resume, warn);
  std::error_code ec;
  if (!fs::is_directory(out_dir_, ec)) return std::nullopt;
  // Before `latest` and the checkpoints are read: a run writing here meanwhile would make
  // them disagree, and the refusal would then blame the files instead of the other run.
  out_dir_lock_.emplace(out_dir_.string());
  std::optional<std::string> latest = find_latest_checkpoint(out_dir_.string(), warn);
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

void Run::prepare(const std::optional<std::string>& resume_path) {
  check_out_dir();
  std::optional<ResumeCheckpoint> resume;
  std::optional<Tokenizer> tokenizer;
  if (resume_path) {
    resume = read_resume_checkpoint(*resume_path);
    tokenizer = checkpoint_tokenizer(resume->ckpt);
  }
  // Fine-tuning starts from another model's weights, and encodes its text with that model's
  // tokenizer so that ids keep their meaning (a synthetic task has ids and no tokenizer). A
  // run that resumes has its own checkpoint.
  std::optional<ModelWeights> init;
  if (!resume_path && !config_.init_from.empty()) {
    init = load_model_weights(config_.init_from);
    if (config_.data.task == "none")
      tokenizer = config_.data.tokenizer == config_.init_from
                      ? init_model_tokenizer(init->checkpoint, config_.data, config_.init_from_strict)
                      : finetune_tokenizer(init->checkpoint, config_.data, config_.init_from_strict);
  }
  if (!tokenizer && config_.data.task == "none") tokenizer = tokenizer_from_file();
  const int64_t vocab_size = resume_path ? load_resume_data(tokenizer, *resume_path) : load_training_data(tokenizer);
  // Before the model's pages are touched: a step that cannot fit is refused here, not after
  // minutes of swapping or in the out-of-memory killer.
  step_memory_ = estimate_step_memory(config_, vocab_size, rows_.end - rows_.begin);
  if (device_.is_cpu()) check_step_memory(config_, step_memory_, vocab_size, static_cast<double>(host_physical_memory()));
  const ModelSetup setup = build_model(vocab_size, init);
  if (resume) restore(*resume, *resume_path);
  // The ranks start bit-identical whatever their own initialization or reads gave.
  if (dist_.world_size() > 1) broadcast_state();
  move_parameters(*model_, device_);
  summary_.start_step = step_;
  // Only now, with the checkpoint read and checked whole, may out_dir change (metrics.jsonl
  // trimmed to its step, stale files removed); a finished run changes nothing.
  const bool writes = dist_.is_root() && step_ < end_step();
  if (writes) open_out_dir();
  log_start(resume_path, vocab_size, setup);
  if (writes && data_ && data_->token_cache) write_token_cache_file(*data_->token_cache);
  // The starting point of a fine-tuning run, so that metrics.jsonl shows the val loss moving.
  if (init) periodic_eval(0);
}

void Run::check_out_dir() const {
  std::error_code ec;
  if (fs::exists(out_dir_, ec) && !fs::is_directory(out_dir_, ec))
    throw ConfigError("train.out_dir: '" + out_dir_.string() +
                      "' exists and is not a directory (expected a run directory, or a path to create)");
}

Run::ResumeCheckpoint Run::read_resume_checkpoint(const std::string& path) const {
  Checkpoint ckpt = load_checkpoint(path);
  check_resume_counters(ckpt, path);
  // Rank 0's out_dir is the one written to (the other ranks may not see it).
  if (dist_.is_root()) {
    const bool named_by_user = train_.resume != "auto" && train_.resume != "never";
    check_no_newer_checkpoint(ckpt.step, path, out_dir_.string(), named_by_user);
  }
  const Config saved = parse_config(ckpt.config_yaml, path);
  check_resume_consistency(ckpt, saved.train, path);
  const std::vector<std::string> keys = resume_incompatible_keys(saved, config_);
  if (!keys.empty())
    throw ConfigError("resume: " + path + " was trained with another config; these keys may not change " +
                      "on resume: " + join(keys, ", ") +
                      " (restore them, or start a new run with another train.out_dir)");
  return {std::move(ckpt), saved.train};
}

std::optional<Tokenizer> Run::tokenizer_from_file() const {
  const std::string& spec = config_.data.tokenizer;
  if (spec == "char" || spec == "byte") return std::nullopt;  // built from the text by load_data
  if (spec == config_.init_from) return std::nullopt;         // init_model_tokenizer's, or none for token ids
  std::optional<Tokenizer> tokenizer;
  try {
    tokenizer = read_tokenizer_file(spec, "data.tokenizer");
  } catch (const Error& e) {
    throw ConfigError(e.what());  // names the key and the file already
  }
  if (!tokenizer)
    throw ConfigError("data.tokenizer: '" + spec + "' describes no tokenizer (type none: a model trained on token ids)");
  return tokenizer;
}

int64_t Run::end_step() const {
  return train_.stop_at > 0 ? std::min(train_.stop_at, train_.max_steps) : train_.max_steps;
}

int64_t Run::load_resume_data(const std::optional<Tokenizer>& tokenizer, const std::string& path) {
  try {
    return load_training_data(tokenizer);
  } catch (const ConfigError&) {
    throw;  // a data.* key of the config, named already
  } catch (const Error& e) {
    // The text may hold a character the checkpoint's tokenizer lacks: say which model it is.
    const std::string with = tokenizer ? " with the checkpoint's " + tokenizer->type() + " tokenizer" : "";
    throw Error("resume: '" + path + "': reading data.path '" + config_.data.path + "'" + with + ": " + e.what());
  }
}

int64_t Run::load_training_data(const std::optional<Tokenizer>& tokenizer) {
  if (config_.data.task != "none") {
    const SyntheticTask task = synthetic_task(config_);
    loader_ = std::make_unique<BatchLoader>(task, static_cast<uint64_t>(train_.seed));
    return config_.model.vocab_size > 0 ? config_.model.vocab_size : task.vocab_size();
  }
  // Subword encoding is what takes time (char and byte ids are a pass over the bytes): its ids
  // are cached in out_dir. Only rank 0 writes the cache; every rank reads it when it is there.
  const bool cached = tokenizer && tokenizer->subword_model() != nullptr;
  data_.emplace(load_data(data_options(config_), tokenizer, cached ? out_dir_.string() : std::string()));
  loader_ = std::make_unique<BatchLoader>(data_->dataset, static_cast<uint64_t>(train_.seed));
  return run_vocab_size(config_.model, *data_);
}

Run::ModelSetup Run::build_model(int64_t vocab_size, const std::optional<ModelWeights>& init) {
  ModelSetup setup;
  {
    // Training holds the parameters, their gradients and two optimizer moments: parameters
    // beyond a quarter of the memory cannot train, and are refused before pages are touched.
    const HostAllocationLimit limit(host_physical_memory() / 4, "model: the parameters");
    try {
      model_ = std::make_unique<HybridLM>(hybrid_lm_config(config_.model, vocab_size), gen_);
    } catch (const AllocationLimitError& e) {
      throw ConfigError(std::string(e.what()) + "; training keeps them, their gradients and two optimizer moments, " +
                        "so they must fit in a quarter of this machine's memory: make model.d_model, " +
                        "model.n_layers or model.mlp_ratio smaller");
    }
  }
  if (init) {
    try {
      setup.init_report = init_from_weights(*model_, *init, config_.init_from_strict);
    } catch (const Error& e) {
      // The shapes alone do not say which key to change: name the model.* keys that differ,
      // first, since a model of another layout lists dozens of tensors.
      const std::vector<std::string> differ = model_keys_differing(init->config, config_);
      if (differ.empty()) throw;
      throw Error("init_from '" + config_.init_from + "': model.* keys that differ from this run's: " +
                  join(differ, ", ") + " (`lat info " + config_.init_from + "` prints its model keys); " + e.what());
    }
  }
  // Frozen parameters keep no gradient and get no optimizer state.
  frozen_ = frozen_names(model_->named_parameters(), config_.freeze);
  const std::vector<NamedTensor> trainable = freeze_parameters(model_->named_parameters(), frozen_);
  setup.trainable = trainable.size();
  optimizer_ = std::make_unique<TrainOptimizer>(train_, trainable);
  const std::vector<std::pair<std::string, double>> lr_mults = lr_multipliers(trainable, config_.lr_mult);
  for (const auto& [name, mult] : lr_mults) optimizer_->set_lr_mult(name, mult);
  setup.lr_mults = lr_mults.size();
  schedule_ = LrSchedule{train_.schedule, train_.lr, train_.min_lr, train_.warmup, train_.max_steps};
  schedule_.validate();
  return setup;
}

void Run::restore(const ResumeCheckpoint& resume, const std::string& path) {
  const Checkpoint& ckpt = resume.ckpt;
  load_weights(*model_, ckpt.model, path);
  if (ckpt.optimizer.type == optimizer_->type())
    optimizer_->load_from(ckpt, resume.writer, path);
  else
    log("warning: " + path + " holds " + (ckpt.optimizer.type.empty() ? "no" : ckpt.optimizer.type) +
        " optimizer state; " + optimizer_->type() + " starts from fresh state");
  try {
    gen_.set_state(ckpt.rng_state);
  } catch (const Error& e) {
    throw ConfigError("resume: '" + path + "': /rng: " + e.what() +
                      " (a damaged checkpoint; nothing in train.out_dir was changed)");
  }
  if (ckpt.data.state != loader_->sampler())
    log("warning: " + path + " was written with data sampler '" + ckpt.data.state + "', this lat uses '" +
        loader_->sampler() + "': the batches after the resume differ from an uninterrupted run");
  if (ckpt.world_size != dist_.world_size())
    log("warning: " + path + " was written by " + std::to_string(ckpt.world_size) + " ranks, now " +
        std::to_string(dist_.world_size()) + ": the global batch (train.batch_size x grad_accum) and so the data " +
        "order are kept, but sums are grouped differently, so the run differs from an uninterrupted one by rounding");
  step_ = ckpt.step;
  tokens_seen_ = ckpt.tokens_seen;
  val_loss_ = ckpt.val_loss;
  best_val_loss_ = ckpt.best_val_loss;
}

void Run::broadcast_state() {
  std::vector<Tensor> tensors;
  for (auto& [name, tensor] : model_->named_parameters()) tensors.push_back(tensor);
  for (auto& param : optimizer_->snapshot().params)
    for (auto& [buffer, tensor] : param.buffers) tensors.push_back(tensor);
  dist_.broadcast(tensors);
}

void Run::open_out_dir() {
  std::error_code ec;
  fs::create_directories(out_dir_, ec);
  LAT_CHECK(!ec, "train.out_dir: cannot create '" << out_dir_.string() << "': " << ec.message());
  if (!out_dir_lock_) out_dir_lock_.emplace(out_dir_.string());  // before anything in out_dir changes
  for (const std::string& name : clean_stale_tmp(out_dir_.string())) log("removed stale " + name);
  const fs::path metrics_path = out_dir_ / "metrics.jsonl";
  const int64_t dropped = truncate_metrics(metrics_path.string(), step_);
  if (dropped > 0)
    log("metrics.jsonl: dropped " + std::to_string(dropped) + " records after step " + std::to_string(step_));
  write_text_atomically((out_dir_ / "config.yaml").string(), to_yaml(config_), "train");
  metrics_ = std::make_unique<MetricsWriter>(metrics_path.string());
}

void Run::write_token_cache_file(const TokenCacheLookup& cache) {
  if (cache.reused) {
    log("token cache: read " + std::to_string(data_->dataset.size()) + " tokens from " + cache.path);
    return;
  }
  if (!cache.note.empty()) log("token cache: " + cache.note + ": encoded the text again");
  write_file_atomically(
      cache.path, [&](std::ostream& out) { write_token_cache(out, cache.key, data_->dataset.tokens()); }, "train");
  std::error_code ec;
  for (const std::string& stale : cache.stale) std::filesystem::remove(stale, ec);
  log("token cache: wrote " + cache.path + " (" + std::to_string(data_->dataset.size()) + " tokens)");
}

void Run::log_start(const std::optional<std::string>& resume_path, int64_t vocab_size, const ModelSetup& setup) {
  log("lat train: " + (resume_path ? "resuming from " + *resume_path + " at step " + std::to_string(step_)
                                   : std::string("fresh run")) +
      ", out_dir " + out_dir_.string());
  if (data_) {
    const Dataset& dataset = data_->dataset;
    const int64_t n_train = dataset.split_size(Split::train), n_val = dataset.split_size(Split::val);
    const std::string packing = dataset.documents()
                                    ? "packing on: " + std::to_string(dataset.documents()->num_documents()) +
                                          " documents ending at " + describe_doc_separator(config_.data.doc_separator)
                                    : std::string("packing off");
    log("data: " + config_.data.path + " (" + data_->format +
        (data_->tokenizer ? ", " + data_->tokenizer->type() + " tokenizer" : std::string()) + ", vocab " +
        std::to_string(vocab_size) + "): " + std::to_string(n_train) + " train / " + std::to_string(n_val) +
        " val tokens, block " + std::to_string(config_.data.block_size) + ", " + packing);
  } else {
    log("data: synthetic task " + synthetic_task(config_).describe() + ", sequences of " +
        std::to_string(config_.data.block_size) + " tokens generated from train.seed, vocab " +
        std::to_string(vocab_size));
  }
  log("model: " + std::to_string(model_->n_layers()) + " layers (" + join(model_->config().layers, ",") +
      "), d_model " + std::to_string(config_.model.d_model) + ", " + std::to_string(config_.model.n_heads) +
      " heads: " + format_fixed(static_cast<double>(model_->num_parameters()) / 1e6, 3) + "M parameters");
  log("optimizer: " + optimizer_->type() + ", lr " + format_significant(train_.lr) + " (" + train_.schedule +
      ", warmup " + std::to_string(train_.warmup) + ", min " + format_significant(train_.min_lr) + "), batch " +
      std::to_string(train_.batch_size) + " x " + std::to_string(train_.grad_accum) + " x " +
      std::to_string(config_.data.block_size) + " tokens, " + std::to_string(get_num_threads()) + " threads, " +
      device_.str() + ", precision " + precision_name(precision_) +
      (dist_.world_size() > 1 ? " (per rank; " + std::to_string(dist_.world_size()) + " ranks, " +
                                    std::to_string(rows_.end - rows_.begin) + " sequences each per micro-batch)"
                              : std::string()));
  if (device_.is_cpu())
    log("memory: one step needs about " + format_fixed(step_memory_.total() / double(int64_t{1} << 30), 2) +
        " GiB (estimate; this machine has " +
        format_fixed(static_cast<double>(host_physical_memory()) / double(int64_t{1} << 30), 1) + " GiB)");
  if (!chosen_wait_policy_note().empty()) log(chosen_wait_policy_note());
  std::istringstream groups(optimizer_->describe_groups());
  for (std::string line; std::getline(groups, line);) log("  " + line);
  if (setup.init_report) log(setup.init_report->describe());
  if (!frozen_.empty())
    log("frozen: " + std::to_string(frozen_.size()) + " parameters (" + join(config_.freeze, ", ") + "), " +
        std::to_string(setup.trainable) + " trainable");
  for (const auto& [pattern, mult] : config_.lr_mult) log("lr_mult: " + pattern + " x" + format_fixed(mult, 4));
  if (setup.lr_mults > 0) log("lr_mult: applies to " + std::to_string(setup.lr_mults) + " parameters");
}

}  // namespace lat
