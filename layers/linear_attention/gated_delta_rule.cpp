// chunk_gated_delta_rule, fused_recurrent_gated_delta_rule and
// recurrent_step_gated_delta_rule (include/lat/linear_attention.h): the delta-rule family
// with its gate g required (delta.h; the chunk kernels are chunk_gated_delta_rule_cpu.cpp
// and chunk_gated_delta_rule_cuda.cu).
#include "lat/linear_attention.h"
#include "layers/linear_attention/delta.h"

namespace lat {

using linear_attention::DeltaInputs;
using linear_attention::DeltaOptions;
using linear_attention::Form;

LinearAttentionOutput chunk_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                             const Tensor& beta, std::optional<float> scale,
                                             const Tensor& initial_state, bool output_final_state,
                                             bool use_qk_l2norm_in_kernel, int chunk_size, const Tensor& cu_seqlens) {
  const char* op = "chunk_gated_delta_rule";
  linear_attention::check_defined(op, "g", g, "[B, T, H]");
  return linear_attention::run_delta(op, Form::chunk, DeltaInputs{q, k, v, g, beta, initial_state, cu_seqlens},
                                     DeltaOptions{.scale = scale,
                                                  .output_final_state = output_final_state,
                                                  .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel,
                                                  .chunk_size = chunk_size});
}

LinearAttentionOutput fused_recurrent_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Tensor& g, const Tensor& beta, std::optional<float> scale,
                                                       const Tensor& initial_state, bool output_final_state,
                                                       bool use_qk_l2norm_in_kernel, const Tensor& cu_seqlens) {
  const char* op = "fused_recurrent_gated_delta_rule";
  linear_attention::check_defined(op, "g", g, "[B, T, H]");
  return linear_attention::run_delta(op, Form::fused_recurrent,
                                     DeltaInputs{q, k, v, g, beta, initial_state, cu_seqlens},
                                     DeltaOptions{.scale = scale,
                                                  .output_final_state = output_final_state,
                                                  .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel});
}

Tensor recurrent_step_gated_delta_rule(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                       const Tensor& beta_t, float scale, Tensor& state, bool use_qk_l2norm_in_kernel) {
  const char* op = "recurrent_step_gated_delta_rule";
  linear_attention::check_defined(op, "g_t", g_t, "[B, H]");
  return linear_attention::run_delta_step(
      op, DeltaInputs{q_t, k_t, v_t, g_t, beta_t, Tensor(), Tensor()},
      DeltaOptions{.scale = scale, .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel}, state);
}

}  // namespace lat
