// The op behind the delta-rule family (delta_kernels.h): chunk_delta_rule,
// chunk_gated_delta_rule, fused_recurrent_delta_rule and fused_recurrent_gated_delta_rule
// check their arguments, then run_delta runs the kernels and records the one tape node;
// recurrent_step_delta_rule and recurrent_step_gated_delta_rule check theirs, then
// run_delta_step runs one decoding step.
#pragma once
#include "lat/linear_attention.h"
#include "layers/linear_attention/common.h"

namespace lat::linear_attention {

/// A call's tensors, checked by the op (f32, one device): q, k [B, T, H, K], v [B, T, H, V],
/// g [B, T, H] or undefined (the delta rule), beta [B, T, H], initial_state [B, H, K, V] or
/// undefined (zeros). For a decoding step the T axis is absent and initial_state is not used.
struct DeltaInputs {
  Tensor q, k, v, g, beta, initial_state;
};

/// A call's options, resolved by the op.
struct DeltaOptions {
  float scale = 1.0f;
  bool output_final_state = false;        // return final_state [B, H, K, V]
  bool use_qk_l2norm_in_kernel = false;   // L2-normalize q and k inside the op
  int chunk_size = 64;                    // Form::chunk only
};

/// Runs the kernels of `form` on q's device (CPU, or CUDA for Form::chunk) and, when any
/// input requires grad, records one tape node named `op` with inputs q, k, v, g, beta,
/// initial_state, whose backward runs the same kernels' backward.
LinearAttentionOutput run_delta(const char* op, Form form, const DeltaInputs& in, const DeltaOptions& options);

/// One decoding step on q's device (CPU or CUDA): the state [B, H, K, V] is advanced in
/// place by the token in `in`; returns o [B, H, V]. Nothing is recorded on the tape.
Tensor run_delta_step(const DeltaInputs& in, const DeltaOptions& options, Tensor& state);

}  // namespace lat::linear_attention
