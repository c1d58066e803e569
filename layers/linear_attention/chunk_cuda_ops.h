// The CUDA branch of the linear-attention ops: each function takes the op's already
// checked arguments (same meaning as in include/lat/linear_attention.h), runs the kernels
// of chunk_cuda.h on q's device and records the op's one tape node, with the same inputs
// and gradient order as the CPU branch. Intermediates (chunk states, WY factors) are
// recomputed in backward, not kept. In a build without CUDA each throws lat::Error.
#pragma once
#include "lat/linear_attention.h"

namespace lat::linear_attention {

/// chunk_simple_gla (g defined; node inputs q, k, v, g, initial_state) and
/// chunk_linear_attn (g undefined; node inputs q, k, v, initial_state). chunk_size 1..64.
LinearAttentionOutput chunk_decay_cuda(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& g, float scale, bool normalize, const Tensor& initial_state,
                                       bool output_final_state, int chunk_size);

/// chunk_gated_delta_rule (g defined) and chunk_delta_rule (g undefined); node inputs
/// q, k, v, g, beta, initial_state. chunk_size 1..64, K <= 256.
LinearAttentionOutput gated_delta_rule_cuda(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& g, const Tensor& beta, float scale,
                                            const Tensor& initial_state, bool output_final_state,
                                            bool use_qk_l2norm_in_kernel, int chunk_size);

/// recurrent_step_linear_attn / recurrent_step_simple_gla (g_t undefined: no decay).
Tensor recurrent_step_decay_cuda(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                 float scale, bool normalize, Tensor& state);

/// recurrent_step_delta_rule / recurrent_step_gated_delta_rule (g_t undefined: no gate).
Tensor recurrent_step_delta_cuda(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                 const Tensor& beta_t, float scale, Tensor& state, bool use_qk_l2norm_in_kernel);

}  // namespace lat::linear_attention
