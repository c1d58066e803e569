// The softmax-attention token mixer ("attn" in model.layers): q/k/v/o projections, RoPE,
// grouped-query heads, optional sliding window, and the fused causal attention op; with a
// KV cache for generation.
#pragma once
#include <cstdint>

#include "layers/linear.h"
#include "layers/linear_attention_layers.h"
#include "layers/mixer.h"

namespace lat {

/// Sizes and options of an Attention layer: the mixers' shared MixerConfig, of which it reads
/// d_model, n_heads, n_kv_heads (0 = n_heads; must divide n_heads), head_dim (0 = d_model /
/// n_heads), window_size (0 = full causal attention), rope_theta, init_std (q, k, v
/// projections) and out_init_std (o_proj; GPT-2: init_std / sqrt(2 n_layers)). One config
/// for every mixer kind, so that the model's options reach each layer by one translation.
using AttentionConfig = MixerConfig;

/// Generation state of an Attention layer: the rotated keys and the values of the tokens
/// seen, k and v [B, capacity, Hkv, D], rows [0, length) valid. With a sliding window only
/// the rows still visible are kept, so the cache stays bounded.
struct KVCache : MixerState {
  Tensor k, v;
  int64_t batch = 0;
  int64_t length = 0;    // valid rows of k and v
  int64_t position = 0;  // tokens seen so far: the RoPE position of the next token
};

/// Children q_proj [H*D, d_model], k_proj [Hkv*D, d_model], v_proj [Hkv*D, d_model],
/// o_proj [d_model, H*D], no biases (flash-linear-attention's Attention names).
/// Scores are scaled by D^-0.5.
class Attention : public Mixer {
 public:
  /// Throws lat::Error for non-positive sizes, n_kv_heads not dividing n_heads, an odd
  /// head_dim (RoPE rotates pairs), a negative window or a non-positive rope_theta.
  Attention(const AttentionConfig& config, Generator& gen);

  /// x: [B, T, d_model] f32 -> [B, T, d_model], optionally packed (Mixer::forward: x is
  /// flattened to one row of B*T tokens; RoPE positions restart and attention stays inside
  /// each sequence).
  Tensor forward(const Tensor& x, const Tensor& cu_seqlens = {}) const override;
  /// An empty KVCache.
  std::unique_ptr<MixerState> make_state(int64_t batch) const override;
  /// Appends the T tokens of x [B, T, d_model] to the KVCache `state` and attends over it.
  Tensor step(const Tensor& x, MixerState& state) const override;

  const AttentionConfig& config() const { return config_; }

 private:
  /// forward() on x [B, T, d_model] (B == 1 with cu_seqlens, the row's packed sequences).
  Tensor attend(const Tensor& x, const Tensor& cu_seqlens) const;

  AttentionConfig config_;  // with n_kv_heads and head_dim resolved
  Linear* q_proj_;
  Linear* k_proj_;
  Linear* v_proj_;
  Linear* o_proj_;
};

}  // namespace lat
