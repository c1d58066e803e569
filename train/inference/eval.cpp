// Validation losses: sums of per-batch cross-entropy weighted by their target counts.
#include "train/inference/eval.h"

#include <cmath>
#include <filesystem>
#include <numbers>

#include "data/dataset.h"
#include "lat/ops.h"
#include "lat/tape.h"
#include "train/config/config.h"
#include "train/config/data_options.h"
#include "train/config/thread_count.h"
#include "train/files/trained_model.h"

namespace lat {

double EvalResult::bpc() const { return loss / std::numbers::ln2; }

double EvalResult::bits_per_byte() const {
  LAT_CHECK(text_bytes > 0, "EvalResult::bits_per_byte: no text bytes counted");
  return loss * static_cast<double>(tokens) / (std::numbers::ln2 * static_cast<double>(text_bytes));
}

int64_t target_text_bytes(const Dataset& dataset, Split split, const Tokenizer& tokenizer) {
  const int64_t begin = dataset.split_begin(split), end = begin + dataset.split_size(split);
  const int32_t* tokens = dataset.tokens().data();
  int64_t bytes = 0;
  // The targets' text run by run: [begin + 1, end) cut at each document start, a token that is
  // no target.
  int64_t run_begin = begin + 1;
  const auto add_run = [&](int64_t run_end) {
    if (run_begin < run_end)
      bytes += static_cast<int64_t>(tokenizer.decode(std::vector<int64_t>(tokens + run_begin, tokens + run_end)).size());
  };
  if (dataset.documents()) {
    for (int64_t start : dataset.documents()->starts_in(begin, end - 1)) {
      add_run(start);
      run_begin = start + 1;
    }
  }
  add_run(end);
  return bytes;
}

double batch_loss_sum(const HybridLM& model, const Batch& batch, Device device) {
  if (batch.tokens == 0) return 0.0;
  NoGradGuard no_grad;
  Tensor logits = model.forward(batch.inputs.to(device), batch.cu_seqlens);
  const int64_t V = logits.size(-1);
  Tensor loss = cross_entropy(logits.reshape({-1, V}), batch.targets.to(device).reshape({-1}), kIgnoreIndex);
  return loss.item() * static_cast<double>(batch.tokens);
}

EvalResult evaluate_val_batches(const HybridLM& model, const BatchLoader& loader, int64_t batches,
                                int64_t batch_size, Device device) {
  LAT_CHECK(batches >= 1, "evaluate_val_batches: batches: expected >= 1, got " << batches);
  double sum = 0.0;
  EvalResult r;
  for (int64_t i = 0; i < batches; ++i) {
    Batch b = loader.eval_batch(i, batch_size);
    sum += batch_loss_sum(model, b, device);
    r.tokens += b.tokens;
  }
  r.loss = sum / static_cast<double>(r.tokens);
  return r;
}

EvalResult evaluate_val_split(const HybridLM& model, const Dataset& dataset, int64_t batch_size, Device device) {
  SequentialEval windows(dataset, batch_size);
  double sum = 0.0;
  EvalResult r;
  for (int64_t i = 0; i < windows.num_batches(); ++i) {
    Batch b = windows.batch(i);
    sum += batch_loss_sum(model, b, device);
    r.tokens += b.tokens;
  }
  r.loss = sum / static_cast<double>(r.tokens);
  return r;
}

CheckpointEval evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path, int threads) {
  TrainedModel trained = load_trained_model(checkpoint);
  const Config& config = trained.config;
  if (data_path.empty() && config.data.task != "none")
    throw ConfigError("eval: '" + trained.path + "' was trained on the synthetic task data.task: " + config.data.task +
                      ", which has no val split: evaluate it with --task " + config.data.task);
  set_num_threads(inference_threads(threads));
  DataOptions options = data_options(config);
  options.vocab_size = trained.model->vocab_size();
  std::error_code ec;
  if (data_path.empty() && !std::filesystem::exists(options.path, ec)) {
    // A Hugging Face directory's config stands in "(none: ...)" for the path it never had.
    const bool has_none = options.path.rfind("(none", 0) == 0;
    throw ConfigError("eval: '" + trained.path + "'" +
                      (has_none ? " names no training data" : ": its data.path '" + options.path + "' does not exist") +
                      ": give the text to evaluate with --data FILE");
  }
  if (!data_path.empty()) {
    options.path = data_path;
    // Ids must mean what they meant in training: text goes through the checkpoint's own
    // tokenizer, token files only fit a model trained on token ids.
    options.format = resolve_format(options.path, "auto");  // load_data need not detect it again
    const std::string& format = options.format;
    if (format == "text" && !trained.tokenizer)
      throw ConfigError("eval: --data: '" + options.path + "' is text, but '" + trained.path +
                        "' was trained on token ids (no tokenizer): give a .bin or .h5 token file");
    if (format != "text" && trained.tokenizer)
      throw ConfigError("eval: --data: '" + options.path + "' holds token ids (" + format + "), but '" +
                        trained.path + "' was trained on text with a " + trained.tokenizer->type() +
                        " tokenizer: give a text file");
  }
  // A run directory's token cache (written by lat train) spares encoding its text again.
  const bool subword = trained.tokenizer && trained.tokenizer->subword_model();
  const std::string run_dir = std::filesystem::path(trained.path).parent_path().string();
  LoadedData data = load_data(options, trained.tokenizer, subword && !run_dir.empty() ? run_dir : std::string());
  CheckpointEval e;
  e.checkpoint = trained.path;
  e.step = trained.step;
  e.data_path = options.path;
  e.result = evaluate_val_split(*trained.model, data.dataset, config.train.batch_size, Device::cpu());
  if (data.tokenizer && data.tokenizer->subword_model())
    e.result.text_bytes = target_text_bytes(data.dataset, Split::val, *data.tokenizer);
  // Finite weights can still overflow the logits (e.g. 3e38): no loss to report then.
  if (!std::isfinite(e.result.loss))
    throw Error("eval: '" + trained.path + "': the loss on '" + options.path + "' is " + std::to_string(e.result.loss) +
                ": the model's outputs overflow (a diverged or damaged checkpoint)");
  return e;
}

}  // namespace lat
