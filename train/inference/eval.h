// Validation loss of a HybridLM: on a few random val batches (periodic evals during
// training) or on the whole val split (the end of a run, `lat eval`).
#pragma once
#include <cstdint>
#include <string>

#include "data/loader.h"
#include "layers/hybrid_lm.h"

namespace lat {

/// A token-weighted mean loss and the number of targets it covers.
struct EvalResult {
  double loss = 0.0;       // mean cross-entropy per target, nats
  int64_t tokens = 0;      // targets scored
  int64_t text_bytes = 0;  // UTF-8 bytes of the targets' text (target_text_bytes); 0 when not counted
  /// Bits per token (per character with the char tokenizer): loss / ln 2.
  double bpc() const;
  /// Bits per byte of the targets' text: loss x tokens / (ln 2 x text_bytes), the measure that
  /// compares models with different tokenizers. Needs text_bytes > 0.
  double bits_per_byte() const;
};

/// The UTF-8 bytes of the text of the targets of `split`: its tokens after the first, less
/// (packed) each document's first token, decoded by `tokenizer` run by run (a subword token's
/// text may depend on its neighbours, so runs are decoded whole, not token by token).
int64_t target_text_bytes(const Dataset& dataset, Split split, const Tokenizer& tokenizer);

/// The summed cross-entropy (nats) of `batch` under `model` (no tape), on `device`.
double batch_loss_sum(const HybridLM& model, const Batch& batch, Device device);

/// Mean loss over val batches 0 .. batches-1 of `loader` (BatchLoader::eval_batch: the same
/// windows at every eval), `batch_size` rows each. Throws lat::Error when batches < 1.
EvalResult evaluate_val_batches(const HybridLM& model, const BatchLoader& loader, int64_t batches,
                                int64_t batch_size, Device device);

/// Mean loss over the whole val split of `dataset`, cut into consecutive block_size windows
/// (SequentialEval): every val token after the first is a target exactly once.
EvalResult evaluate_val_split(const HybridLM& model, const Dataset& dataset, int64_t batch_size, Device device);

/// What `lat eval` reports.
struct CheckpointEval {
  std::string checkpoint;  // the file read
  int64_t step = 0;
  std::string data_path;
  EvalResult result;
};

/// `lat eval`: the loss (and, with a subword tokenizer, the text bytes of its targets) of a
/// checkpoint (.h5 or run directory) on the whole val split of its data (data.path, or
/// `data_path` when not empty; split and block size from its config; text encoded with the
/// checkpoint's tokenizer, a subword tokenizer's ids read from the token cache beside the
/// checkpoint when it holds this text's), on the CPU with `threads` threads (--threads; 0 =
/// OMP_NUM_THREADS, else all cores: config/thread_count.h, inference_threads). Throws
/// ConfigError when `data_path` does not fit the checkpoint: text for a model trained on token
/// ids, or a token file for a model trained on text, or a bad OMP_NUM_THREADS; lat::Error when
/// the loss is not finite.
CheckpointEval evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path = "",
                                   int threads = 0);

}  // namespace lat
