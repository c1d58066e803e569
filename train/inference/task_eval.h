// Recall accuracy on a synthetic task (data/synthetic_tasks.h): `lat eval --task` and the end
// of a run trained on one. An answer is right when the greedy prediction (the argmax of its
// logits) is its target; a sequence is right when all of its answers are.
#pragma once
#include <cstdint>
#include <string>

#include "data/loader.h"
#include "data/synthetic_tasks.h"
#include "layers/hybrid_lm.h"

namespace lat {

/// Answers and sequences scored, and how many were right.
struct AnswerAccuracy {
  int64_t answers = 0;            ///< targets that are not kIgnoreIndex
  int64_t correct = 0;            ///< answers whose argmax is the target
  int64_t sequences = 0;          ///< rows with at least one answer
  int64_t sequences_correct = 0;  ///< rows with every answer right
  /// correct / answers, in [0, 1]; 0 when nothing was scored.
  double accuracy() const;
  /// sequences_correct / sequences, in [0, 1]; 0 when nothing was scored.
  double seq_accuracy() const;
  AnswerAccuracy& operator+=(const AnswerAccuracy& other);
};

/// Scores `logits` [B, T, V] (f32, any device) against `targets` [B, T] (i64): the
/// prediction at (b, t) is the first index of the largest logit. Rows without answers are
/// not counted as sequences. Throws lat::Error on other shapes or dtypes.
AnswerAccuracy score_answers(const Tensor& logits, const Tensor& targets);

/// The accuracy of `model` (no tape, on `device`) on the first `samples` rows of the val
/// batches of `loader` (BatchLoader::eval_batch 0, 1, ..., `batch_size` rows each; the last
/// one cut to what is left). Throws lat::Error when samples < 1 or batch_size < 1.
AnswerAccuracy val_accuracy(const HybridLM& model, const BatchLoader& loader, int64_t samples, int64_t batch_size,
                            Device device);

/// `lat eval --task`: what to evaluate. 0 = from the checkpoint's config.
struct TaskEvalOptions {
  std::string checkpoint;  ///< what --checkpoint accepts (train/files/trained_model.h: load_trained_model)
  std::string task;        ///< mqar or copy
  int64_t pairs = 0;       ///< mqar only; 0 = the largest entry of data.mqar.pairs
  int64_t length = 0;      ///< copy only; 0 = data.copy.length
  int64_t seq_len = 0;     ///< 0 = data.block_size
  int64_t samples = 1000;  ///< sequences scored
  uint64_t seed = 0;       ///< the sequences are those of BatchLoader(task, seed)'s val batches
  int threads = 0;         ///< --threads; 0 = OMP_NUM_THREADS, else all cores (inference_threads)
};

/// What `lat eval --task` reports.
struct TaskEval {
  std::string checkpoint;  ///< the file read
  int64_t step = 0;
  std::string task;
  int64_t size = 0;        ///< pairs (mqar) or string length (copy)
  int64_t seq_len = 0;
  int64_t samples = 0;
  AnswerAccuracy result;
  /// "task=mqar pairs=N seq_len=T samples=S accuracy=A seq_accuracy=B" ("length=L" for copy),
  /// accuracies with 4 decimals.
  std::string line() const;
  /// The same fields as one JSON object (accuracies as full doubles).
  std::string json() const;
};

/// Loads the checkpoint and scores it on `options.samples` sequences of the task (mqar:
/// data.mqar.vocab and alpha of the checkpoint's config), on the CPU with all its cores.
/// Throws ConfigError naming the option: an unknown task, --pairs with copy or --length with
/// mqar, a size that does not fit seq_len, samples < 1, or a task vocabulary larger than the
/// model's. Throws lat::Error when the checkpoint cannot be read.
TaskEval evaluate_task(const TaskEvalOptions& options);

}  // namespace lat
