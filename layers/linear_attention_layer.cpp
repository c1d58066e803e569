// LinearAttention ("linear_attn"): phi(q), phi(k), v through chunk_linear_attn (Katharopoulos
// et al. 2020, sec. 3.2-3.4), with the normalizer's z riding in the state's last column.
#include "lat/linear_attention.h"
#include "lat/ops.h"
#include "layers/linear_attention_layers.h"

namespace lat {
namespace {

// The feature map phi: elu + 1 keeps features positive, so the normalizer's denominator
// scale q . z stays positive (Katharopoulos et al. 2020, sec. 3.2.1).
Tensor feature_map(const Tensor& x, const std::string& name) {
  if (name == "elu1") return elu(x) + 1.0;
  if (name == "relu") return relu(x);
  return x;  // identity
}

}  // namespace

LinearAttention::LinearAttention(const MixerConfig& config, Generator& gen) : LinearMixer("linear_attn", config) {
  const std::string& map = config_.feature_map;
  LAT_CHECK(map == "elu1" || map == "relu" || map == "identity",
            "LinearAttention: feature_map: expected one of elu1, relu, identity, got '" << map << "'");
  add_qkv_proj(gen);
  add_o_proj(gen);
}

int64_t LinearAttention::state_columns() const { return config_.normalize ? value_dim() + 1 : value_dim(); }

Tensor LinearAttention::run(const Tensor& x, LinearMixerState* state, const Tensor& cu_seqlens) const {
  const int64_t B = x.size(0), T = x.size(1), H = config_.n_heads;
  QKV p = conv_qkv(project(x), state, WithoutConv::identity, cu_seqlens);
  Tensor q = feature_map(p.q, config_.feature_map), k = feature_map(p.k, config_.feature_map);
  const bool normalize = config_.normalize;
  Tensor o;
  if (state != nullptr && T == 1) {
    o = recurrent_step_linear_attn(token(q), token(k), token(p.v), scale(), normalize, state->recurrent_state)
            .reshape({B, 1, H, value_dim()});
  } else {
    const Tensor h0 = state != nullptr ? state->recurrent_state : Tensor();
    LinearAttentionOutput r = use_chunk(T, state) ? chunk_linear_attn(q, k, p.v, {}, normalize, h0, state != nullptr,
                                                                      static_cast<int>(config_.chunk_size), cu_seqlens)
                                                  : fused_recurrent_linear_attn(q, k, p.v, {}, normalize, h0,
                                                                                state != nullptr, cu_seqlens);
    if (state != nullptr) state->recurrent_state = r.final_state;
    o = r.o;
  }
  return output(o);
}

}  // namespace lat
