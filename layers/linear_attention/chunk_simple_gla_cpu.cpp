// CPU kernel of the chunkwise decayed linear attention (chunk_simple_gla, and
// chunk_linear_attn with g absent), forward and backward: ALGORITHMS.md 2.2 and 2.3.
//
// Per chunk n (G: chunk-local inclusive cumsum of g, Λ = G_last, D_ij = exp(G_i - G_j)
// for i >= j else 0, applied by select after the product):
//   forward   U   = (diag(e^{Λ-G}) K)^T V            (the chunk's state contribution)
//             S_[c+1] = e^Λ S_[c] + U_c               (sequential scan, per (b, h))
//             A   = scale (Q K^T ⊙ D)
//             O   = A V + diag(scale e^G) Q S_[c]
//   backward  W   = Q^T dÕ,  dÕ = diag(scale e^G) dO
//             dH_{c-1} = e^{Λ_c} dH_c + W_c          (reverse scan; dH_c = dL/dS_[c+1])
//             P   = scale (dO V^T ⊙ D)
//             dQ  = dÕ S_[c]^T + P K
//             dK  = diag(e^{Λ-G}) V dH_c^T + P^T Q
//             dV  = diag(e^{Λ-G}) K dH_c + A^T dO
//   gate      dg_t = Σ_{i>=t} q_i·dq_i^inter + e^Λ <dH_c, S_[c]> + Σ_{j<t} k_j·dk_j^inter
//                    + Σ_{i>=t>j} dP_ij A_ij
// Grouped heads (Hk < H, decay_kernels.h): the R = H/Hk heads of a group share Q and K,
// so Q K^T is one product per (b, group, chunk), each head's A its masked copy with its own
// decay, and dQ, dK of the group are sums over its heads: the P K and P^T Q terms become
// (Σ_heads P) K and (Σ_heads P)^T Q, one product per group, and the inter-chunk parts are
// summed per head. The gate gradient's terms stay per head (they use that head's own
// inter-chunk dq, dk, before the sum).
// The gate gradient is ALGORITHMS.md's dG followed by the in-chunk reverse cumsum, with
// the terms regrouped so that nothing cancels: the q·dq - k·dk form subtracts two large,
// nearly equal sums, while here every term is a sum over exactly the positions that g_t
// influences (the intra part is Mamba-2's pairwise form, 2.3 precision note). Every
// exponent is <= 0, so g of -20 per step over any T stays finite.
//
// Schedule. One pass over the chunks in blocks of about kBlock (chunk n = m*R + r, group
// chunk m = (b*Hk + j)*NT + c, head h = j*R + r: the heads of a group side by side, so a
// block of whole groups holds every head of its group chunks; ascending n in forward,
// descending in backward, so each (b, h) meets its chunks in scan order): the block's rows
// are gathered from the [B, T, H, D] inputs (q and k once per group chunk) into [nb, C, D]
// buffers, every per-chunk product of the block is ONE batched oneDNN gemm over its
// (batch, head, chunk) items (or its group chunks), and the state scan advances through the
// block with a carried state per (b, h) (elementwise, parallel over state elements). The
// working set stays in cache, so time per token does not grow with T; only the inputs,
// outputs, the states S_[c] and A (saved for backward) go through memory.
#include <algorithm>
#include <cstring>
#include <vector>

#include <utility>

#include "autograd/cpu/aligned_buffer.h"
#include "autograd/cpu/gemm.h"
#include "layers/linear_attention/chunk_layout.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention/decay_kernels.h"

namespace lat::linear_attention {
namespace {

using cpu::AlignedBuffer;

struct ChunkDecaySaved : DecaySaved {
  AlignedBuffer g;        // [N, C]: G, chunk-local inclusive cumsum (padding rows add 0)
  AlignedBuffer h;        // [N, K, Vs]: S_[c], the state entering each chunk
  AlignedBuffer a;        // [N, C, C]: scale (Q K^T ⊙ D)
  AlignedBuffer readout;  // [B, T, H, V + 1]: r, with the normalizer only
};

constexpr int64_t kBlock = 32;  // chunks per pass block: ~16 buffers of 32 x 16 KiB stay in L3

// R = H / Hk heads per group; a block holds `block` chunks, whole groups (a multiple of R).
struct Sizes {
  int64_t BH, NT, N, C, K, V, Vs, KV, Hk, R, block;
  explicit Sizes(const DecayParams& p)
      : BH(p.B * p.H), NT(p.NT()), N(p.B * p.H * p.NT()), C(p.C), K(p.K), V(p.V), Vs(p.Vs()),
        KV(p.K * p.Vs()), Hk(p.Hk), R(p.H / p.Hk), block(std::min(N, R * std::max<int64_t>(1, kBlock / R))) {}
};

// Where chunk n of the schedule lies: its head's chunk, its (b, h) state index and its
// group's chunk in q and k [B, T, Hk, K].
struct ScheduledChunk {
  ChunkAt head, group;
  int64_t bh;
};

ScheduledChunk chunk_of(const Sizes& s, int64_t n) {
  const int64_t r = n % s.R, m = n / s.R, c = m % s.NT, b = m / s.NT / s.Hk, j = m / s.NT % s.Hk;
  const int64_t h = j * s.R + r;
  return {{b, h, c}, {b, j, c}, b * s.Hk * s.R + h};
}

// The ng group chunks [m0, m0 + ng) of q and k (C x K each) into q, k.
void gather_qk(const DecayParams& p, const Sizes& s, int64_t m0, int64_t ng, float* q, float* k) {
  const int64_t CK = s.C * s.K;
#pragma omp parallel for
  for (int64_t j = 0; j < ng; ++j) {
    const ChunkAt at = chunk_of(s, (m0 + j) * s.R).group;
    gather_chunk(p.q, p.T, p.Hk, s.K, s.C, at, q + j * CK);
    gather_chunk(p.k, p.T, p.Hk, s.K, s.C, at, k + j * CK);
  }
}

// dst[j] = Σ_{r < R} src[j*R + r] for the ng groups of a block, `size` floats per item:
// the heads' terms of a group's gradient.
void sum_heads(const float* src, int64_t ng, int64_t R, int64_t size, float* dst) {
#pragma omp parallel for
  for (int64_t j = 0; j < ng; ++j) {
    float* out = dst + j * size;
    const float* in = src + j * R * size;
    std::copy(in, in + size, out);
    for (int64_t r = 1; r < R; ++r)
#pragma omp simd
      for (int64_t e = 0; e < size; ++e) out[e] += in[r * size + e];
  }
}

// One batched product over the nb chunks of a block, C[i] = op(A[i]) op(B[i]) + beta C[i],
// in `precision` (bf16: oneDNN's bf16 product, inputs rounded per call; measured faster here
// than one tile_gemm_bf16 per chunk).
void gemm(Precision precision, int64_t nb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
          int64_t stride_a, bool trans_a, const float* B, int64_t ldb, int64_t stride_b, bool trans_b, float* C,
          int64_t ldc, int64_t stride_c, float beta = 0.0f) {
  cpu::GemmBatch g;
  g.batch = nb, g.M = M, g.N = N, g.K = K;
  g.A = A, g.lda = lda, g.stride_a = stride_a, g.trans_a = trans_a;
  g.B = B, g.ldb = ldb, g.stride_b = stride_b, g.trans_b = trans_b;
  g.C = C, g.ldc = ldc, g.stride_c = stride_c, g.beta = beta;
  g.precision = precision;
  cpu::gemm_batched(g);
}

// G [N, C] (schedule order): chunk-local inclusive cumsum of g; zeros without a gate.
// Padding rows add g = 0, so they carry Λ and every e^{Λ - G} there is 1 (their q, k, v
// are 0).
void gate_cumsum(const DecayParams& p, const Sizes& s, float* G) {
#pragma omp parallel for
  for (int64_t n = 0; n < s.N; ++n) {
    const ChunkAt at = chunk_of(s, n).head;
    float* out = G + n * s.C;
    float acc = 0.0f;
    for (int64_t i = 0; i < s.C; ++i) {
      int64_t t = at.c * s.C + i;
      if (p.g && t < p.T) acc += p.g[(at.b * p.T + t) * p.H + at.h];
      out[i] = acc;
    }
  }
}

// dst[r, :] = src[r, :] * f for the C rows of one chunk (G: its [C]), f = scale e^{G_r}
// (head decay, from the chunk start) or e^{Λ - G_r} (tail decay, to the chunk end).
enum class Decay { head, tail };
void scale_rows(const float* src, int64_t D, const float* G, int64_t C, Decay decay, float scale, float* dst) {
  float last = G[C - 1];
  for (int64_t r = 0; r < C; ++r) {
    float f = decay == Decay::head ? scale * exp_nonpositive(G[r]) : exp_nonpositive(last - G[r]);
    for (int64_t d = 0; d < D; ++d) dst[r * D + d] = src[r * D + d] * f;
  }
}

// A = scale (QK ⊙ D) for one chunk's [C, C] scores QK = Q K^T (A may be QK itself): the
// decay mask applied by select after the product, so the positive exponents of the upper
// triangle are never taken.
void mask_scores(const float* QK, const float* G, int64_t C, float scale, float* A) {
  for (int64_t r = 0; r < C; ++r) {
    const float* qk = QK + r * C;
    float* a = A + r * C;
    float gr = G[r];
    for (int64_t j = 0; j <= r; ++j) a[j] = qk[j] * (scale * exp_nonpositive(gr - G[j]));
    std::fill(a + r + 1, a + C, 0.0f);
  }
}

// The scans of the states through the chunks [n0, n0 + nb) of a block: forward in
// ascending chunk order, out[i] = S_[c] and carry <- e^Λ carry + U[i]; backward in
// descending order, out[i] = dH_c = dL/dS_[c+1] and carry <- e^Λ carry + W[i] (out and
// add: the block's [nb, KV]; carry: one per (b, h)). After a sequence's last chunk in scan
// order the carry is its final state (forward) or d initial_state (backward), copied into
// `last` when set. Parallel over tiles of state elements: each element's scan is
// independent.
enum class Scan { forward, backward };
void scan_block(Scan scan, const Sizes& s, int64_t n0, int64_t nb, const float* add, const float* G, float* carry,
                float* out, float* last) {
  constexpr int64_t kTile = 512;
  const bool forward = scan == Scan::forward;
  const int64_t last_chunk = forward ? s.NT - 1 : 0;
#pragma omp parallel for
  for (int64_t e0 = 0; e0 < s.KV; e0 += kTile) {
    int64_t e1 = std::min(s.KV, e0 + kTile);
    for (int64_t step = 0; step < nb; ++step) {
      int64_t i = forward ? step : nb - 1 - step;
      int64_t n = n0 + i;
      const ScheduledChunk at = chunk_of(s, n);
      const int64_t bh = at.bh;
      float decay = exp_nonpositive(G[n * s.C + s.C - 1]);
      float* c = carry + bh * s.KV;
      float* o = out + i * s.KV;
      const float* a = add + i * s.KV;
      for (int64_t e = e0; e < e1; ++e) {
        o[e] = c[e];
        c[e] = decay * c[e] + a[e];
      }
      if (last && at.head.c == last_chunk) std::copy(c + e0, c + e1, last + bh * s.KV + e0);
    }
  }
}

// dot[r] = x[r, :] · y[r, :] over D columns.
float row_dot(const float* x, const float* y, int64_t D) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t d = 0; d < D; ++d) acc += x[d] * y[d];
  return acc;
}

// One chunk, in place: dP -> P = scale (dP ⊙ D); with dG set, also the gate gradient
// (see the file comment) from the inter-chunk parts of dq and dk (before the P terms
// are added) and e^Λ <dH_c, S_[c]> (dH, H: the chunk's [KV]).
void intra_backward(float* P, const float* A, const float* G, const float* q, const float* dq, const float* k,
                    const float* dk, const float* dH, const float* H, int64_t C, int64_t K, int64_t KV, float scale,
                    float* dG) {
  std::vector<float> column(C, 0.0f), rect(C);
  for (int64_t r = C - 1; r >= 0; --r) {
    float* prow = P + r * C;
    const float* arow = A + r * C;
    if (dG) {
      // column[j] = Σ_{r' >= r} dP_{r'j} A_{r'j}; rect_r = Σ_{j < r} column[j].
      for (int64_t j = 0; j <= r; ++j) column[j] += prow[j] * arow[j];
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < r; ++j) sum += column[j];
      rect[r] = sum;
    }
    float gr = G[r];
    for (int64_t j = 0; j <= r; ++j) prow[j] *= scale * exp_nonpositive(gr - G[j]);
    std::fill(prow + r + 1, prow + C, 0.0f);
  }
  if (!dG) return;
  float suffix = 0.0f;
  for (int64_t r = C - 1; r >= 0; --r) {
    suffix += row_dot(q + r * K, dq + r * K, K);
    dG[r] = suffix + rect[r];
  }
  float prefix = exp_nonpositive(G[C - 1]) * row_dot(dH, H, KV);
  for (int64_t r = 0; r < C; ++r) {
    dG[r] += prefix;
    prefix += row_dot(k + r * K, dk + r * K, K);
  }
}

// Forward up to the readout r [B, T, H, Vs] (o itself without the normalizer).
std::shared_ptr<ChunkDecaySaved> readout_forward(const DecayParams& p, float* r, float* ht, bool save) {
  Sizes s(p);
  const int64_t C = s.C, K = s.K, Vs = s.Vs, KV = s.KV, CK = C * K, CV = C * Vs, CC = C * C, R = s.R;
  const int64_t blk = s.block;
  // Without backward, the scores and states of a block are not kept past it.
  auto saved = std::make_shared<ChunkDecaySaved>();
  saved->g = AlignedBuffer(s.N * C);
  saved->h = AlignedBuffer((save ? s.N : blk) * KV);
  saved->a = AlignedBuffer((save ? s.N : blk) * CC);
  float *G = saved->g.data(), *H = saved->h.data(), *A = saved->a.data();
  gate_cumsum(p, s, G);

  AlignedBuffer carry(s.BH * KV);
  copy_or_zero(p.h0, s.BH * KV, carry.data());
  // q, k and the scores Q K^T per group chunk; the rest per head chunk. With one head per
  // group the scores are masked in place in A.
  AlignedBuffer q(blk / R * CK), k(blk / R * CK), qk(R > 1 ? blk / R * CC : 0), v(blk * CV), kdec(blk * CK),
      qdec(blk * CK), U(blk * KV), o(blk * CV);
  for (int64_t n0 = 0; n0 < s.N; n0 += blk) {
    const int64_t nb = std::min(blk, s.N - n0), ng = nb / R;
    float* a_blk = save ? A + n0 * CC : A;
    float* h_blk = save ? H + n0 * KV : H;
    float* scores = R > 1 ? qk.data() : a_blk;
    gather_qk(p, s, n0 / R, ng, q.data(), k.data());
#pragma omp parallel for
    for (int64_t i = 0; i < nb; ++i) {
      const float* g = G + (n0 + i) * C;
      gather_chunk(p.v, p.T, p.H, s.V, C, chunk_of(s, n0 + i).head, v.data() + i * CV, p.normalize);
      scale_rows(k.data() + i / R * CK, K, g, C, Decay::tail, 1.0f, kdec.data() + i * CK);
      scale_rows(q.data() + i / R * CK, K, g, C, Decay::head, p.scale, qdec.data() + i * CK);
    }
    // State contributions U = (diag(e^{Λ-G}) K)^T V, then the scan gives S_[c].
    gemm(p.precision, nb, K, Vs, C, kdec.data(), K, CK, true, v.data(), Vs, CV, false, U.data(), Vs, KV);
    scan_block(Scan::forward, s, n0, nb, U.data(), G, carry.data(), h_blk, ht);
    // O = A V + diag(scale e^G) Q S_[c], A = scale (Q K^T ⊙ D): Q K^T once per group chunk.
    gemm(p.precision, ng, C, C, K, q.data(), K, CK, false, k.data(), K, CK, true, scores, C, CC);
#pragma omp parallel for
    for (int64_t i = 0; i < nb; ++i) mask_scores(scores + i / R * CC, G + (n0 + i) * C, C, p.scale, a_blk + i * CC);
    gemm(p.precision, nb, C, Vs, C, a_blk, C, CC, false, v.data(), Vs, CV, false, o.data(), Vs, CV);
    gemm(p.precision, nb, C, Vs, K, qdec.data(), K, CK, false, h_blk, Vs, KV, false, o.data(), Vs, CV, 1.0f);
#pragma omp parallel for
    for (int64_t i = 0; i < nb; ++i)
      scatter_chunk(o.data() + i * CV, Vs, p.T, p.H, Vs, C, chunk_of(s, n0 + i).head, r);
  }
  return save ? saved : nullptr;
}

// Backward from the readout's gradient dr [B, T, H, Vs].
void readout_backward(const DecayParams& p, const ChunkDecaySaved& saved, const float* dr, const float* dht,
                      const DecayGrads& grads) {
  Sizes s(p);
  const int64_t C = s.C, K = s.K, Vs = s.Vs, KV = s.KV, CK = C * K, CV = C * Vs, CC = C * C, R = s.R;
  const float *G = saved.g.data(), *H = saved.h.data(), *A = saved.a.data();
  float* dG_out = p.g ? grads.dg : nullptr;

  AlignedBuffer carry(s.BH * KV);
  copy_or_zero(dht, s.BH * KV, carry.data());
  const int64_t blk = s.block, gblk = blk / R;
  // Per head chunk, then the group sums of P and of dq, dk's inter-chunk parts (with one
  // head per group, the head's own buffers).
  AlignedBuffer q(gblk * CK), k(gblk * CK), v(blk * CV), d_o(blk * CV), d_odec(blk * CV), kdec(blk * CK),
      qdec(blk * CK), vdec(blk * CV), W(blk * KV), dH(blk * KV), dq(blk * CK), dk(blk * CK), dv(blk * CV),
      P(blk * CC), dG(blk * C), P_sum(R > 1 ? gblk * CC : 0), dq_sum(R > 1 ? gblk * CK : 0),
      dk_sum(R > 1 ? gblk * CK : 0);
  float* P_group = R > 1 ? P_sum.data() : P.data();
  float* dq_group = R > 1 ? dq_sum.data() : dq.data();
  float* dk_group = R > 1 ? dk_sum.data() : dk.data();
  const int64_t first_block = (s.N - 1) / blk * blk;
  for (int64_t n0 = first_block; n0 >= 0; n0 -= blk) {
    const int64_t nb = std::min(blk, s.N - n0), ng = nb / R;
    const float* h_blk = H + n0 * KV;
    const float* a_blk = A + n0 * CC;
    gather_qk(p, s, n0 / R, ng, q.data(), k.data());
#pragma omp parallel for
    for (int64_t i = 0; i < nb; ++i) {
      const float* g = G + (n0 + i) * C;
      const ChunkAt at = chunk_of(s, n0 + i).head;
      gather_chunk(p.v, p.T, p.H, s.V, C, at, v.data() + i * CV, p.normalize);
      gather_chunk(dr, p.T, p.H, Vs, C, at, d_o.data() + i * CV);
      scale_rows(d_o.data() + i * CV, Vs, g, C, Decay::head, p.scale, d_odec.data() + i * CV);
      scale_rows(v.data() + i * CV, Vs, g, C, Decay::tail, 1.0f, vdec.data() + i * CV);
      scale_rows(k.data() + i / R * CK, K, g, C, Decay::tail, 1.0f, kdec.data() + i * CK);
      scale_rows(q.data() + i / R * CK, K, g, C, Decay::head, p.scale, qdec.data() + i * CK);
    }
    // W = Q^T dÕ = (diag(scale e^G) Q)^T dO, then the reverse scan gives dH_c = dL/dS_[c+1].
    gemm(p.precision, nb, K, Vs, C, qdec.data(), K, CK, true, d_o.data(), Vs, CV, false, W.data(), Vs, KV);
    scan_block(Scan::backward, s, n0, nb, W.data(), G, carry.data(), dH.data(), grads.dh0);
    // Inter-chunk parts of dQ and dK first: the gate gradient needs them alone.
    gemm(p.precision, nb, C, K, Vs, d_odec.data(), Vs, CV, false, h_blk, Vs, KV, true, dq.data(), K, CK);
    gemm(p.precision, nb, C, K, Vs, vdec.data(), Vs, CV, false, dH.data(), Vs, KV, true, dk.data(), K, CK);
    gemm(p.precision, nb, C, C, Vs, d_o.data(), Vs, CV, false, v.data(), Vs, CV, true, P.data(), C, CC);
#pragma omp parallel for
    for (int64_t i = 0; i < nb; ++i)
      intra_backward(P.data() + i * CC, a_blk + i * CC, G + (n0 + i) * C, q.data() + i / R * CK,
                     dq.data() + i * CK, k.data() + i / R * CK, dk.data() + i * CK, dH.data() + i * KV,
                     h_blk + i * KV, C, K, KV, p.scale, dG_out ? dG.data() + i * C : nullptr);
    if (R > 1) {
      sum_heads(P.data(), ng, R, CC, P_group);
      sum_heads(dq.data(), ng, R, CK, dq_group);
      sum_heads(dk.data(), ng, R, CK, dk_group);
    }
    gemm(p.precision, ng, C, K, C, P_group, C, CC, false, k.data(), K, CK, false, dq_group, K, CK, 1.0f);
    gemm(p.precision, ng, C, K, C, P_group, C, CC, true, q.data(), K, CK, false, dk_group, K, CK, 1.0f);
    gemm(p.precision, nb, C, Vs, K, kdec.data(), K, CK, false, dH.data(), Vs, KV, false, dv.data(), Vs, CV);
    gemm(p.precision, nb, C, Vs, C, a_blk, C, CC, true, d_o.data(), Vs, CV, false, dv.data(), Vs, CV, 1.0f);
#pragma omp parallel for
    for (int64_t j = 0; j < ng; ++j) {
      const ChunkAt at = chunk_of(s, (n0 / R + j) * R).group;
      scatter_chunk(dq_group + j * CK, K, p.T, s.Hk, K, C, at, grads.dq);
      scatter_chunk(dk_group + j * CK, K, p.T, s.Hk, K, C, at, grads.dk);
    }
#pragma omp parallel for
    for (int64_t i = 0; i < nb; ++i) {
      const ChunkAt at = chunk_of(s, n0 + i).head;
      scatter_chunk(dv.data() + i * CV, Vs, p.T, p.H, s.V, C, at, grads.dv);
      if (dG_out) scatter_chunk(dG.data() + i * C, 1, p.T, p.H, 1, C, at, dG_out);
    }
  }
}

}  // namespace

std::shared_ptr<const DecaySaved> chunk_decay_forward_cpu(const DecayParams& p, float* o, float* ht, bool save) {
  if (!p.normalize) return readout_forward(p, o, ht, save);
  // The readout [B, T, H, V + 1] (last column: the normalizer's denominator) goes through
  // a buffer, which backward needs again.
  const int64_t rows = p.B * p.T * p.H;
  AlignedBuffer r(rows * p.Vs());
  std::shared_ptr<ChunkDecaySaved> saved = readout_forward(p, r.data(), ht, save);
  normalize_forward_cpu(r.data(), rows, p.V, o);
  if (saved) saved->readout = std::move(r);
  return saved;
}

void chunk_decay_backward_cpu(const DecayParams& p, const DecaySaved& saved, const float* d_o, const float* dht,
                              const DecayGrads& grads) {
  const auto& s = static_cast<const ChunkDecaySaved&>(saved);
  if (!p.normalize) {
    readout_backward(p, s, d_o, dht, grads);
    return;
  }
  const int64_t rows = p.B * p.T * p.H;
  AlignedBuffer dr(rows * p.Vs());
  normalize_backward_cpu(s.readout.data(), d_o, rows, p.V, dr.data());
  readout_backward(p, s, dr.data(), dht, grads);
}

}  // namespace lat::linear_attention
