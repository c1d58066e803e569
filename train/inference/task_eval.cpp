// Greedy answer accuracy on synthetic tasks.
#include "train/inference/task_eval.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "lat/ops.h"
#include "lat/tape.h"
#include "train/config/config.h"
#include "train/config/thread_count.h"
#include "train/files/trained_model.h"

namespace lat {

double AnswerAccuracy::accuracy() const {
  return answers > 0 ? static_cast<double>(correct) / static_cast<double>(answers) : 0.0;
}

double AnswerAccuracy::seq_accuracy() const {
  return sequences > 0 ? static_cast<double>(sequences_correct) / static_cast<double>(sequences) : 0.0;
}

AnswerAccuracy& AnswerAccuracy::operator+=(const AnswerAccuracy& other) {
  answers += other.answers;
  correct += other.correct;
  sequences += other.sequences;
  sequences_correct += other.sequences_correct;
  return *this;
}

AnswerAccuracy score_answers(const Tensor& logits, const Tensor& targets) {
  LAT_CHECK(logits.dim() == 3 && logits.dtype() == DType::f32,
            "score_answers: logits: expected f32 [B, T, V], got " << dtype_name(logits.dtype()) << " "
                                                                  << shape_str(logits.shape()));
  LAT_CHECK(targets.dtype() == DType::i64 && targets.dim() == 2 && targets.size(0) == logits.size(0) &&
                targets.size(1) == logits.size(1),
            "score_answers: targets: expected i64 [" << logits.size(0) << ", " << logits.size(1) << "], got "
                                                     << dtype_name(targets.dtype()) << " "
                                                     << shape_str(targets.shape()));
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  const Tensor host_logits = logits.to(Device::cpu());
  const Tensor host_targets = targets.to(Device::cpu());
  const float* x = host_logits.data<float>();
  const int64_t* y = host_targets.data<int64_t>();
  AnswerAccuracy a;
  for (int64_t b = 0; b < B; ++b) {
    int64_t answers = 0, correct = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t target = y[b * T + t];
      if (target == kIgnoreIndex) continue;
      const float* row = x + (b * T + t) * V;
      const int64_t predicted = std::max_element(row, row + V) - row;  // the first largest
      ++answers;
      correct += predicted == target;
    }
    if (answers == 0) continue;
    a.answers += answers;
    a.correct += correct;
    ++a.sequences;
    a.sequences_correct += correct == answers;
  }
  return a;
}

AnswerAccuracy val_accuracy(const HybridLM& model, const BatchLoader& loader, int64_t samples, int64_t batch_size,
                            Device device) {
  LAT_CHECK(samples >= 1, "val_accuracy: samples: expected >= 1, got " << samples);
  LAT_CHECK(batch_size >= 1, "val_accuracy: batch_size: expected >= 1, got " << batch_size);
  NoGradGuard no_grad;
  AnswerAccuracy total;
  for (int64_t index = 0; index * batch_size < samples; ++index) {
    const Batch b = loader.eval_batch(index, std::min(batch_size, samples - index * batch_size));
    total += score_answers(model.forward(b.inputs.to(device)), b.targets);
  }
  return total;
}

std::string TaskEval::line() const {
  char text[256];
  std::snprintf(text, sizeof text, "task=%s %s=%lld seq_len=%lld samples=%lld accuracy=%.4f seq_accuracy=%.4f",
                task.c_str(), task == "mqar" ? "pairs" : "length", static_cast<long long>(size),
                static_cast<long long>(seq_len), static_cast<long long>(samples), result.accuracy(),
                result.seq_accuracy());
  return text;
}

std::string TaskEval::json() const {
  nlohmann::ordered_json j;
  j["task"] = task;
  j[task == "mqar" ? "pairs" : "length"] = size;
  j["seq_len"] = seq_len;
  j["samples"] = samples;
  j["accuracy"] = result.accuracy();
  j["seq_accuracy"] = result.seq_accuracy();
  return j.dump();
}

TaskEval evaluate_task(const TaskEvalOptions& options) {
  if (options.task != "mqar" && options.task != "copy")
    throw ConfigError("eval: --task: expected mqar or copy, got '" + options.task + "'");
  const bool mqar = options.task == "mqar";
  if (!mqar && options.pairs != 0)
    throw ConfigError("eval: --pairs: applies to --task mqar only (copy takes --length)");
  if (mqar && options.length != 0)
    throw ConfigError("eval: --length: applies to --task copy only (mqar takes --pairs)");
  if (options.samples < 1) throw ConfigError("eval: --samples: expected >= 1, got " + std::to_string(options.samples));

  TrainedModel trained = load_trained_model(options.checkpoint);
  const Config& config = trained.config;
  set_num_threads(inference_threads(options.threads));
  const int64_t seq_len = options.seq_len > 0 ? options.seq_len : config.data.block_size;
  MqarOptions mqar_options = config.data.mqar;
  CopyOptions copy_options = config.data.copy;
  int64_t size = 0;
  if (mqar) {
    size = options.pairs > 0 ? options.pairs : *std::max_element(mqar_options.pairs.begin(), mqar_options.pairs.end());
    const int64_t most = mqar_max_pairs(mqar_options.vocab, seq_len);
    if (size > most)
      throw ConfigError("eval: --pairs: " + std::to_string(size) + " pairs do not fit --seq-len " +
                        std::to_string(seq_len) + " with the checkpoint's data.mqar.vocab " +
                        std::to_string(mqar_options.vocab) + ": at most " + std::to_string(most) +
                        " (4 * pairs <= seq_len)");
    mqar_options.pairs = {size};
  } else {
    size = options.length > 0 ? options.length : copy_options.length;
    if (size > copy_max_length(seq_len))
      throw ConfigError("eval: --length: a string of " + std::to_string(size) + " tokens does not fit --seq-len " +
                        std::to_string(seq_len) + ": at most " + std::to_string(copy_max_length(seq_len)) +
                        " (2 * length <= seq_len)");
    copy_options.length = size;
  }
  const SyntheticTask task = SyntheticTask::named(options.task, mqar_options, copy_options, seq_len);
  if (task.vocab_size() > trained.model->vocab_size())
    throw ConfigError("eval: --task " + options.task + ": its " + std::to_string(task.vocab_size()) +
                      " token ids exceed the vocabulary of '" + trained.path + "' (" +
                      std::to_string(trained.model->vocab_size()) + ")");

  const BatchLoader loader(task, options.seed);
  TaskEval e;
  e.checkpoint = trained.path;
  e.step = trained.step;
  e.task = options.task;
  e.size = size;
  e.seq_len = seq_len;
  e.samples = options.samples;
  e.result = val_accuracy(*trained.model, loader, options.samples, config.train.batch_size, Device::cpu());
  return e;
}

}  // namespace lat
