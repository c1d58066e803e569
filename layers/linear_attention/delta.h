// The delta-rule family's op (delta_kernels.h has the recurrence and the kernels): the one
// place that checks the arguments of chunk_delta_rule, chunk_gated_delta_rule and their
// fused_recurrent_* and recurrent_step_* forms, picks the kernels of their form and
// backend, and records their tape node. The public entry points are delta_rule.cpp and
// gated_delta_rule.cpp.
#pragma once
#include <optional>

#include "lat/linear_attention.h"
#include "layers/linear_attention/common.h"

namespace lat::linear_attention {

/// A call's tensors: q, k [B, T, H, K], v [B, T, H, V], g [B, T, H] or undefined (the delta
/// rule), beta [B, T, H], initial_state [B, H, K, V] or undefined (zeros), cu_seqlens i64
/// [N + 1] or undefined (with it B == 1 holds N sequences and the states are [N, H, K, V]).
/// A decoding step's tensors have no T axis, and its state is passed on its own.
struct DeltaInputs {
  Tensor q, k, v, g, beta, initial_state, cu_seqlens;
};

/// A call's options, as the public ops take them.
struct DeltaOptions {
  std::optional<float> scale;            // default K^-0.5
  bool output_final_state = false;       // return final_state [B, H, K, V]
  bool use_qk_l2norm_in_kernel = false;  // L2-normalize q and k inside the op
  int chunk_size = 64;                   // Form::chunk only
};

/// Checks the arguments (lat::Error naming `op`, the argument, expected and actual: q, k,
/// v as check_qkv, g when defined as check_g, beta as check_beta, cu_seqlens as
/// call_spans, initial_state, then chunk_size for Form::chunk or CPU tensors for
/// Form::fused_recurrent), runs the kernels of `form` on q's device once per span (the
/// whole call, or each sequence of cu_seqlens from its own state: pointers into the
/// inputs, no copies) and, when any input requires grad, records one tape node named `op`
/// with inputs q, k, v, g, beta, initial_state, whose backward runs the same kernels'
/// backward per span.
LinearAttentionOutput run_delta(const char* op, Form form, const DeltaInputs& in, const DeltaOptions& options);

/// One decoding step: checks the arguments as check_step, check_step_g and check_step_beta
/// do (the scale is used as given), then advances state [B, H, K, V] in place by the token
/// in `in` on q's device (CPU or CUDA). Returns o [B, H, V]; nothing is recorded.
Tensor run_delta_step(const char* op, const DeltaInputs& in, const DeltaOptions& options, Tensor& state);

}  // namespace lat::linear_attention
