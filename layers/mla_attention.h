// The multi-head latent attention token mixer ("mla" in model.layers; DeepSeek-V2, DeepSeek-AI
// 2024, sec. 2.1, in the form Kimi Linear uses, transformers' KimiLinearAttention): keys and
// values are expanded per head from a small latent per token, which with the key part shared
// by all heads is all the generation cache keeps.
//
// Letters: B batch, T tokens, L cached tokens, H heads (attn_n_heads), C kv_lora_rank (the
// latent), Dn qk_nope_head_dim, Dr qk_rope_head_dim, Dv v_head_dim, Dq = Dn + Dr (the query
// and key head size).
#pragma once
#include <cstdint>
#include <memory>

#include "layers/linear.h"
#include "layers/linear_attention_layers.h"
#include "layers/mixer.h"
#include "layers/rms_norm.h"

namespace lat {

/// Generation state of an MlaAttention layer: per token only the normed latent and the shared
/// key part, latent [B, L, C] and k_rot [B, L, Dr] (rotated when the layer has rope; undefined
/// when Dr = 0), on the parameters' device: (C + Dr) floats per token against a plain KV
/// cache's H (Dq + Dv). Steps never expand the rows: kv_b_proj is absorbed into the queries and
/// the outputs (MlaAttention::step). With a sliding window only the rows still visible are kept.
struct MlaCache : MixerState {
  Tensor latent, k_rot;
  int64_t batch = 0;
  int64_t length = 0;    // rows kept, L
  int64_t position = 0;  // tokens seen so far: the RoPE position of the next token
};

/// Children, in this order (transformers' names; no biases): q_proj [H*Dq, d_model], or with
/// q_lora_rank R > 0 q_a_proj [R, d_model], q_a_layernorm (RMSNorm [R]) and q_b_proj [H*Dq, R];
/// kv_a_proj_with_mqa [C + Dr, d_model], kv_a_layernorm (RMSNorm [C]), kv_b_proj
/// [H*(Dn + Dv), C] (head h's rows: Dn key then Dv value), o_proj [d_model, H*Dv]. Per token:
/// q = q_proj(x) per head [Dn | Dr]; [c | k_rot] = kv_a_proj_with_mqa(x);
/// [k_nope | v] = kv_b_proj(kv_a_layernorm(c)) per head; each head's key is [k_nope | k_rot],
/// k_rot the same for every head. With mla.rope, q's Dr channels and k_rot are turned by
/// RoPE (the non-interleaved layout of rotary_embedding, base rope_theta); without, nothing
/// is rotated (Kimi Linear). Causal softmax attention scaled by Dq^-0.5 (the fused op), over
/// window_size keys when positive; o_proj of the heads' outputs. The two RMSNorms have
/// transformers' KimiLinearRMSNorm eps 1e-6 and plain weights, whatever model.norm_eps is.
class MlaAttention : public Mixer {
 public:
  /// Throws lat::Error for d_model or H not positive, kv_lora_rank < 1, q_lora_rank,
  /// qk_nope_head_dim or qk_rope_head_dim < 0, Dq = 0, v_head_dim < 1, rope with an odd
  /// or zero Dr (RoPE rotates pairs), a negative window or a non-positive rope_theta.
  MlaAttention(const MixerConfig& config, Generator& gen);

  /// x: [B, T, d_model] f32 -> [B, T, d_model], optionally packed (Mixer::forward: x is
  /// flattened to one row of B*T tokens; RoPE positions restart and attention stays inside
  /// each sequence).
  Tensor forward(const Tensor& x, const Tensor& cu_seqlens = {}) const override;
  /// An empty MlaCache.
  std::unique_ptr<MixerState> make_state(int64_t batch) const override;
  /// Appends the latents of the T tokens of x [B, T, d_model] to the MlaCache `state` and
  /// attends over the cached rows in the latent space (DeepSeek-V2 sec. 2.1.2, absorbed
  /// kv_b_proj): per head q_nope W_uk [C] beside the rotated part scores every row's
  /// [latent | k_rot] at scale Dq^-0.5, the weighted latents [C] leave through W_uv [Dv, C].
  /// O(L (C + Dr)) work per query and head, instead of expanding L rows to H (Dq + Dv).
  Tensor step(const Tensor& x, MixerState& state) const override;

  /// The config with attn_n_heads (H) resolved.
  const MixerConfig& config() const { return config_; }

 private:
  struct Projected {
    Tensor q;       // [B, T, H, Dq], rotated with rope
    Tensor latent;  // [B, T, C], normed
    Tensor k_rot;   // [B, T, Dr], rotated with rope; undefined when Dr = 0
  };
  struct Expanded {
    Tensor k, v;  // [B, L, H, Dq], [B, L, H, Dv]
  };
  /// The queries and the per-token latents of x [B, T, d_model], RoPE positions from
  /// position_offset (restarting at each packed sequence of cu_seqlens when given).
  Projected project(const Tensor& x, int64_t position_offset, const Tensor& cu_seqlens) const;
  /// Per-head keys and values of latent [B, L, C] and k_rot [B, L, Dr] (or undefined).
  Expanded expand(const Tensor& latent, const Tensor& k_rot) const;
  /// forward() on x [B, T, d_model] (B == 1 with cu_seqlens, the row's packed sequences).
  Tensor attend(const Tensor& x, const Tensor& cu_seqlens) const;
  /// Attention of q [B, T, H, Dq] (rotated) over the cache's L rows without expanding them:
  /// -> [B, T, H, Dv] (see step()).
  Tensor attend_latent(const Tensor& q, const MlaCache& cache) const;
  /// RoPE on x [B, T, heads, Dr] from position_offset, when the layer has rope.
  Tensor rotate(const Tensor& x, int64_t position_offset, const Tensor& cu_seqlens) const;

  MixerConfig config_;  // resolved, see config()
  Linear* q_proj_ = nullptr;    // without q_lora_rank
  Linear* q_a_proj_ = nullptr;  // with q_lora_rank
  RMSNorm* q_a_layernorm_ = nullptr;
  Linear* q_b_proj_ = nullptr;
  Linear* kv_a_proj_with_mqa_;
  RMSNorm* kv_a_layernorm_;
  Linear* kv_b_proj_;
  Linear* o_proj_;
};

}  // namespace lat
