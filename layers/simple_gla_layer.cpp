// SimpleGLA ("simple_gla", Mamba-2-style data-dependent decay) and its fixed-decay form
// ("retention", RetNet): short convolutions, chunk_simple_gla, gated output RMSNorm.
#include <cmath>

#include "lat/linear_attention.h"
#include "lat/ops.h"
#include "layers/linear_attention_layers.h"

namespace lat {

SimpleGLA::SimpleGLA(const MixerConfig& config, Generator& gen, bool retention)
    : LinearMixer(retention ? "retention" : "simple_gla", config), retention_(retention) {
  add_qkv_proj(gen);
  if (!retention_) add_mamba2_decay(gen);
  add_short_convs(gen);
  add_output_norm(gen);
  add_o_proj(gen);
}

Tensor SimpleGLA::log_decay(const Tensor& x) const {
  LAT_CHECK(x.dim() == 3 && x.size(2) == config_.d_model,
            kind() << "::log_decay: x: expected shape [B, T, " << config_.d_model << "], got " << shape_str(x.shape()));
  if (!retention_) return mamba2_log_decay(x);
  // RetNet's multi-scale decay gamma_h = 1 - 2^(-5-h) (Sun et al. 2023, sec. 2.2), the same
  // for every token; log1p keeps the small 2^(-5-h) exact.
  const int64_t B = x.size(0), T = x.size(1), H = config_.n_heads;
  Tensor g = Tensor::empty({B, T, H});
  float* out = g.data<float>();
  for (int64_t i = 0; i < B * T; ++i)
    for (int64_t h = 0; h < H; ++h)
      out[i * H + h] = static_cast<float>(std::log1p(-std::exp2(-5.0 - static_cast<double>(h))));
  return g.to(x.device());
}

Tensor SimpleGLA::run(const Tensor& x, LinearMixerState* state, const Tensor& cu_seqlens) const {
  const int64_t B = x.size(0), T = x.size(1), H = config_.n_heads;
  const Projections projected = project(x);
  QKV p = conv_qkv(projected, state, WithoutConv::identity, cu_seqlens);
  Tensor g = retention_ ? log_decay(x) : mamba2_decay(projected.a);
  Tensor o;
  if (state != nullptr && T == 1) {
    o = recurrent_step_simple_gla(token(p.q), token(p.k), token(p.v), token(g), scale(), state->recurrent_state)
            .reshape({B, 1, H, value_dim()});
  } else {
    const Tensor h0 = state != nullptr ? state->recurrent_state : Tensor();
    LinearAttentionOutput r = use_chunk(T, state)
                                  ? chunk_simple_gla(p.q, p.k, p.v, g, {}, h0, state != nullptr,
                                                     static_cast<int>(config_.chunk_size), cu_seqlens)
                                  : fused_recurrent_simple_gla(p.q, p.k, p.v, g, {}, h0, state != nullptr, cu_seqlens);
    if (state != nullptr) state->recurrent_state = r.final_state;
    o = r.o;
  }
  return gated_output(o, projected.g);
}

}  // namespace lat
