// chunk_linear_attn, fused_recurrent_linear_attn and recurrent_step_linear_attn
// (include/lat/linear_attention.h): causal linear attention is the decayed family with no
// gate (decay.h). The normalizer rides on a constant-1 value column (state [K, V + 1], z
// last) inside the kernels.
#include "lat/linear_attention.h"
#include "layers/linear_attention/decay.h"

namespace lat {

using linear_attention::DecayInputs;
using linear_attention::DecayOptions;
using linear_attention::Form;

LinearAttentionOutput chunk_linear_attn(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<float> scale,
                                        bool normalize, const Tensor& initial_state, bool output_final_state,
                                        int chunk_size, const Tensor& cu_seqlens) {
  return linear_attention::run_decay(
      "chunk_linear_attn", Form::chunk, DecayInputs{q, k, v, Tensor(), initial_state, cu_seqlens},
      DecayOptions{.scale = scale,
                   .normalize = normalize,
                   .output_final_state = output_final_state,
                   .chunk_size = chunk_size});
}

LinearAttentionOutput fused_recurrent_linear_attn(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  std::optional<float> scale, bool normalize,
                                                  const Tensor& initial_state, bool output_final_state,
                                                  const Tensor& cu_seqlens) {
  return linear_attention::run_decay(
      "fused_recurrent_linear_attn", Form::fused_recurrent, DecayInputs{q, k, v, Tensor(), initial_state, cu_seqlens},
      DecayOptions{.scale = scale, .normalize = normalize, .output_final_state = output_final_state});
}

Tensor recurrent_step_linear_attn(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, float scale,
                                  bool normalize, Tensor& state) {
  return linear_attention::run_decay_step("recurrent_step_linear_attn",
                                          DecayInputs{q_t, k_t, v_t, Tensor(), Tensor(), Tensor()},
                                          DecayOptions{.scale = scale, .normalize = normalize}, state);
}

}  // namespace lat
