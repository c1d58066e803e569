// CUDA kernels of the chunkwise linear-attention family: the launch API of the kernels,
// plain pointers and strided views, no tensors, so the .cu files need no framework headers.
// chunk_simple_gla_cuda.cu and chunk_gated_delta_rule_cuda.cu call them in order for the
// ops (decay_kernels.h, delta_kernels.h). The math is ALGORITHMS.md 2.2-2.4; the kernels
// follow fla's decomposition (2.1): a chunk-local cumulative sum of g, a
// sequential-over-chunks state pass (one block per (batch*head, K tile, V tile), or per
// (batch*head, V tile) for the delta rule, whose state update needs all of K), and
// per-chunk kernels with one block per (batch*head, chunk, tile) that keep the chunk's
// tiles in shared memory. All in f32.
//
// Letters: B batch, T tokens, H heads, K key dim, V value dim (the state width: V + 1 for
// the normalized linear attention), C chunk size (1..64 on CUDA), NT = ceil(T / C) chunks,
// BH = B * H, NK = ceil(K / 64), NV = ceil(V / 64).
//
// Buffers between kernels (row index i of a chunk is tile row i, 0..63; rows past the
// chunk's end are padding):
//   G       [BH, NT, 64]    chunk-local inclusive cumulative sum of g (padding rows repeat
//                           the last value, i.e. g = 0 there)
//   h, dh   [BH, NT, K, V]  state entering chunk c / gradient w.r.t. the state leaving it
//   dg_part [P, 2, BH, NT*64] per-row pieces of dL/dg from P producers: slot 0 summed
//                           over the rows at and after t, slot 1 over the rows before t
//                           (chunk_dg_finish adds both up)
//   W, U, v_new, dv_new, dw [BH, NT*C, D]  per-head rows in token order (row c*C + i), so
//                           the Seq views of chunk_fwd_o and chunk_bwd_dqk read them as they
//                           read q, k and v
#pragma once
#include <cstdint>

namespace lat::linear_attention::cuda {

/// A strided view of [B, T, H, D] data: element (b, h, t, d) is at p[b*sb + h*sh + t*st + d].
/// The API layout [B, T, H, D] and a per-head layout [B*H, rows, D] are both such views.
struct Seq {
  const float* p = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
};
struct SeqOut {
  float* p = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
};

/// Sizes of one call; V is the state width.
struct Dims {
  int64_t B = 0, T = 0, H = 0, K = 0, V = 0;
  int64_t C = 64;
  int device = 0;
  int64_t NT() const { return (T + C - 1) / C; }
  int64_t BH() const { return B * H; }
  int64_t NK() const { return (K + 63) / 64; }
  int64_t NV() const { return (V + 63) / 64; }
};

/// The API layout [B, T, H, D] row-major.
inline Seq api_seq(const float* p, const Dims& d, int64_t D) { return {p, d.T * d.H * D, D, d.H * D}; }
inline SeqOut api_out(float* p, const Dims& d, int64_t D) { return {p, d.T * d.H * D, D, d.H * D}; }
/// The per-head layout [B*H, NT*C, D] row-major (W, U, V^new and their gradients).
inline Seq head_seq(const float* p, const Dims& d, int64_t D) {
  const int64_t rows = d.NT() * d.C;
  return {p, d.H * rows * D, rows * D, D};
}
inline SeqOut head_out(float* p, const Dims& d, int64_t D) {
  const int64_t rows = d.NT() * d.C;
  return {p, d.H * rows * D, rows * D, D};
}

// ---- chunk_simple_gla_cuda.cu: the decayed kernels (simple_gla, linear attention) ------

/// G from g [B, T, H] (null: g = 0, G = 0).
void chunk_cumsum(const Dims& d, const float* g, float* G);

/// State pass: h[c] = state entering chunk c, S_[c+1] = e^L S_[c] + K_c^T diag(e^{L-G}) V_c
/// (L = G of the chunk's last row); h0 [BH, K, V] or null (zeros); h may be null (only
/// ht wanted); ht [BH, K, V] or null.
void chunk_fwd_h(const Dims& d, Seq k, Seq v, const float* G, const float* h0, float* h, float* ht);

/// Output: o_c = scale [diag(e^G) Q_c h[c] + (Q_c K_c^T (.) D) V_c], D_ij = e^{G_i - G_j} (i >= j).
void chunk_fwd_o(const Dims& d, Seq q, Seq k, Seq v, const float* G, const float* h, float scale, SeqOut o);

/// Reverse state pass: dh[c] = dL/dS_[c+1], dH_{c-1} = e^L dH_c + scale (diag(e^G) Q_c)^T dO_c,
/// starting from dht [BH, K, V] (null: 0); dh0 [BH, K, V] (null: not wanted) gets dH_{-1}.
void chunk_bwd_dh(const Dims& d, Seq q, Seq d_o, const float* G, const float* dht, float scale, float* dh,
                  float* dh0);

/// Per chunk: dq, dk (ALGORITHMS.md 2.3) and the gate gradient's row pieces into dg_part
/// parts [0, NK) (null: skipped). With dv_new given (the delta rule, v being V^new): also
/// dw = -dv_new h[c]^T, written to dw ([BH, NT*C, K] per-head layout).
void chunk_bwd_dqk(const Dims& d, Seq q, Seq k, Seq v, Seq d_o, const float* G, const float* h, const float* dh,
                   float scale, SeqOut dq, SeqOut dk, float* dg_part, Seq dv_new, float* dw);

/// Per chunk: dv = diag(e^{L-G}) K_c dh[c] + scale (Q_c K_c^T (.) D)^T dO_c; the first term is
/// skipped when dh is null (the delta rule adds it in its own state pass).
void chunk_bwd_dv(const Dims& d, Seq q, Seq k, Seq d_o, const float* G, const float* dh, float scale, SeqOut dv);

/// dg [B, T, H] from the first `parts` parts of dg_part (per chunk: suffix sums of slot 0
/// plus exclusive prefix sums of slot 1).
void chunk_dg_finish(const Dims& d, const float* dg_part, int64_t parts, float* dg);

// ---- chunk_gated_delta_rule_cuda.cu: the UT/WY kernels ----------------------------------

/// Per chunk: A = strictly lower beta_i (k_i . k_j) e^{G_i - G_j}, Tm = (I + A)^-1
/// ([BH, NT, 64, 64]), W = Tm diag(beta e^G) K_c and U = Tm diag(beta) V_c ([BH, NT*C, K]
/// and [BH, NT*C, V], row c*C + i for row i of chunk c). beta [B, T, H].
void gdn_prepare(const Dims& d, Seq k, Seq v, const float* beta, const float* G, float* Tm, float* W, float* U);

/// State pass: h[c], V^new_c = U_c - W_c S_[c] (into v_new, [BH, NT*C, V]) and
/// S_[c+1] = e^L S_[c] + K_c^T diag(e^{L-G}) V^new_c; h0, ht as in chunk_fwd_h.
void gdn_fwd_state(const Dims& d, Seq k, const float* W, const float* U, const float* G, const float* h0, float* h,
                   float* v_new, float* ht);

/// Reverse state pass: dv_new_c = dv_local_c + diag(e^{L-G}) K_c dH_c (into dv_new),
/// dh[c] = dH_c, dH_{c-1} = e^L dH_c + scale (diag(e^G) Q_c)^T dO_c - W_c^T dv_new_c.
void gdn_bwd_state(const Dims& d, Seq q, Seq k, Seq d_o, const float* W, const float* G, const float* dv_local,
                   const float* dht, float scale, float* dh, float* dv_new, float* dh0);

/// WY backward (ALGORITHMS.md 2.4, step 4) from dW [BH, NT*C, K] and dU = dv_new:
/// dk += (through W and A), dv = diag(beta) Tm^T dU, dbeta [B, T, H] (overwritten), and
/// dL/dG's row pieces into the part dg_slot [2, BH, NT*64] (slot 0: dG per row; slot 1:
/// zeros; null: skipped).
void gdn_bwd_wy(const Dims& d, Seq k, Seq v, const float* beta, const float* G, const float* Tm, const float* dW,
                const float* dU, SeqOut dk, SeqOut dv, float* dbeta, float* dg_slot);

/// Row-wise L2 norm of x [rows, D]: y = x / sqrt(sum x^2 + 1e-6), rstd [rows].
void l2norm_forward(const float* x, int64_t rows, int64_t D, float* y, float* rstd, int device);
/// In place on dy [rows, D]: dy <- rstd (dy - (dy . y) y).
void l2norm_backward(const float* y, const float* rstd, int64_t rows, int64_t D, float* dy, int device);

// ---- chunk_linear_attn_cuda.cu: the normalizer -------------------------------------------

/// v_ext [rows, V + 1] = [v, 1].
void append_ones_column(const float* v, int64_t rows, int64_t V, float* v_ext, int device);
/// dv [rows, V] = dv_ext[:, :V].
void drop_last_column(const float* dv_ext, int64_t rows, int64_t V, float* dv, int device);
/// o = r[:, :V] / (r[:, V] + eps); r [rows, V + 1].
void normalize_forward(const float* r, int64_t rows, int64_t V, float eps, float* o, int device);
/// dr[:, :V] = do / den, dr[:, V] = -(do . o) / den with den = r[:, V] + eps.
void normalize_backward(const float* r, const float* d_o, int64_t rows, int64_t V, float eps, float* dr,
                        int device);

}  // namespace lat::linear_attention::cuda
