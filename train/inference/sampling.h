// Drawing the next token from logits: temperature, top-k and nucleus (top-p) sampling.
#pragma once
#include <cstdint>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// `lat generate`'s sampling flags.
struct SamplingOptions {
  double temperature = 0.8;  // logits / temperature; 0 = greedy (argmax)
  int64_t top_k = 0;         // > 0: only the k most likely tokens (Fan et al. 2018)
  double top_p = 1.0;        // < 1: the smallest set of most likely tokens with mass >= top_p
                             // (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration")
  /// > 0: only ids below it are drawn, the ids the tokenizer decodes when the embeddings are
  /// padded beyond its vocabulary (Hugging Face models round vocab_size up to a multiple of
  /// 64 or 128); 0: every id of the model.
  int64_t drawable_ids = 0;
  /// Ids below drawable_ids that are never drawn: holes in a sparse subword vocabulary, which
  /// decode to no token.
  std::vector<int64_t> excluded_ids{};
};

/// Throws lat::Error naming the flag: temperature < 0, top_k < 0, top_p outside (0, 1],
/// drawable_ids < 0.
void validate(const SamplingOptions& options);

/// A token id drawn from softmax(logits / temperature) restricted by top_k, then top_p
/// (in double precision; ties keep the lower id first). logits: `vocab` floats.
int64_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options, Generator& gen);

}  // namespace lat
