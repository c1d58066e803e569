// Kimi Delta Attention ("kda"): the pieces it shares with gdn (projections, short
// convolutions, beta, generation state) come from LinearMixer; its own are the low-rank
// forget gate with a decay per key channel and the sigmoid-gated output norm.
#include "layers/kda_layer.h"

#include <vector>

#include "lat/linear_attention.h"
#include "lat/ops.h"

namespace lat {
namespace {

// Kimi Linear L2-normalizes q and k; the ops do it inside their node.
constexpr bool kUseQkL2NormInKernel = true;

}  // namespace

KimiDeltaAttention::KimiDeltaAttention(const MixerConfig& config, Generator& gen) : LinearMixer("kda", config) {
  const MixerConfig& c = config_;
  const int64_t H = c.n_heads, K = c.head_dim, V = value_dim();
  add_qkv_proj(gen);
  add_short_convs(gen);
  f_a_proj_ = &register_module("f_a_proj", std::make_unique<Linear>(c.d_model, K, gen, c.init_std));
  f_b_proj_ = &register_module("f_b_proj", std::make_unique<Linear>(K, H * K, gen, c.init_std));
  Tensor A_log = Tensor::empty({H}), dt_bias = Tensor::empty({H * K});
  init_mamba2_decay(A_log, dt_bias, gen);
  A_log_ = register_parameter("A_log", A_log);
  dt_bias_ = register_parameter("dt_bias", dt_bias);
  add_beta_proj(gen);
  if (c.use_gate) {
    g_a_proj_ = &register_module("g_a_proj", std::make_unique<Linear>(c.d_model, K, gen, c.init_std));
    g_b_proj_ = &register_module("g_b_proj", std::make_unique<Linear>(K, H * V, gen, c.init_std));
  }
  o_norm_ = &register_module("o_norm", std::make_unique<RMSNorm>(V, c.norm_eps));
  add_o_proj(gen);
}

Tensor KimiDeltaAttention::forget_gate(const Tensor& f) const {
  const int64_t B = f.size(0), T = f.size(1), H = config_.n_heads, K = config_.head_dim;
  // softplus >= 0 and exp > 0, so g <= 0 for every input (the kernels reject g > 0).
  return -(exp(A_log_).reshape({H, 1}) * softplus((f + dt_bias_).reshape({B, T, H, K})));
}

Tensor KimiDeltaAttention::log_decay(const Tensor& x) const {
  LAT_CHECK(x.dim() == 3 && x.size(2) == config_.d_model,
            "kda::log_decay: x: expected shape [B, T, " << config_.d_model << "], got " << shape_str(x.shape()));
  return forget_gate(f_b_proj_->forward(f_a_proj_->forward(x)));
}

Tensor KimiDeltaAttention::sigmoid_gated_output(const Tensor& o, const Tensor& gate) const {
  Tensor y = o_norm_->forward(o);
  if (gate.defined()) y = y * sigmoid(gate.reshape(o.shape()));
  return output(y);
}

Tensor KimiDeltaAttention::run(const Tensor& x, LinearMixerState* state, const Tensor& cu_seqlens) const {
  const int64_t B = x.size(0), T = x.size(1), H = config_.n_heads;
  const Projections projected = project(x);  // q, k, v, b
  const QKV p = conv_qkv(projected, state, WithoutConv::silu, cu_seqlens);
  // The two gates' down-projections read the same x: one node.
  std::vector<const Linear*> down{f_a_proj_};
  if (g_a_proj_ != nullptr) down.push_back(g_a_proj_);
  const std::vector<Tensor> low_rank = fused_linear_forward(x, down);
  const Tensor g = forget_gate(f_b_proj_->forward(low_rank[0]));
  const Tensor b = beta(projected.b);
  Tensor o;
  if (state != nullptr && T == 1) {
    o = recurrent_step_kda(token(p.q), token(p.k), token(p.v), token(g), token(b), scale(), state->recurrent_state,
                           kUseQkL2NormInKernel)
            .reshape({B, 1, H, value_dim()});
  } else {
    const Tensor h0 = state != nullptr ? state->recurrent_state : Tensor();
    const bool output_final_state = state != nullptr;
    const LinearAttentionOutput r = use_chunk(T, state)
                                        ? chunk_kda(p.q, p.k, p.v, g, b, {}, h0, output_final_state,
                                                    kUseQkL2NormInKernel, static_cast<int>(config_.chunk_size),
                                                    cu_seqlens)
                                        : fused_recurrent_kda(p.q, p.k, p.v, g, b, {}, h0, output_final_state,
                                                              kUseQkL2NormInKernel, cu_seqlens);
    if (state != nullptr) state->recurrent_state = r.final_state;
    o = r.o;
  }
  const Tensor gate = g_b_proj_ != nullptr ? g_b_proj_->forward(low_rank[1]) : Tensor();
  return sigmoid_gated_output(o, gate);
}

}  // namespace lat
