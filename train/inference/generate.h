// `lat generate`: sampling a continuation of a prompt from a trained model, token by token,
// with each layer's generation state (KV cache for attention layers, recurrent state for
// linear layers): the prompt is fed once, then one token per step.
#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "layers/hybrid_lm.h"
#include "train/inference/sampling.h"

namespace lat {

/// Feeds `prompt` (at least one id) to `model`, then samples `max_new_tokens` ids, calling
/// `on_token` with each as soon as it is drawn, each below sampling.drawable_ids when that is
/// set. Returns the new ids. Deterministic for a given generator state. Throws ForwardOverflow
/// (finite_logits.h) when the logits a token is drawn from are not all finite.
std::vector<int64_t> generate_tokens(const HybridLM& model, const std::vector<int64_t>& prompt,
                                     int64_t max_new_tokens, const SamplingOptions& sampling, Generator& gen,
                                     const std::function<void(int64_t)>& on_token = {});

/// `lat generate`'s flags.
struct GenerateOptions {
  std::string checkpoint;  // a .h5 checkpoint or a run directory (its latest)
  std::string prompt;      // empty: generation starts from a newline (or id 0 when the vocabulary has none)
  int64_t max_new_tokens = 200;
  SamplingOptions sampling;
  uint64_t seed = 0;
  int threads = 0;  // --threads; 0 = OMP_NUM_THREADS, else all cores (config/thread_count.h: inference_threads)
};

/// Writes the prompt, then the continuation token by token (flushed after each), to `out`;
/// only ids the tokenizer decodes are drawn (a model's embeddings may have more rows).
/// Throws lat::Error for a bad checkpoint, a checkpoint without a tokenizer (trained on token
/// ids), invalid sampling flags or logits that overflow ("generate: 'PATH': the forward
/// overflowed: ..."); ConfigError (naming --prompt) for a prompt character outside the
/// vocabulary, or for a bad OMP_NUM_THREADS.
void generate(const GenerateOptions& options, std::ostream& out);

}  // namespace lat
