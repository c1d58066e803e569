// The op behind the decayed family (decay_kernels.h): chunk_linear_attn, chunk_simple_gla,
// fused_recurrent_linear_attn and fused_recurrent_simple_gla check their arguments, then
// run_decay runs the kernels and records the one tape node; recurrent_step_linear_attn and
// recurrent_step_simple_gla check theirs, then run_decay_step runs one decoding step.
#pragma once
#include "lat/linear_attention.h"
#include "layers/linear_attention/common.h"

namespace lat::linear_attention {

/// A call's tensors, checked by the op (f32, one device): q, k [B, T, H, K], v [B, T, H, V],
/// g [B, T, H] or undefined (no decay), initial_state [B, H, K, Vs] or undefined (zeros).
/// For a decoding step the T axis is absent and initial_state is not used.
struct DecayInputs {
  Tensor q, k, v, g, initial_state;
};

/// A call's options, resolved by the op.
struct DecayOptions {
  float scale = 1.0f;
  bool normalize = false;           // Katharopoulos' normalizer (chunk_linear_attn)
  bool output_final_state = false;  // return final_state [B, H, K, Vs]
  int chunk_size = 64;              // Form::chunk only
};

/// Runs the kernels of `form` on q's device (CPU, or CUDA for Form::chunk) and, when any
/// input requires grad, records one tape node named `op` with inputs q, k, v, g,
/// initial_state, whose backward runs the same kernels' backward.
LinearAttentionOutput run_decay(const char* op, Form form, const DecayInputs& in, const DecayOptions& options);

/// One decoding step on q's device (CPU or CUDA): the state [B, H, K, Vs] is advanced in
/// place by the token in `in`; returns o [B, H, V]. Nothing is recorded on the tape.
Tensor run_decay_step(const DecayInputs& in, const DecayOptions& options, Tensor& state);

}  // namespace lat::linear_attention
