// The decayed family's op (decay_kernels.h has the recurrence and the kernels): the one
// place that checks the arguments of chunk_linear_attn, chunk_simple_gla and their
// fused_recurrent_* and recurrent_step_* forms, picks the kernels of their form and
// backend, and records their tape node. The public entry points are linear_attn.cpp and
// simple_gla.cpp.
#pragma once
#include <optional>

#include "lat/linear_attention.h"
#include "layers/linear_attention/common.h"

namespace lat::linear_attention {

/// A call's tensors: q, k [B, T, Hk, K] (Hk dividing H: grouped heads, head h reads q/k
/// head h / (H / Hk)), v [B, T, H, V], g [B, T, H] or undefined (no decay),
/// initial_state [B, H, K, Vs] or undefined (zeros), cu_seqlens i64 [N + 1] or undefined
/// (with it B == 1 holds N sequences and the states are [N, H, K, Vs]). A decoding step's
/// tensors have no T axis, and its state is passed on its own.
struct DecayInputs {
  Tensor q, k, v, g, initial_state, cu_seqlens;
};

/// A call's options, as the public ops take them.
struct DecayOptions {
  std::optional<float> scale;       // default K^-0.5
  bool normalize = false;           // Katharopoulos' normalizer (state [K, V + 1])
  bool output_final_state = false;  // return final_state [B, H, K, Vs]
  int chunk_size = 64;              // Form::chunk only
};

/// Checks the arguments (lat::Error naming `op`, the argument, expected and actual: q, k,
/// v as check_qkv with grouped q/k heads, g when defined as check_g, cu_seqlens as
/// call_spans, initial_state, then chunk_size for Form::chunk or CPU tensors for
/// Form::fused_recurrent), runs the kernels of `form` on q's device once per span (the whole
/// call, or each sequence of cu_seqlens from its own state: pointers into the inputs, no
/// copies) and, when any input requires grad, records one tape node named `op` with inputs
/// q, k, v, g, initial_state, whose backward runs the same kernels' backward per span (dq,
/// dk [B, T, Hk, K]). The CPU chunk kernel reads grouped q and k as they are; for every
/// other kernel q and k are first repeated to H heads on the tape (repeat_heads, common.h).
LinearAttentionOutput run_decay(const char* op, Form form, const DecayInputs& in, const DecayOptions& options);

/// One decoding step: checks the arguments as check_step (grouped q/k heads, repeated to
/// H for the kernels) and check_step_g do (the scale is used as given), then advances state [B, H, K, Vs] in place by the token in `in` on q's
/// device (CPU or CUDA). Returns o [B, H, V]; nothing is recorded on the tape.
Tensor run_decay_step(const char* op, const DecayInputs& in, const DecayOptions& options, Tensor& state);

}  // namespace lat::linear_attention
