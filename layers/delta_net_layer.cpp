// DeltaNet ("delta_net") and Gated DeltaNet ("gdn"): short convolutions, q and k
// L2-normalized inside the kernel (use_qk_l2norm_in_kernel: one fused node with its own
// backward instead of extra tape nodes), beta = sigmoid(x b_proj^T), for gdn the Mamba-2
// decay, then the (gated) delta rule and the gated output RMSNorm.
#include "lat/linear_attention.h"
#include "layers/linear_attention_layers.h"

namespace lat {
namespace {

// fla's DeltaNet and GatedDeltaNet L2-normalize q and k; the ops do it inside their node.
constexpr bool kUseQkL2NormInKernel = true;

}  // namespace

DeltaNet::DeltaNet(const MixerConfig& config, Generator& gen) : DeltaNet(config, gen, Decay::none) {}

DeltaNet::DeltaNet(const MixerConfig& config, Generator& gen, Decay decay)
    : LinearMixer(decay == Decay::mamba2 ? "gdn" : "delta_net", config, ValueHeads::grouped),
      gated_(decay == Decay::mamba2) {
  add_qkv_proj(gen);
  add_beta_proj(gen);
  if (gated_) add_mamba2_decay(gen);
  add_short_convs(gen);
  add_output_norm(gen);
  add_o_proj(gen);
}

GatedDeltaNet::GatedDeltaNet(const MixerConfig& config, Generator& gen) : DeltaNet(config, gen, Decay::mamba2) {}

Tensor DeltaNet::run(const Tensor& x, LinearMixerState* state, const Tensor& cu_seqlens) const {
  const int64_t B = x.size(0), T = x.size(1), Hv = value_heads();
  const int chunk_size = static_cast<int>(config_.chunk_size);
  const Projections projected = project(x);
  QKV p = conv_qkv(projected, state, WithoutConv::silu, cu_seqlens);
  Tensor b = beta(projected.b);
  Tensor g = gated_ ? mamba2_decay(projected.a) : Tensor();
  Tensor o;
  if (state != nullptr && T == 1) {
    Tensor& S = state->recurrent_state;
    o = gated_ ? recurrent_step_gated_delta_rule(token(p.q), token(p.k), token(p.v), token(g), token(b), scale(), S,
                                                 kUseQkL2NormInKernel)
               : recurrent_step_delta_rule(token(p.q), token(p.k), token(p.v), token(b), scale(), S,
                                           kUseQkL2NormInKernel);
    o = o.reshape({B, 1, Hv, value_dim()});
  } else {
    const Tensor h0 = state != nullptr ? state->recurrent_state : Tensor();
    const bool output_final_state = state != nullptr;
    LinearAttentionOutput r;
    if (use_chunk(T, state))
      r = gated_ ? chunk_gated_delta_rule(p.q, p.k, p.v, g, b, {}, h0, output_final_state, kUseQkL2NormInKernel,
                                          chunk_size, cu_seqlens)
                 : chunk_delta_rule(p.q, p.k, p.v, b, {}, h0, output_final_state, kUseQkL2NormInKernel, chunk_size,
                                    cu_seqlens);
    else
      r = gated_ ? fused_recurrent_gated_delta_rule(p.q, p.k, p.v, g, b, {}, h0, output_final_state,
                                                    kUseQkL2NormInKernel, cu_seqlens)
                 : fused_recurrent_delta_rule(p.q, p.k, p.v, b, {}, h0, output_final_state, kUseQkL2NormInKernel,
                                              cu_seqlens);
    if (state != nullptr) state->recurrent_state = r.final_state;
    o = r.o;
  }
  return gated_output(o, projected.g);
}

}  // namespace lat
