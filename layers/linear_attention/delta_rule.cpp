// chunk_delta_rule, fused_recurrent_delta_rule and recurrent_step_delta_rule
// (include/lat/linear_attention.h): DeltaNet (Schlag et al. 2021; Yang et al. 2024) is the
// gated delta rule with g = 0, so it runs the delta-rule family's op (delta.h) with g left
// out: every decay is 1, and there is no dg.
#include "lat/linear_attention.h"
#include "layers/linear_attention/delta.h"

namespace lat {

using linear_attention::DeltaInputs;
using linear_attention::DeltaOptions;
using linear_attention::Form;

LinearAttentionOutput chunk_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                       std::optional<float> scale, const Tensor& initial_state, bool output_final_state,
                                       bool use_qk_l2norm_in_kernel, int chunk_size, const Tensor& cu_seqlens) {
  return linear_attention::run_delta("chunk_delta_rule", Form::chunk,
                                     DeltaInputs{q, k, v, Tensor(), beta, initial_state, cu_seqlens},
                                     DeltaOptions{.scale = scale,
                                                  .output_final_state = output_final_state,
                                                  .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel,
                                                  .chunk_size = chunk_size});
}

LinearAttentionOutput fused_recurrent_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                                 std::optional<float> scale, const Tensor& initial_state,
                                                 bool output_final_state, bool use_qk_l2norm_in_kernel,
                                                 const Tensor& cu_seqlens) {
  return linear_attention::run_delta("fused_recurrent_delta_rule", Form::fused_recurrent,
                                     DeltaInputs{q, k, v, Tensor(), beta, initial_state, cu_seqlens},
                                     DeltaOptions{.scale = scale,
                                                  .output_final_state = output_final_state,
                                                  .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel});
}

Tensor recurrent_step_delta_rule(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& beta_t,
                                 float scale, Tensor& state, bool use_qk_l2norm_in_kernel) {
  return linear_attention::run_delta_step(
      "recurrent_step_delta_rule", DeltaInputs{q_t, k_t, v_t, Tensor(), beta_t, Tensor(), Tensor()},
      DeltaOptions{.scale = scale, .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel}, state);
}

}  // namespace lat
