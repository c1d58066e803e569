// The softmax-attention token mixer ("attn" in model.layers): q/k/v/o projections, optional
// per-head q/k RMSNorm, full or partial RoPE, grouped-query heads, optional sliding window,
// the fused causal attention op and an optional sigmoid output gate; with a KV cache for
// generation.
#pragma once
#include <cstdint>

#include "layers/linear.h"
#include "layers/linear_attention_layers.h"
#include "layers/mixer.h"
#include "layers/rms_norm.h"

namespace lat {

/// Sizes and options of an Attention layer: the mixers' shared MixerConfig, of which it reads
/// d_model; the head count H = attn_n_heads (0 = n_heads) and head size D = attn_head_dim
/// (0 = head_dim, itself 0 = d_model / n_heads); n_kv_heads (0 = H; must divide H);
/// window_size (0 = full causal attention); rope_theta and rope_fraction (RoPE on the first
/// rotary_dim_of(D, rope_fraction) dims of each head); output_gate; qk_norm with norm_eps and
/// norm_zero_centered; init_std (q, k, v projections) and out_init_std (o_proj; GPT-2:
/// init_std / sqrt(2 n_layers)). One config for every mixer kind, so that the model's options
/// reach each layer by one translation.
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

/// Children, in this order: q_proj [H*D, d_model] (with output_gate [2*H*D, d_model], the rows
/// of head h being [h*2D, h*2D + D) query and [h*2D + D, (h+1)*2D) gate, as Qwen3-Next and
/// Qwen3.5 lay them out), k_proj [Hkv*D, d_model], v_proj [Hkv*D, d_model], o_proj
/// [d_model, H*D], then with qk_norm q_norm and k_norm (RMSNorm [D], shared by all heads). No
/// biases (flash-linear-attention's Attention names). Per head: q, k -> RMSNorm (qk_norm) ->
/// RoPE; scores scaled by D^-0.5; the output times sigmoid(gate) (output_gate) before o_proj.
class Attention : public Mixer {
 public:
  /// Throws lat::Error for non-positive sizes, n_kv_heads not dividing H, rope_fraction
  /// outside (0, 1] or a rotated width that is odd or below 2 (RoPE rotates pairs), a
  /// negative window, a non-positive rope_theta or (qk_norm) a non-positive norm_eps.
  Attention(const AttentionConfig& config, Generator& gen);

  /// x: [B, T, d_model] f32 -> [B, T, d_model], optionally packed (Mixer::forward: x is
  /// flattened to one row of B*T tokens; RoPE positions restart and attention stays inside
  /// each sequence).
  Tensor forward(const Tensor& x, const Tensor& cu_seqlens = {}) const override;
  /// An empty KVCache.
  std::unique_ptr<MixerState> make_state(int64_t batch) const override;
  /// Appends the T tokens of x [B, T, d_model] to the KVCache `state` and attends over it.
  Tensor step(const Tensor& x, MixerState& state) const override;

  /// The config with attn_n_heads (H), attn_head_dim (D), n_kv_heads and head_dim resolved.
  const AttentionConfig& config() const { return config_; }
  /// The rotated width of each head, rotary_dim_of(D, rope_fraction).
  int64_t rotary_dim() const { return rotary_dim_; }

 private:
  struct Projected {
    Tensor q, k, v;  // [B, T, H, D], [B, T, Hkv, D], [B, T, Hkv, D]; q and k normed and rotated
    Tensor gate;     // [B, T, H, D] pre-sigmoid; undefined without output_gate
  };
  /// The projections of x [B, T, d_model] up to the attention op, with RoPE positions from
  /// position_offset (restarting at each packed sequence of cu_seqlens when given).
  Projected project(const Tensor& x, int64_t position_offset, const Tensor& cu_seqlens) const;
  /// o [B, T, H, D] from the attention op -> o_proj(o * sigmoid(gate)) [B, T, d_model].
  Tensor output(const Tensor& o, const Tensor& gate) const;
  /// forward() on x [B, T, d_model] (B == 1 with cu_seqlens, the row's packed sequences).
  Tensor attend(const Tensor& x, const Tensor& cu_seqlens) const;

  AttentionConfig config_;  // resolved, see config()
  int64_t rotary_dim_ = 0;
  Linear* q_proj_;
  Linear* k_proj_;
  Linear* v_proj_;
  Linear* o_proj_;
  RMSNorm* q_norm_ = nullptr;  // null without qk_norm
  RMSNorm* k_norm_ = nullptr;
};

}  // namespace lat
