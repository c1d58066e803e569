// The linear-attention family: chunkwise ops (training), fused recurrent ops (reference,
// generation) and single-token steps (decoding). Field-standard names and layouts, as in
// flash-linear-attention. The math: shared ALGORITHMS.md, implemented per op in
// layers/linear_attention/.
//
// Shapes (f32): q, k [B, T, H, K]; v [B, T, H, V]; g [B, T, H] (log-decay, <= 0);
// beta [B, T, H] (in (0, 1)); initial_state / final_state [B, H, K, V] (for
// chunk_linear_attn with normalize = true: [B, H, K, V + 1], the last column is z).
// An undefined Tensor stands for an absent optional input. Every op is differentiable in
// every tensor input (initial_state included) and accepts a gradient on final_state.
// scale defaults to K^-0.5. Any T >= 1; K and V in 1..256. Errors: lat::Error naming
// the op, the argument and expected versus actual (shapes, dtypes, ranks, g > 0).
//
// Packed sequences (flash-linear-attention's varlen): every chunk_* and fused_recurrent_*
// op takes, as its last argument, cu_seqlens, i64 [N + 1] with 0 = c_0 < ... < c_N = T
// (on the CPU or q's device), for a batch of B == 1 holding N sequences back to back,
// sequence n being tokens [c_n, c_{n+1}). Each starts from its own initial state and no
// state crosses a boundary: initial_state and final_state are then [N, H, K, V], and the
// results and every gradient equal those of N separate calls. Any lengths >= 1 (a boundary
// may fall anywhere in a chunk). Invalid offsets (dtype, rank, c_0 != 0, not strictly
// increasing, c_N != T) or B != 1 are lat::Error naming cu_seqlens.
#pragma once
#include <optional>

#include "lat/tensor.h"

namespace lat {

struct LinearAttentionOutput {
  Tensor o;            // [B, T, H, V]
  Tensor final_state;  // [B or N, H, K, V] (V + 1 when normalized); undefined unless requested
};

/// Causal linear attention (Katharopoulos et al. 2020, sec. 3.2-3.4): S_t = S_{t-1} + k_t v_t^T,
/// o_t = scale S_t^T q_t; with normalize, z_t = z_{t-1} + k_t and
/// o_t = scale S_t^T q_t / (scale q_t . z_t + 1e-6). The feature map is applied by the caller.
/// Grouped heads: q, k may be [B, T, Hk, K] with Hk dividing v's H (head h reads q/k head
/// h / (H / Hk), as repeat_interleave would); dq, dk are then [B, T, Hk, K], summed over
/// each group's heads. So may the fused_recurrent_* and recurrent_step_* forms' q, k of
/// chunk_linear_attn and chunk_simple_gla (q_t, k_t [B, Hk, K]). Otherwise lat::Error
/// naming v ("H a multiple of q's heads Hk").
LinearAttentionOutput chunk_linear_attn(const Tensor& q, const Tensor& k, const Tensor& v,
                                        std::optional<float> scale = {}, bool normalize = false,
                                        const Tensor& initial_state = {}, bool output_final_state = false,
                                        int chunk_size = 64, const Tensor& cu_seqlens = {});

/// Linear attention with a scalar per-head log-decay (Mamba-2 SSD read as linear attention,
/// Dao & Gu 2024; RetNet when g is constant): S_t = exp(g_t) S_{t-1} + k_t v_t^T,
/// o_t = scale S_t^T q_t. Grouped q, k [B, T, Hk, K] as chunk_linear_attn's (Mamba-2's
/// n_groups: C and B of G heads shared by H / G heads each); g [B, T, H] is per v head.
LinearAttentionOutput chunk_simple_gla(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                       std::optional<float> scale = {}, const Tensor& initial_state = {},
                                       bool output_final_state = false, int chunk_size = 64,
                                       const Tensor& cu_seqlens = {});

/// DeltaNet (Schlag et al. 2021; Yang et al. 2024): S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,
/// o_t = scale S_t^T q_t. use_qk_l2norm_in_kernel L2-normalizes q and k (eps 1e-6) inside the op.
LinearAttentionOutput chunk_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                       std::optional<float> scale = {}, const Tensor& initial_state = {},
                                       bool output_final_state = false, bool use_qk_l2norm_in_kernel = false,
                                       int chunk_size = 64, const Tensor& cu_seqlens = {});

/// Gated DeltaNet (Yang et al. 2025): S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,
/// o_t = scale S_t^T q_t.
LinearAttentionOutput chunk_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                             const Tensor& beta, std::optional<float> scale = {},
                                             const Tensor& initial_state = {}, bool output_final_state = false,
                                             bool use_qk_l2norm_in_kernel = false, int chunk_size = 64,
                                             const Tensor& cu_seqlens = {});

/// Kimi Delta Attention (Kimi Linear, 2025): Gated DeltaNet with a per-key-channel gate,
/// g [B, T, H, K] (log-decay <= 0 per channel):
/// S_t = (I - beta_t k_t k_t^T) Diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T, o_t = scale S_t^T q_t.
/// CPU and CUDA (chunk_size 1..64 on CUDA), as fused_recurrent_kda and recurrent_step_kda.
LinearAttentionOutput chunk_kda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, std::optional<float> scale = {}, const Tensor& initial_state = {},
                                bool output_final_state = false, bool use_qk_l2norm_in_kernel = false,
                                int chunk_size = 64, const Tensor& cu_seqlens = {});

// ---- token-by-token forms (same arguments and results as the chunk ops) ---------------
LinearAttentionOutput fused_recurrent_linear_attn(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  std::optional<float> scale = {}, bool normalize = false,
                                                  const Tensor& initial_state = {}, bool output_final_state = false,
                                                  const Tensor& cu_seqlens = {});
LinearAttentionOutput fused_recurrent_simple_gla(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                                 std::optional<float> scale = {}, const Tensor& initial_state = {},
                                                 bool output_final_state = false, const Tensor& cu_seqlens = {});
LinearAttentionOutput fused_recurrent_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                                 std::optional<float> scale = {}, const Tensor& initial_state = {},
                                                 bool output_final_state = false, bool use_qk_l2norm_in_kernel = false,
                                                 const Tensor& cu_seqlens = {});
LinearAttentionOutput fused_recurrent_gated_delta_rule(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
    std::optional<float> scale = {}, const Tensor& initial_state = {}, bool output_final_state = false,
    bool use_qk_l2norm_in_kernel = false, const Tensor& cu_seqlens = {});
LinearAttentionOutput fused_recurrent_kda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                          const Tensor& beta, std::optional<float> scale = {},
                                          const Tensor& initial_state = {}, bool output_final_state = false,
                                          bool use_qk_l2norm_in_kernel = false, const Tensor& cu_seqlens = {});

// ---- one decoding step, state updated in place (no autograd) ---------------------------
// q_t, k_t [B, H, K]; v_t [B, H, V]; g_t, beta_t [B, H]; state [B, H, K, V] (V + 1 when
// normalized). Returns o_t [B, H, V].
Tensor recurrent_step_linear_attn(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, float scale,
                                  bool normalize, Tensor& state);
Tensor recurrent_step_simple_gla(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                 float scale, Tensor& state);
Tensor recurrent_step_delta_rule(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& beta_t,
                                 float scale, Tensor& state, bool use_qk_l2norm_in_kernel = false);
Tensor recurrent_step_gated_delta_rule(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t,
                                       const Tensor& g_t, const Tensor& beta_t, float scale, Tensor& state,
                                       bool use_qk_l2norm_in_kernel = false);
/// KDA's step: g_t [B, H, K] (per key channel); CPU tensors only.
Tensor recurrent_step_kda(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                          const Tensor& beta_t, float scale, Tensor& state, bool use_qk_l2norm_in_kernel = false);

// ---- float64 references (tape ops in f64: outputs and, through backward, gradients) ----
// Same arguments as the chunk ops; inputs may be f32 or f64 and are converted to f64.
LinearAttentionOutput naive_linear_attn(const Tensor& q, const Tensor& k, const Tensor& v,
                                        std::optional<double> scale = {}, bool normalize = false,
                                        const Tensor& initial_state = {}, bool output_final_state = false);
LinearAttentionOutput naive_simple_gla(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                       std::optional<double> scale = {}, const Tensor& initial_state = {},
                                       bool output_final_state = false);
LinearAttentionOutput naive_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& g, const Tensor& beta,
                                             std::optional<double> scale = {}, const Tensor& initial_state = {},
                                             bool output_final_state = false,
                                             bool use_qk_l2norm_in_kernel = false);
/// g [B, T, H, K] (per key channel), as chunk_kda.
LinearAttentionOutput naive_kda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                                std::optional<double> scale = {}, const Tensor& initial_state = {},
                                bool output_final_state = false, bool use_qk_l2norm_in_kernel = false);

}  // namespace lat
