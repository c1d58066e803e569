// recurrent_step_* (include/lat/linear_attention.h): one decoding step of each op, the
// state updated in place, on CPU or CUDA tensors, not recorded on the tape. Each checks
// its arguments, then runs its family's step (decay.h, delta.h); the kernels are
// recurrent_decay_cpu.cpp, recurrent_delta_cpu.cpp and recurrent_cuda.cu.
#include "lat/linear_attention.h"
#include "layers/linear_attention/decay.h"
#include "layers/linear_attention/delta.h"

namespace lat {

using namespace linear_attention;

Tensor recurrent_step_linear_attn(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, float scale,
                                  bool normalize, Tensor& state) {
  const char* op = "recurrent_step_linear_attn";
  check_step(op, q_t, k_t, v_t, state, normalize ? 1 : 0);
  return run_decay_step({q_t, k_t, v_t, Tensor(), Tensor()}, {.scale = scale, .normalize = normalize}, state);
}

Tensor recurrent_step_simple_gla(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                 float scale, Tensor& state) {
  const char* op = "recurrent_step_simple_gla";
  LAT_CHECK(g_t.defined(), op << ": g_t: expected a tensor [B, H], got an undefined tensor");
  const Dims d = check_step(op, q_t, k_t, v_t, state);
  check_step_g(op, g_t, d);
  return run_decay_step({q_t, k_t, v_t, g_t, Tensor()}, {.scale = scale}, state);
}

Tensor recurrent_step_delta_rule(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& beta_t,
                                 float scale, Tensor& state, bool use_qk_l2norm_in_kernel) {
  const char* op = "recurrent_step_delta_rule";
  const Dims d = check_step(op, q_t, k_t, v_t, state);
  check_step_beta(op, beta_t, d);
  return run_delta_step({q_t, k_t, v_t, Tensor(), beta_t, Tensor()},
                        {.scale = scale, .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel}, state);
}

Tensor recurrent_step_gated_delta_rule(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                       const Tensor& beta_t, float scale, Tensor& state, bool use_qk_l2norm_in_kernel) {
  const char* op = "recurrent_step_gated_delta_rule";
  LAT_CHECK(g_t.defined(), op << ": g_t: expected a tensor [B, H], got an undefined tensor");
  const Dims d = check_step(op, q_t, k_t, v_t, state);
  check_step_g(op, g_t, d);
  check_step_beta(op, beta_t, d);
  return run_delta_step({q_t, k_t, v_t, g_t, beta_t, Tensor()},
                        {.scale = scale, .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel}, state);
}

}  // namespace lat
