// `lat info CKPT|CONFIG [--context L]`: what a model is made of and what it costs to run.
// Parameters per module (counted on the HybridLM built from the config) and the generation
// memory at a context of L tokens: each linear layer's recurrent state (H*K*V floats, V+1
// columns with linear_attn's normalizer) plus its short-convolution states ((W-1) inputs of
// q, k and v), each attention layer's KV cache (2 * min(L, window) * Hkv * D floats), each mla
// layer's latent cache (min(L, window) * (kv_lora_rank + qk_rope_head_dim) floats, shown beside
// the plain KV cache of its heads), against
// the KV cache of an attention-only model of the same shape with full attention (every layer
// attention over all L tokens, no window: the standard transformer). On a checkpoint also
// step, tokens seen, losses and the config, once the checkpoint has loaded as generate loads it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/config/config.h"

namespace lat {

/// The largest context `lat info` reports on (2^40 tokens): the float counts of a KV cache at
/// that length still fit int64.
constexpr int64_t kMaxContext = int64_t{1} << 40;

/// Parameters of one module (or group of modules).
struct ParamCount {
  std::string name;  // e.g. "embeddings", "layers.0.attn (gdn)", "layers.0.mlp", "norms"
  int64_t count = 0;
};

/// Generation memory of one layer at the context length, in f32 elements per sequence.
struct LayerMemory {
  int64_t layer = 0;
  std::string kind;     // the mixer kind
  int64_t state = 0;    // recurrent state (linear) or KV cache (attn)
  int64_t conv = 0;     // short-convolution states (linear mixers with use_short_conv)
  // mla: floats per token of its cache (latent + shared key part), and of a plain KV cache
  // of the same heads (H * (qk head dim + v head dim)); 0 for other kinds.
  int64_t cache_per_token = 0, plain_kv_per_token = 0;
};

/// The numbers `lat info` prints.
struct ModelInfo {
  Config config;
  int64_t vocab_size = 0;
  std::vector<ParamCount> params;  // module order; lm_head last
  int64_t total_params = 0;
  int64_t context = 0;
  std::vector<LayerMemory> memory;  // one per layer
  int64_t memory_total = 0;             // sum of state + conv over layers
  int64_t attention_only_total = 0;     // KV caches of the full-attention, attention-only model
  // From a checkpoint (absent for a config):
  struct CheckpointFacts {
    std::string path;
    int64_t step = 0;
    int64_t tokens_seen = 0;
    double val_loss = 0.0, best_val_loss = 0.0;  // NaN: not evaluated
    std::string created, lat_version;
    std::vector<std::string> frozen;
    /// A Hugging Face model's config.json: only the model.* keys are the model's own (the rest
    /// are defaults), so only they are printed, ready to copy into a run config.
    std::string hf_config;
    /// The tokenizer's tokens (0: none). Fewer than vocab_size: the embeddings are padded
    /// beyond the tokenizer (ids it cannot decode, which generate never draws).
    int64_t tokenizer_tokens = 0;
    /// "char", "byte", "bpe", "sentencepiece" or "none" (token ids).
    std::string tokenizer_type;
    /// The name a subword tokenizer's file has in exports ("tokenizer.json", "tokenizer.model");
    /// empty for char, byte and none.
    std::string tokenizer_file;
  };
  std::optional<CheckpointFacts> checkpoint;
};

/// The info of `config` with `vocab_size` tokens at `context` tokens. Throws lat::Error when
/// context is outside [1, kMaxContext] or the config does not build a model.
ModelInfo model_info(const Config& config, int64_t vocab_size, int64_t context);

/// `lat info PATH`: a YAML config (.yaml, .yml: vocabulary from model.vocab_size, else from
/// its data) or anything `--checkpoint` accepts, checked as generate and eval check it before
/// anything is reported (load_model_weights, then model_from_weights: the stored config, the
/// tokenizer, finite weights, the sizes and every shape against the config, no tensor missing
/// or extra). Throws ConfigError for a bad config (a stored one too), lat::Error for a
/// checkpoint that does not load or context outside [1, kMaxContext].
ModelInfo inspect(const std::string& path, int64_t context);

/// The report `lat info` prints: parameter table, memory table, checkpoint facts (with the
/// padding ids when the tokenizer has fewer tokens than the embeddings have rows) and config
/// (of a Hugging Face directory the model keys, model.linear.chunk_size marked as lat's
/// default: config.json has no such key).
std::string format_info(const ModelInfo& info);

}  // namespace lat
