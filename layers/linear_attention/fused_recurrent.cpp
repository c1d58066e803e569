// fused_recurrent_* (include/lat/linear_attention.h): the token-by-token forms of the four
// ops, on CPU tensors. Each checks its arguments, then runs its family's op (decay.h,
// delta.h) with Form::fused_recurrent; the kernels are recurrent_decay_cpu.cpp and
// recurrent_delta_cpu.cpp.
#include "lat/linear_attention.h"
#include "layers/linear_attention/decay.h"
#include "layers/linear_attention/delta.h"

namespace lat {

using namespace linear_attention;

LinearAttentionOutput fused_recurrent_linear_attn(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  std::optional<float> scale, bool normalize,
                                                  const Tensor& initial_state, bool output_final_state) {
  const char* op = "fused_recurrent_linear_attn";
  const Dims d = check_qkv(op, q, k, v);
  check_initial_state(op, initial_state, q, d, normalize ? d.V + 1 : d.V);
  check_cpu(op, q);
  return run_decay(op, Form::fused_recurrent, {q, k, v, Tensor(), initial_state},
                   {.scale = resolve_scale(scale, d.K),
                    .normalize = normalize,
                    .output_final_state = output_final_state});
}

LinearAttentionOutput fused_recurrent_simple_gla(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& g, std::optional<float> scale,
                                                 const Tensor& initial_state, bool output_final_state) {
  const char* op = "fused_recurrent_simple_gla";
  LAT_CHECK(g.defined(), op << ": g: expected a tensor [B, T, H], got an undefined tensor");
  const Dims d = check_qkv(op, q, k, v);
  check_g(op, g, q, d);
  check_initial_state(op, initial_state, q, d, d.V);
  check_cpu(op, q);
  return run_decay(op, Form::fused_recurrent, {q, k, v, g, initial_state},
                   {.scale = resolve_scale(scale, d.K), .output_final_state = output_final_state});
}

LinearAttentionOutput fused_recurrent_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                                 std::optional<float> scale, const Tensor& initial_state,
                                                 bool output_final_state, bool use_qk_l2norm_in_kernel) {
  const char* op = "fused_recurrent_delta_rule";
  const Dims d = check_qkv(op, q, k, v);
  check_beta(op, beta, q, d);
  check_initial_state(op, initial_state, q, d, d.V);
  check_cpu(op, q);
  return run_delta(op, Form::fused_recurrent, {q, k, v, Tensor(), beta, initial_state},
                   {.scale = resolve_scale(scale, d.K),
                    .output_final_state = output_final_state,
                    .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel});
}

LinearAttentionOutput fused_recurrent_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Tensor& g, const Tensor& beta, std::optional<float> scale,
                                                       const Tensor& initial_state, bool output_final_state,
                                                       bool use_qk_l2norm_in_kernel) {
  const char* op = "fused_recurrent_gated_delta_rule";
  LAT_CHECK(g.defined(), op << ": g: expected a tensor [B, T, H], got an undefined tensor");
  const Dims d = check_qkv(op, q, k, v);
  check_g(op, g, q, d);
  check_beta(op, beta, q, d);
  check_initial_state(op, initial_state, q, d, d.V);
  check_cpu(op, q);
  return run_delta(op, Form::fused_recurrent, {q, k, v, g, beta, initial_state},
                   {.scale = resolve_scale(scale, d.K),
                    .output_final_state = output_final_state,
                    .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel});
}

}  // namespace lat
