// Kimi Delta Attention ("kda" in model.layers; Kimi Team 2025, "Kimi Linear"): Gated DeltaNet
// with a decay per key channel instead of per head, as transformers' KimiLinearDeltaAttention
// (models/kimi_linear) and flash-linear-attention's KimiDeltaAttention (fla/layers/kda.py).
//
// Letters as in linear_attention_layers.h: B batch, T tokens, D d_model, H heads (n_heads),
// K key head dim (head_dim), V value head dim (head_dim * expand_v). Per token:
//   q, k, v = silu(conv(x q_proj^T)), silu(conv(x k_proj^T)), silu(conv(x v_proj^T))
//   g    = -exp(A_log_h) * softplus(f_b_proj(f_a_proj(x)) + dt_bias)   [H, K], log-decay <= 0
//   beta = sigmoid(x b_proj^T)                                         [H]
//   S_t  = (I - beta_t k_t k_t^T) Diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T,  o_t = K^-1/2 S_t^T q_t
//          (q and k L2-normalized inside the op)
//   out  = o_proj(rmsnorm(o) * o_norm.weight * sigmoid(g_b_proj(g_a_proj(x))))
// The gates are low rank: f_a_proj and g_a_proj map D to K, as transformers' (whose config
// has no other rank).
#pragma once
#include <memory>

#include "layers/linear.h"
#include "layers/linear_attention_layers.h"
#include "layers/rms_norm.h"

namespace lat {

/// "kda": parameters, in this order, q_proj [H*K, D], k_proj [H*K, D], v_proj [H*V, D],
/// [q_conv1d [H*K, 1, W], k_conv1d [H*K, 1, W], v_conv1d [H*V, 1, W]], f_a_proj [K, D],
/// f_b_proj [H*K, K], A_log [H], dt_bias [H*K], b_proj [H, D], [g_a_proj [K, D],
/// g_b_proj [H*V, K]], o_norm [V], o_proj [D, H*V]; the bracketed ones with model.linear's
/// use_short_conv and use_gate. No biases. The names are those of Kimi Linear's checkpoints
/// (transformers keeps the forget gate's four under `forget_gate.`, stores A_log as
/// [1, 1, H, 1] and concatenates the three convolutions into one conv1d). Initialized as
/// transformers' _init_weights: A_log and dt_bias as Mamba-2's (init_mamba2_decay), o_norm
/// ones, every projection but o_proj N(0, init_std^2), o_proj N(0, out_init_std^2).
/// Without use_gate the output is o_proj(rmsnorm(o) * o_norm.weight).
class KimiDeltaAttention : public LinearMixer {
 public:
  /// Throws lat::Error as LinearMixer (n_v_heads other than n_heads included: kda's heads are
  /// shared).
  KimiDeltaAttention(const MixerConfig& config, Generator& gen);

  /// The log-decay g [B, T, H, K] (<= 0) this layer applies to x [B, T, D].
  Tensor log_decay(const Tensor& x) const;

 protected:
  Tensor run(const Tensor& x, LinearMixerState* state, const Tensor& cu_seqlens) const override;

 private:
  /// g [B, T, H, K] = -exp(A_log) * softplus(f + dt_bias) for f = f_b_proj(f_a) [B, T, H*K].
  Tensor forget_gate(const Tensor& f) const;
  /// o [B, T, H, V] -> o_proj(rmsnorm(o) * o_norm.weight * sigmoid(gate)), gate [B, T, H*V]
  /// (without use_gate, gate undefined: no sigmoid factor).
  Tensor sigmoid_gated_output(const Tensor& o, const Tensor& gate) const;

  Linear* f_a_proj_ = nullptr;
  Linear* f_b_proj_ = nullptr;
  Linear* g_a_proj_ = nullptr;
  Linear* g_b_proj_ = nullptr;
  RMSNorm* o_norm_ = nullptr;
  Tensor A_log_, dt_bias_;
};

}  // namespace lat
