// CPU kernel of the chunkwise gated delta rule, forward and backward (ALGORITHMS.md 2.4;
// Yang et al. 2024 "Parallelizing Linear Transformers with the Delta Rule", sec. 3, and
// Yang et al. 2025 "Gated Delta Networks", sec. 3.3). Letters as in chunk_gated_delta_rule.h.
//
// Per chunk (rows i, j in [0, C); G the chunk-local inclusive cumsum of g, gamma = e^G,
// Gamma_ij = e^{G_i - G_j} for i >= j, Lambda = G_{C-1}; padded rows have g = 0, so
// Lambda is the cumsum at the last valid row and every padded row contributes zero):
//   A = strictly lower part of diag(beta) (K K^T o Gamma),   T = (I + A)^-1
//   W = T diag(beta gamma) K,   U = T diag(beta) V              (the UT / WY transform)
//   V_new = U - W S_c                                            (the effective writes)
//   S_{c+1} = e^Lambda S_c + K^T diag(e^{Lambda - G}) V_new
//   O = scale diag(gamma) Q S_c + (scale Q K^T o Gamma o M) V_new   (M: lower incl. diag)
// Every exponent is a difference G_i - G_j with i >= j, Lambda - G_i, or G_i: all <= 0
// because g <= 0, so nothing overflows for any decay; the upper triangle is never
// exponentiated (it is written as 0).
//
// Backward (dh_c = dL/dS_{c+1}, the state leaving chunk c; S_c = the state entering it):
//   dV_new = (scale Q K^T o Gamma o M)^T dO + diag(e^{Lambda - G}) K dh_c
//   dh_{c-1} = e^Lambda dh_c + (scale diag(gamma) Q)^T dO - W^T dV_new      (reverse pass)
//   P = scale (dO V_new^T) o Gamma o M
//   dQ = scale diag(gamma) dO S_c^T + P K
//   dK = diag(e^{Lambda - G}) V_new dh_c^T + P^T Q        (+ the WY terms below)
//   dG: every G-dependent factor's gradient times the factor: the score pairs i > j, the
//       readout decay gamma_i, the state decay e^Lambda and the write decays e^{Lambda - G_j}
//   dW = -dV_new S_c^T, dU = dV_new
//   [dKbg | dVb] = T^T [dW | dU];  dA = -T^T dT T^T with dT = [dW | dU] [diag(beta gamma) K |
//       diag(beta) V]^T, i.e. dA = -[dKbg | dVb] [W | U]^T (only i > j is read);
//   dk += beta gamma dKbg,  dv = beta dVb,
//       dbeta = gamma (dKbg . k) + dVb . v,  dG += beta gamma (dKbg . k)
//   through A_ij = beta_i (k_i . k_j) Gamma_ij with E = dA o Gamma (i > j):
//       dbeta_i += sum_j E_ij (k_i . k_j),  dK += (diag(beta) E + (diag(beta) E)^T) K,
//       dG_i += sum_j dA_ij A_ij - sum_j dA_ji A_ji
//   dg = reverse cumsum of dG within the chunk.
//
// Schedule. Chunk n = bh * NT + c; every per-chunk array has one batch stride over n. The
// per-chunk work walks blocks of kBlock consecutive chunks; in a block every product is one
// oneDNN gemm batched over the block (threaded by oneDNN) and the elementwise work is
// OpenMP over the block's chunks. A block's tiles stay in the caches, where a batched 64^3
// gemm runs about 1.5x faster than one batched over all chunks that streams from memory,
// and the time per token does not grow with T. Only the state passes walk the chunks in
// order, one gemm batched over (b, h) per step. The forward per-chunk phase before the
// state pass (phase A) computes W, U and the decayed keys; the one after it (phase B) the
// outputs. The backward recomputes phase A and the state pass, then runs B1 (everything
// that needs no dh), the reverse state pass, and B2 (the rest).
#include <algorithm>
#include <cstring>

#include "autograd/cpu/gemm.h"
#include "layers/linear_attention/chunk_gated_delta_rule.h"
#include "layers/linear_attention/common.h"

namespace lat::linear_attention {
namespace {

constexpr int64_t kBlock = 32;  // chunks per cache block (about 4 MiB of tiles at C = K = V = 64)

// Log-decays below this act as this value: e^-100 is below float's range, so the decay is
// 0 either way, while -inf (a full reset) would make G_i - G_j = -inf - (-inf) = NaN.
constexpr float kMinLogDecay = -100.0f;

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The whole-problem arrays of one call, indexed by chunk n.
struct Arrays {
  AlignedBuffer G;       // [N, C]        chunk-local inclusive cumsum of g (Lambda = G_{C-1})
  AlignedBuffer decay;   // [N, C, C]     Gamma_ij (i >= j), 0 above the diagonal
  AlignedBuffer wu;      // [N, C, K+V]   [W | U]
  AlignedBuffer vnew;    // [N, C, V]     V_new (U until the state pass)
  AlignedBuffer kdecay;  // [N, C, K]     diag(e^{Lambda - G}) K
  AlignedBuffer h;       // [N, K, V]     the state entering each chunk
  // backward only
  AlignedBuffer kk;    // [N, C, C]     K K^T
  AlignedBuffer qg;    // [N, C, K]     scale diag(gamma) Q
  AlignedBuffer tinv;  // [N, C, C]     T
  AlignedBuffer dwu;   // [N, C, K+V]   [dW | dU = dV_new]
  AlignedBuffer dh;    // [N, K, V]     dL/dS_{c+1}
  AlignedBuffer dG;    // [N, C]        dL/dG

  Arrays(const GatedDeltaRuleChunkParams& p, bool backward) {
    const int64_t N = p.BH * p.NT, C = p.C, K = p.K, V = p.V;
    G = AlignedBuffer(N * C), decay = AlignedBuffer(N * C * C), wu = AlignedBuffer(N * C * (K + V));
    vnew = AlignedBuffer(N * C * V), kdecay = AlignedBuffer(N * C * K), h = AlignedBuffer(N * K * V);
    if (!backward) return;
    kk = AlignedBuffer(N * C * C), qg = AlignedBuffer(N * C * K), tinv = AlignedBuffer(N * C * C);
    dwu = AlignedBuffer(N * C * (K + V)), dh = AlignedBuffer(N * K * V), dG = AlignedBuffer(N * C);
  }
};

// One block's tiles, indexed by chunk n - n0 (reused from block to block).
struct BlockTiles {
  AlignedBuffer kk;     // [b, C, C]  K K^T (forward; the backward keeps it in Arrays)
  AlignedBuffer tile;   // [b, C, C]
  AlignedBuffer tile2;  // [b, C, C]
  AlignedBuffer kvb;    // [b, C, K+V]  [diag(beta gamma) K | diag(beta) V]; in B2 [dKbg | dVb]
  AlignedBuffer rows;   // [b, C, K]

  explicit BlockTiles(const GatedDeltaRuleChunkParams& p)
      : kk(kBlock * p.C * p.C),
        tile(kBlock * p.C * p.C),
        tile2(kBlock * p.C * p.C),
        kvb(kBlock * p.C * (p.K + p.V)),
        rows(kBlock * p.C * p.K) {}
};

// A gemm operand: base pointer, row stride, batch stride, stored transposed.
struct Operand {
  const float* p;
  int64_t ld, stride;
  bool trans = false;
};

// C[b] = alpha op(A[b]) op(B[b]) + beta C[b] for b < batch; op(A) is M x Kd.
void gemm(int64_t batch, int64_t M, int64_t N, int64_t Kd, Operand a, Operand b, float* c, int64_t ldc,
          int64_t stride_c, float alpha = 1.0f, float beta = 0.0f) {
  cpu::GemmBatch g;
  g.batch = batch, g.M = M, g.N = N, g.K = Kd;
  g.A = a.p, g.lda = a.ld, g.stride_a = a.stride, g.trans_a = a.trans;
  g.B = b.p, g.ldb = b.ld, g.stride_b = b.stride, g.trans_b = b.trans;
  g.C = c, g.ldc = ldc, g.stride_c = stride_c;
  g.alpha = alpha, g.beta = beta;
  cpu::gemm_batched(g);
}

// Runs body(n0, b) for the blocks [n0, n0 + b) of the N chunks, in order.
template <class Body>
void for_each_block(int64_t N, const Body& body) {
  for (int64_t n0 = 0; n0 < N; n0 += kBlock) body(n0, std::min(kBlock, N - n0));
}

// The per-chunk helpers below work on chunk n (rows n * C ... n * C + C - 1); the phases
// run them in one OpenMP loop over a block's chunks.

// The chunk-local cumsum G [C] and the decay matrix Gamma [C, C] of chunk n.
void chunk_decays(const GatedDeltaRuleChunkParams& p, int64_t n, float* G, float* D) {
  const int64_t C = p.C;
  float acc = 0.0f;
  for (int64_t i = 0; i < C; ++i) {
    if (p.g) acc += std::max(p.g[n * C + i], kMinLogDecay);
    G[i] = acc;
  }
  for (int64_t i = 0; i < C; ++i) {
    float* row = D + i * C;
    for (int64_t j = 0; j <= i; ++j) row[j] = exp_nonpositive(G[i] - G[j]);
    std::fill(row + i + 1, row + C, 0.0f);
  }
}

// [diag(beta gamma) K | diag(beta) V] of chunk n into kvb [C, K+V].
void chunk_scaled_kv(const GatedDeltaRuleChunkParams& p, int64_t n, const float* G, float* kvb) {
  const int64_t C = p.C, K = p.K, V = p.V, KV1 = K + V;
  for (int64_t i = 0; i < C; ++i) {
    const int64_t r = n * C + i;
    const float beta = p.beta[r], bg = beta * exp_nonpositive(G[i]);
    const float* k = p.k + r * K;
    const float* v = p.v + r * V;
    float* row = kvb + i * KV1;
    for (int64_t x = 0; x < K; ++x) row[x] = bg * k[x];
    for (int64_t x = 0; x < V; ++x) row[K + x] = beta * v[x];
  }
}

// scale diag(gamma) Q of chunk n into qg [C, K].
void chunk_scaled_q(const GatedDeltaRuleChunkParams& p, int64_t n, const float* G, float* qg) {
  const int64_t C = p.C, K = p.K;
  for (int64_t i = 0; i < C; ++i) {
    const float s = p.scale * exp_nonpositive(G[i]);
    const float* q = p.q + (n * C + i) * K;
    for (int64_t x = 0; x < K; ++x) qg[i * K + x] = s * q[x];
  }
}

// scores *= scale Gamma in place on one C x C tile (select: the upper triangle and
// underflowed decays give exact zeros, whatever the product held there).
void mask_scores(const GatedDeltaRuleChunkParams& p, const float* D, float* scores) {
  for (int64_t x = 0; x < p.C * p.C; ++x) scores[x] = D[x] != 0.0f ? p.scale * scores[x] * D[x] : 0.0f;
}

// 16 floats: one AVX-512 register with -march=native (GCC vector extension).
typedef float Vec16 __attribute__((vector_size(64)));

// T = (I + A)^-1 of chunk n by forward substitution, row by row: T_i = e_i -
// sum_{j<i} A_ij T_j. I + A is unit lower triangular, so T exists. Row j of T is zero
// beyond column j, so 16-column slab v of T_i sums only over 16 v <= j < i; each slab's
// sum runs in four independent accumulators (a single running row would chain every
// update through a store and a reload). The rows are built in `scratch`
// [C * padded16(C) + C] whose row stride is padded to whole vectors.
void invert_unit_lower(const GatedDeltaRuleChunkParams& p, int64_t n, const float* kk, const float* D, float* T,
                       float* scratch) {
  const int64_t C = p.C, Cp = (C + 15) / 16 * 16;
  float* rows = scratch;
  float* a = rows + C * Cp;  // A_ij of the current row i
  const float* beta = p.beta + n * C;
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t j = 0; j < i; ++j) a[j] = beta[i] * kk[i * C + j] * D[i * C + j];
    float* ti = rows + i * Cp;
    for (int64_t x = 0; x < Cp; x += 16) {
      Vec16 acc[4] = {};
      int64_t j = x;
      for (; j + 4 <= i; j += 4)
        for (int64_t u = 0; u < 4; ++u) {
          Vec16 w;
          std::memcpy(&w, rows + (j + u) * Cp + x, sizeof(Vec16));
          acc[u] += a[j + u] * w;
        }
      for (; j < i; ++j) {
        Vec16 w;
        std::memcpy(&w, rows + j * Cp + x, sizeof(Vec16));
        acc[0] += a[j] * w;
      }
      const Vec16 row = -((acc[0] + acc[1]) + (acc[2] + acc[3]));
      std::memcpy(ti + x, &row, sizeof(Vec16));
    }
    ti[i] = 1.0f;
    std::memcpy(T + i * C, ti, C * sizeof(float));
  }
}

// Phase A: G, Gamma, the decayed keys, T, [W | U] and a copy of U of every chunk (and, for the
// backward, K K^T, scale diag(gamma) Q and T kept in a.kk, a.qg, a.tinv).
void phase_a(const GatedDeltaRuleChunkParams& p, Arrays& a, bool backward) {
  const int64_t C = p.C, K = p.K, V = p.V, KV1 = K + V, Cp = (C + 15) / 16 * 16;
  BlockTiles t(p);
  for_each_block(p.BH * p.NT, [&](int64_t n0, int64_t b) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < b; ++m) {
      const int64_t n = n0 + m;
      float* G = a.G.data() + n * C;
      chunk_decays(p, n, G, a.decay.data() + n * C * C);
      chunk_scaled_kv(p, n, G, t.kvb.data() + m * C * KV1);
      if (backward) chunk_scaled_q(p, n, G, a.qg.data() + n * C * K);
      for (int64_t i = 0; i < C; ++i) {
        const int64_t r = n * C + i;
        const float s = exp_nonpositive(G[C - 1] - G[i]);
        for (int64_t x = 0; x < K; ++x) a.kdecay.data()[r * K + x] = s * p.k[r * K + x];
      }
    }
    float* kk = backward ? a.kk.data() + n0 * C * C : t.kk.data();
    gemm(b, C, C, K, {p.k + n0 * C * K, K, C * K}, {p.k + n0 * C * K, K, C * K, true}, kk, C, C * C);
    float* T = backward ? a.tinv.data() + n0 * C * C : t.tile.data();
#pragma omp parallel
    {
      AlignedBuffer scratch(C * Cp + C);
#pragma omp for schedule(static)
      for (int64_t m = 0; m < b; ++m)
        invert_unit_lower(p, n0 + m, kk + m * C * C, a.decay.data() + (n0 + m) * C * C, T + m * C * C, scratch.data());
    }
    float* wu = a.wu.data() + n0 * C * KV1;
    gemm(b, C, KV1, C, {T, C, C * C}, {t.kvb.data(), KV1, C * KV1}, wu, KV1, C * KV1);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < b * C; ++i)
      std::memcpy(a.vnew.data() + (n0 * C + i) * V, wu + i * KV1 + K, V * sizeof(float));
  });
}

// dst[bh] = e^{Lambda(bh, c)} src[bh] for every (b, h): the decay of a state (or of its
// gradient) across chunk c.
void decay_states(const GatedDeltaRuleChunkParams& p, const Arrays& a, int64_t c, const float* src, int64_t src_stride,
                  float* dst, int64_t dst_stride) {
  const int64_t KV = p.K * p.V;
#pragma omp parallel for schedule(static) if (p.BH * KV > (1 << 14))
  for (int64_t bh = 0; bh < p.BH; ++bh) {
    const float e = exp_nonpositive(a.G.data()[(bh * p.NT + c) * p.C + p.C - 1]);
    const float* s = src + bh * src_stride;
    float* d = dst + bh * dst_stride;
    for (int64_t x = 0; x < KV; ++x) d[x] = e * s[x];
  }
}

// The forward state pass: h, V_new (over the copy of U) and, when ht is not null, the final
// state; sequential over chunks, batched over (b, h).
void state_pass(const GatedDeltaRuleChunkParams& p, Arrays& a, float* ht) {
  const int64_t BH = p.BH, NT = p.NT, C = p.C, K = p.K, V = p.V, KV1 = K + V, KV = K * V;
  for (int64_t bh = 0; bh < BH; ++bh) {
    float* h_first = a.h.data() + bh * NT * KV;
    if (p.h0)
      std::memcpy(h_first, p.h0 + bh * KV, KV * sizeof(float));
    else
      std::fill(h_first, h_first + KV, 0.0f);
  }
  for (int64_t c = 0; c < NT; ++c) {
    const float* w = a.wu.data() + c * C * KV1;
    float* vn = a.vnew.data() + c * C * V;
    const float* S = a.h.data() + c * KV;
    // V_new = U - W S_c, in place of the copy of U.
    gemm(BH, C, V, K, {w, KV1, NT * C * KV1}, {S, V, NT * KV}, vn, V, NT * C * V, -1.0f, 1.0f);
    float* next = ht;
    int64_t next_stride = KV;
    if (c + 1 < NT) {
      next = a.h.data() + (c + 1) * KV;
      next_stride = NT * KV;
    }
    if (!next) break;
    // S_{c+1} = e^Lambda S_c + K^T diag(e^{Lambda - G}) V_new.
    decay_states(p, a, c, S, NT * KV, next, next_stride);
    gemm(BH, K, V, C, {a.kdecay.data() + c * C * K, K, NT * C * K, true}, {vn, V, NT * C * V}, next, V, next_stride,
         1.0f, 1.0f);
  }
}

// The reverse state pass: dV_new += diag(e^{Lambda - G}) K dh_c (on top of the local part
// already in dwu) and dh_{c-1} = e^Lambda dh_c + (scale diag(gamma) Q)^T dO - W^T dV_new;
// the last step writes d initial_state into dh0.
void reverse_state_pass(const GatedDeltaRuleChunkParams& p, Arrays& a, const float* d_o, const float* dht, float* dh0) {
  const int64_t BH = p.BH, NT = p.NT, C = p.C, K = p.K, V = p.V, KV1 = K + V, KV = K * V;
  for (int64_t bh = 0; bh < BH; ++bh) {
    float* dh_last = a.dh.data() + (bh * NT + NT - 1) * KV;
    if (dht)
      std::memcpy(dh_last, dht + bh * KV, KV * sizeof(float));
    else
      std::fill(dh_last, dh_last + KV, 0.0f);
  }
  for (int64_t c = NT - 1; c >= 0; --c) {
    const float* dS = a.dh.data() + c * KV;
    float* dvn = a.dwu.data() + c * C * KV1 + K;
    gemm(BH, C, V, K, {a.kdecay.data() + c * C * K, K, NT * C * K}, {dS, V, NT * KV}, dvn, KV1, NT * C * KV1, 1.0f,
         1.0f);
    float* prev = dh0;
    int64_t prev_stride = KV;
    if (c > 0) {
      prev = a.dh.data() + (c - 1) * KV;
      prev_stride = NT * KV;
    }
    decay_states(p, a, c, dS, NT * KV, prev, prev_stride);
    gemm(BH, K, V, C, {a.qg.data() + c * C * K, K, NT * C * K, true}, {d_o + c * C * V, V, NT * C * V}, prev, V,
         prev_stride, 1.0f, 1.0f);
    gemm(BH, K, V, C, {a.wu.data() + c * C * KV1, KV1, NT * C * KV1, true}, {dvn, KV1, NT * C * KV1}, prev, V,
         prev_stride, -1.0f, 1.0f);
  }
}

// Backward phase B1, everything before the reverse state pass: the local dV_new, dq, the
// score part of dk, and the dG terms of the scores and of the readout decay.
//
// dG is summed from terms that each carry their own decay factor (Gamma_ij for pairs
// i > j, gamma_i, e^{Lambda - G_j}), never as q . dq - k . dk: that difference cancels
// O(1) diagonal terms and loses every digit of a dg that strong decay makes tiny (the
// pairwise form of ALGORITHMS.md 2.3, precision note).
void phase_b1(const GatedDeltaRuleChunkParams& p, Arrays& a, const float* d_o, const GatedDeltaRuleChunkGrads& grads) {
  const int64_t C = p.C, K = p.K, V = p.V, KV1 = K + V, KV = K * V;
  BlockTiles t(p);
  for_each_block(p.BH * p.NT, [&](int64_t n0, int64_t b) {
    const float* G = a.G.data() + n0 * C;
    const float* decay = a.decay.data() + n0 * C * C;
    const float* q = p.q + n0 * C * K;
    const float* k = p.k + n0 * C * K;
    const float* dO = d_o + n0 * C * V;
    const float* vnew = a.vnew.data() + n0 * C * V;
    const float* h = a.h.data() + n0 * KV;
    float* dq = grads.dq + n0 * C * K;
    float* dG = a.dG.data() + n0 * C;
    // dV_new, local part: (scale Q K^T o Gamma o M)^T dO.
    float* scores = t.tile.data();
    gemm(b, C, C, K, {q, K, C * K}, {k, K, C * K, true}, scores, C, C * C);
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < b; ++m) mask_scores(p, decay + m * C * C, scores + m * C * C);
    gemm(b, C, V, C, {scores, C, C * C, true}, {dO, V, C * V}, a.dwu.data() + n0 * C * KV1 + K, KV1, C * KV1);
    // Score pairs i > j: scale Gamma_ij (q_i . k_j)(dO_i . V_new_j) adds to dG_i and
    // subtracts from dG_j. Then P = scale (dO V_new^T) o Gamma o M in place.
    float* P = t.tile2.data();
    gemm(b, C, C, V, {dO, V, C * V}, {vnew, V, C * V, true}, P, C, C * C);
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < b; ++m) {
      const float* sc = scores + m * C * C;
      const float* D = decay + m * C * C;
      float* pm = P + m * C * C;
      float* dg = dG + m * C;
      std::fill(dg, dg + C, 0.0f);
      for (int64_t i = 0; i < C; ++i) {
        float acc = 0.0f;
        for (int64_t j = 0; j < i; ++j) {
          const float term = sc[i * C + j] * pm[i * C + j];
          acc += term;
          dg[j] -= term;
        }
        dg[i] += acc;
      }
      mask_scores(p, D, pm);
    }
    // dQ = scale diag(gamma) dO S_c^T + P K; the first term gives dG_i += q_i . dq_i^inter.
    gemm(b, C, K, V, {dO, V, C * V}, {h, V, KV, true}, dq, K, C * K);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < b * C; ++i) {
      const float s = p.scale * exp_nonpositive(G[i]);
      for (int64_t x = 0; x < K; ++x) dq[i * K + x] *= s;
      dG[i] += dot(q + i * K, dq + i * K, K);
    }
    gemm(b, C, K, C, {P, C, C * C}, {k, K, C * K}, dq, K, C * K, 1.0f, 1.0f);
    // dK, score part: P^T Q.
    gemm(b, C, K, C, {P, C, C * C, true}, {q, K, C * K}, grads.dk + n0 * C * K, K, C * K);
  });
}

// Backward phase B2, after the reverse state pass: the inter-chunk part of dk with the dG
// terms of the state and write decays, then the WY backward (dW, dA) giving the rest
// of dk, dv, dbeta and dG, and finally dg.
void phase_b2(const GatedDeltaRuleChunkParams& p, Arrays& a, const GatedDeltaRuleChunkGrads& grads) {
  const int64_t NT = p.NT, C = p.C, K = p.K, V = p.V, KV1 = K + V, KV = K * V;
  BlockTiles t(p);
  for_each_block(p.BH * NT, [&](int64_t n0, int64_t b) {
    const float* G_block = a.G.data() + n0 * C;
    const float* decay = a.decay.data() + n0 * C * C;
    const float* k = p.k + n0 * C * K;
    const float* vnew = a.vnew.data() + n0 * C * V;
    const float* h = a.h.data() + n0 * KV;
    const float* dh = a.dh.data() + n0 * KV;
    float* dwu = a.dwu.data() + n0 * C * KV1;
    float* dk = grads.dk + n0 * C * K;
    float* dG = a.dG.data() + n0 * C;
    // dK^inter = diag(e^{Lambda - G}) V_new dh_c^T. The state decay e^Lambda and the write
    // decays e^{Lambda - G_j} put e^Lambda <S_c, dh_c> on Lambda = G_last and the pairs
    // (last, j), j < last, with k_j . dk_j^inter (last: the last valid row; the pair
    // (last, last) has no decay and is left out).
    float* dk_inter = t.rows.data();
    gemm(b, C, K, V, {vnew, V, C * V}, {dh, V, KV, true}, dk_inter, K, C * K);
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < b; ++m) {
      const int64_t n = n0 + m;
      const float* G = G_block + m * C;
      const float lambda = G[C - 1];
      const int64_t last = std::min(C, p.T - (n % NT) * C) - 1;
      float* dg = dG + m * C;
      float acc = exp_nonpositive(lambda) * dot(h + m * KV, dh + m * KV, KV);
      for (int64_t i = 0; i < C; ++i) {
        const float s = exp_nonpositive(lambda - G[i]);
        const int64_t r = m * C + i;
        for (int64_t x = 0; x < K; ++x) dk_inter[r * K + x] *= s;
        if (i < last) {
          const float term = dot(k + r * K, dk_inter + r * K, K);
          acc += term;
          dg[i] -= term;
        }
        for (int64_t x = 0; x < K; ++x) dk[r * K + x] += dk_inter[r * K + x];
      }
      dg[last] += acc;
    }
    // dW = -dV_new S_c^T, the left part of [dW | dU].
    gemm(b, C, K, V, {dwu + K, KV1, C * KV1}, {h, V, KV, true}, dwu, KV1, C * KV1, -1.0f);
    // WY backward: [dKbg | dVb] = T^T [dW | dU], dA = -[dKbg | dVb] [W | U]^T.
    const float* T = a.tinv.data() + n0 * C * C;
    float* dkvb = t.kvb.data();
    gemm(b, C, KV1, C, {T, C, C * C, true}, {dwu, KV1, C * KV1}, dkvb, KV1, C * KV1);
    float* dA = t.tile.data();
    gemm(b, C, C, KV1, {dkvb, KV1, C * KV1}, {a.wu.data() + n0 * C * KV1, KV1, C * KV1, true}, dA, C, C * C, -1.0f);

    float* Esym = t.tile2.data();
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < b; ++m) {
      const float* beta = p.beta + (n0 + m) * C;
      const float* kk = a.kk.data() + (n0 + m) * C * C;
      const float* D = decay + m * C * C;
      const float* da = dA + m * C * C;
      float* E = Esym + m * C * C;
      float* dg = dG + m * C;
      float* dbeta = grads.dbeta + (n0 + m) * C;
      for (int64_t i = 0; i < C; ++i) {
        const int64_t r = (n0 + m) * C + i;
        const float gamma = exp_nonpositive(G_block[m * C + i]), bi = beta[i];
        const float* dkbg = dkvb + (m * C + i) * KV1;
        const float sk = dot(dkbg, p.k + r * K, K);
        float* dk_r = grads.dk + r * K;
        for (int64_t x = 0; x < K; ++x) dk_r[x] += bi * gamma * dkbg[x];
        float* dv = grads.dv + r * V;
        for (int64_t x = 0; x < V; ++x) dv[x] = bi * dkbg[K + x];
        dbeta[i] = gamma * sk + dot(dkbg + K, p.v + r * V, V);
        dg[i] += bi * gamma * sk;
      }
      // Through A_ij = beta_i (k_i . k_j) Gamma_ij, i > j.
      for (int64_t i = 0; i < C; ++i) {
        float db = 0.0f, dgi = 0.0f;
        for (int64_t j = 0; j < i; ++j) {
          const float e = da[i * C + j] * D[i * C + j];
          const float ekk = e * kk[i * C + j];
          db += ekk;
          dgi += beta[i] * ekk;
          dg[j] -= beta[i] * ekk;
          E[i * C + j] = beta[i] * e;
          E[j * C + i] = beta[i] * e;
        }
        E[i * C + i] = 0.0f;
        dbeta[i] += db;
        dg[i] += dgi;
      }
      if (grads.dg) {
        float* out = grads.dg + (n0 + m) * C;
        float acc = 0.0f;
        for (int64_t i = C - 1; i >= 0; --i) {
          acc += dg[i];
          out[i] = acc;
        }
      }
    }
    gemm(b, C, K, C, {Esym, C, C * C}, {k, K, C * K}, dk, K, C * K, 1.0f, 1.0f);
  });
}

}  // namespace

void gated_delta_rule_chunk_forward_cpu(const GatedDeltaRuleChunkParams& p, float* o, float* ht) {
  Arrays a(p, false);
  phase_a(p, a, false);
  state_pass(p, a, ht);
  // Phase B: O = (scale Q K^T o Gamma o M) V_new + scale diag(gamma) Q S_c.
  const int64_t C = p.C, K = p.K, V = p.V;
  BlockTiles t(p);
  for_each_block(p.BH * p.NT, [&](int64_t n0, int64_t b) {
    float* scores = t.tile.data();
    gemm(b, C, C, K, {p.q + n0 * C * K, K, C * K}, {p.k + n0 * C * K, K, C * K, true}, scores, C, C * C);
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < b; ++m) {
      mask_scores(p, a.decay.data() + (n0 + m) * C * C, scores + m * C * C);
      chunk_scaled_q(p, n0 + m, a.G.data() + (n0 + m) * C, t.rows.data() + m * C * K);
    }
    float* out = o + n0 * C * V;
    gemm(b, C, V, C, {scores, C, C * C}, {a.vnew.data() + n0 * C * V, V, C * V}, out, V, C * V);
    gemm(b, C, V, K, {t.rows.data(), K, C * K}, {a.h.data() + n0 * K * V, V, K * V}, out, V, C * V, 1.0f, 1.0f);
  });
}

void gated_delta_rule_chunk_backward_cpu(const GatedDeltaRuleChunkParams& p, const float* d_o, const float* dht,
                                         const GatedDeltaRuleChunkGrads& grads) {
  Arrays a(p, true);
  phase_a(p, a, true);
  state_pass(p, a, nullptr);
  phase_b1(p, a, d_o, grads);
  AlignedBuffer dh0_scratch(grads.dh0 ? 0 : p.BH * p.K * p.V);
  reverse_state_pass(p, a, d_o, dht, grads.dh0 ? grads.dh0 : dh0_scratch.data());
  phase_b2(p, a, grads);
}

}  // namespace lat::linear_attention
