// Chunkwise (gated) delta rule: the kernel interface shared by chunk_gated_delta_rule and
// chunk_delta_rule (the delta rule is the gated one with g = 0), and the op behind both.
//
// Recurrence (Gated DeltaNet, Yang et al. 2025; DeltaNet, Yang et al. 2024), state S [K, V]:
//   S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,  o_t = scale S_t^T q_t.
// Chunk form with the UT/WY transform and its backward: ALGORITHMS.md 2.4; the derivation
// and the buffer plan sit in chunk_gated_delta_rule_cpu.cpp.
//
// Letters as in common.h: B batch, T tokens, H heads, K key dim, V value dim, C chunk size,
// NT chunks per head, BH = B*H; N = BH*NT chunks in all.
#pragma once
#include <cstdint>
#include <optional>

#include "lat/linear_attention.h"

namespace lat::linear_attention {

/// One problem in the per-head chunked layout of common.h ([BH, NT*C, D], rows t >= T
/// zero, including g and beta). f32 throughout.
struct GatedDeltaRuleChunkParams {
  int64_t BH = 0, T = 0, NT = 0, C = 0, K = 0, V = 0;  // T: valid rows per head
  float scale = 1.0f;
  const float* q = nullptr;     // [BH, NT*C, K] (already L2-normalized when asked for)
  const float* k = nullptr;     // [BH, NT*C, K]
  const float* v = nullptr;     // [BH, NT*C, V]
  const float* g = nullptr;     // [BH, NT*C] log-decay <= 0, or null for the delta rule (g = 0)
  const float* beta = nullptr;  // [BH, NT*C]
  const float* h0 = nullptr;    // [BH, K, V], or null for a zero initial state
};

/// Gradients written by the backward kernel (every pointer a full, overwritten buffer in
/// the chunked layout; dg and dh0 may be null when not wanted).
struct GatedDeltaRuleChunkGrads {
  float* dq = nullptr;     // [BH, NT*C, K]
  float* dk = nullptr;     // [BH, NT*C, K]
  float* dv = nullptr;     // [BH, NT*C, V]
  float* dg = nullptr;     // [BH, NT*C]
  float* dbeta = nullptr;  // [BH, NT*C]
  float* dh0 = nullptr;    // [BH, K, V]
};

/// Forward: o [BH, NT*C, V] and, when ht is not null, the final state [BH, K, V].
void gated_delta_rule_chunk_forward_cpu(const GatedDeltaRuleChunkParams& p, float* o, float* ht);

/// Backward from d_o [BH, NT*C, V] and dht [BH, K, V] (null: no gradient on the final
/// state). Recomputes the forward intermediates (nothing is kept between the passes).
void gated_delta_rule_chunk_backward_cpu(const GatedDeltaRuleChunkParams& p, const float* d_o, const float* dht,
                                         const GatedDeltaRuleChunkGrads& grads);

/// The op behind chunk_gated_delta_rule (g defined) and chunk_delta_rule (g undefined):
/// checks the arguments (errors name `op`), runs the CPU kernel and records one tape node
/// whose backward returns dq, dk, dv, dg (when g is defined), dbeta and d initial_state.
LinearAttentionOutput gated_delta_rule_chunk_op(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& g, const Tensor& beta, std::optional<float> scale,
                                                const Tensor& initial_state, bool output_final_state,
                                                bool use_qk_l2norm_in_kernel, int chunk_size);

}  // namespace lat::linear_attention
