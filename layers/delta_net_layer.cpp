// DeltaNet ("delta_net") and Gated DeltaNet ("gdn"): short convolutions, q and k
// L2-normalized inside the kernel (use_qk_l2norm_in_kernel: one fused node with its own
// backward instead of extra tape nodes), beta = sigmoid(x b_proj^T), for gdn the Mamba-2
// decay, then the (gated) delta rule and the gated output RMSNorm.
#include "lat/linear_attention.h"
#include "layers/linear_attention_layers.h"

namespace lat {

DeltaNet::DeltaNet(const MixerConfig& config, Generator& gen) : DeltaNet(config, gen, false) {}

DeltaNet::DeltaNet(const MixerConfig& config, Generator& gen, bool gated)
    : LinearMixer(gated ? "gdn" : "delta_net", config), gated_(gated) {
  add_qkv_proj(gen);
  add_beta_proj(gen);
  if (gated_) add_mamba2_decay(gen);
  add_short_convs(gen);
  add_output_norm(gen);
  add_o_proj(gen);
}

GatedDeltaNet::GatedDeltaNet(const MixerConfig& config, Generator& gen) : DeltaNet(config, gen, true) {}

Tensor DeltaNet::run(const Tensor& x, LinearMixerState* state) const {
  const int64_t B = x.size(0), T = x.size(1), H = config_.n_heads;
  const int chunk_size = static_cast<int>(config_.chunk_size);
  QKV p = project_qkv(x, state, true);
  Tensor b = beta(x);
  Tensor g = gated_ ? mamba2_log_decay(x) : Tensor();
  Tensor o;
  if (state != nullptr && T == 1) {
    Tensor& S = state->recurrent_state;
    o = gated_ ? recurrent_step_gated_delta_rule(token(p.q), token(p.k), token(p.v), token(g), token(b), scale(), S,
                                                 true)
               : recurrent_step_delta_rule(token(p.q), token(p.k), token(p.v), token(b), scale(), S, true);
    o = o.reshape({B, 1, H, value_dim()});
  } else {
    const Tensor h0 = state != nullptr ? state->recurrent_state : Tensor();
    const bool final_state = state != nullptr;
    LinearAttentionOutput r;
    if (use_chunk(T, state))
      r = gated_ ? chunk_gated_delta_rule(p.q, p.k, p.v, g, b, {}, h0, final_state, true, chunk_size)
                 : chunk_delta_rule(p.q, p.k, p.v, b, {}, h0, final_state, true, chunk_size);
    else
      r = gated_ ? fused_recurrent_gated_delta_rule(p.q, p.k, p.v, g, b, {}, h0, true, true)
                 : fused_recurrent_delta_rule(p.q, p.k, p.v, b, {}, h0, true, true);
    if (state != nullptr) state->recurrent_state = r.final_state;
    o = r.o;
  }
  return gated_output(o, x);
}

}  // namespace lat
