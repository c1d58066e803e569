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
//   dT = [dW | dU] [diag(beta gamma) K | diag(beta) V]^T, strictly lower;  dA = -T^T dT T^T
//   [dKbg | dVb] = T^T [dW | dU]:  dk += beta gamma dKbg,  dv = beta dVb,
//       dbeta = gamma (dKbg . k) + dVb . v,  dG += beta gamma (dKbg . k)
//   through A_ij = beta_i (k_i . k_j) Gamma_ij with E = dA o Gamma (i > j):
//       dbeta_i += sum_j E_ij (k_i . k_j),  dK += (diag(beta) E + (diag(beta) E)^T) K,
//       dG_i += sum_j dA_ij A_ij - sum_j dA_ji A_ji
//   dg = reverse cumsum of dG within the chunk.
// All per-chunk products are batched over every (b, h, chunk) into one oneDNN gemm each;
// only the two state passes walk the chunks in order, batched over (b, h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "autograd/cpu/gemm.h"
#include "layers/linear_attention/chunk_gated_delta_rule.h"

namespace lat::linear_attention {
namespace {

// exp(x) for x <= 0 in plain arithmetic, so that loops over it vectorize (Cephes expf:
// range reduction by ln 2 and a degree-6 polynomial, about 1 ulp). Returns 0 below -87,
// where expf turns denormal.
inline float exp_nonpositive(float x) {
  const float xc = std::max(x, -87.0f);
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : y * two_n;
}

// Uninitialized, 64-byte aligned float scratch.
class Buffer {
 public:
  explicit Buffer(int64_t n)
      : data_(static_cast<float*>(std::aligned_alloc(64, (std::max<size_t>(n, 1) * sizeof(float) + 63) / 64 * 64))) {
    LAT_CHECK(data_ != nullptr, "chunk_gated_delta_rule: out of memory allocating " << n << " floats");
  }
  float* get() const { return data_.get(); }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
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

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The forward intermediates, indexed by chunk n = bh * NT + c (so every per-chunk array
// has one batch stride).
struct Chunks {
  int64_t BH, NT, C, K, V, N, KV1;
  Buffer G;       // [N, C]        chunk-local inclusive cumsum of g
  Buffer decay;   // [N, C, C]     Gamma_ij (i >= j), 0 above the diagonal
  Buffer kk;      // [N, C, C]     K K^T
  Buffer tinv;    // [N, C, C]     T = (I + A)^-1
  Buffer kvb;     // [N, C, K+V]   [diag(beta gamma) K | diag(beta) V]
  Buffer wu;      // [N, C, K+V]   [W | U], U overwritten by V_new in the state pass
  Buffer kdecay;  // [N, C, K]     diag(e^{Lambda - G}) K
  Buffer qg;      // [N, C, K]     scale diag(gamma) Q
  Buffer h;       // [N, K, V]     state entering each chunk

  explicit Chunks(const GatedDeltaRuleChunkParams& p)
      : BH(p.BH), NT(p.NT), C(p.C), K(p.K), V(p.V), N(p.BH * p.NT), KV1(p.K + p.V),
        G(N * C), decay(N * C * C), kk(N * C * C), tinv(N * C * C), kvb(N * C * KV1), wu(N * C * KV1),
        kdecay(N * C * K), qg(N * C * K), h(N * K * V) {}
};

// Cumulative decays, the decay matrix and the diagonally scaled copies of q, k, v.
void prepare(const GatedDeltaRuleChunkParams& p, Chunks& f) {
  const int64_t C = f.C, K = f.K, V = f.V, KV1 = f.KV1;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < f.N; ++n) {
    float* G = f.G.get() + n * C;
    float acc = 0.0f;
    for (int64_t i = 0; i < C; ++i) {
      if (p.g) acc += p.g[n * C + i];
      G[i] = acc;
    }
    const float lambda = G[C - 1];
    float* D = f.decay.get() + n * C * C;
    for (int64_t i = 0; i < C; ++i) {
      float* row = D + i * C;
      for (int64_t j = 0; j <= i; ++j) row[j] = exp_nonpositive(G[i] - G[j]);
      std::fill(row + i + 1, row + C, 0.0f);
    }
    for (int64_t i = 0; i < C; ++i) {
      const int64_t r = n * C + i;
      const float gamma = exp_nonpositive(G[i]), b = p.beta[r];
      const float bg = b * gamma, kd = exp_nonpositive(lambda - G[i]), sq = p.scale * gamma;
      const float* k = p.k + r * K;
      const float* q = p.q + r * K;
      const float* v = p.v + r * V;
      float* kvb = f.kvb.get() + r * KV1;
      float* kdecay = f.kdecay.get() + r * K;
      float* qg = f.qg.get() + r * K;
      for (int64_t x = 0; x < K; ++x) {
        kvb[x] = bg * k[x];
        kdecay[x] = kd * k[x];
        qg[x] = sq * q[x];
      }
      for (int64_t x = 0; x < V; ++x) kvb[K + x] = b * v[x];
    }
  }
}

// T = (I + A)^-1 by forward substitution, row by row: T_i = e_i - sum_{j<i} A_ij T_j
// (row j of T is zero beyond column j). I + A is unit lower triangular, so T exists.
void invert_unit_lower(const GatedDeltaRuleChunkParams& p, Chunks& f) {
  const int64_t C = f.C;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < f.N; ++n) {
    const float* kk = f.kk.get() + n * C * C;
    const float* D = f.decay.get() + n * C * C;
    const float* beta = p.beta + n * C;
    float* T = f.tinv.get() + n * C * C;
    for (int64_t i = 0; i < C; ++i) {
      float* ti = T + i * C;
      std::fill(ti, ti + C, 0.0f);
      ti[i] = 1.0f;
      for (int64_t j = 0; j < i; ++j) {
        const float a = beta[i] * kk[i * C + j] * D[i * C + j];
        const float* tj = T + j * C;
        for (int64_t x = 0; x <= j; ++x) ti[x] -= a * tj[x];
      }
    }
  }
}

// dst[bh] = e^{Lambda(bh, c)} src[bh] for every (b, h): the decay of a state (or of its
// gradient) across chunk c.
void decay_states(const Chunks& f, int64_t c, const float* src, int64_t src_stride, float* dst,
                  int64_t dst_stride) {
  const int64_t KV = f.K * f.V;
#pragma omp parallel for schedule(static) if (f.BH * KV > (1 << 14))
  for (int64_t bh = 0; bh < f.BH; ++bh) {
    const float e = exp_nonpositive(f.G.get()[(bh * f.NT + c) * f.C + f.C - 1]);
    const float* s = src + bh * src_stride;
    float* d = dst + bh * dst_stride;
    for (int64_t x = 0; x < KV; ++x) d[x] = e * s[x];
  }
}

// Everything up to the states: prepare, K K^T, T, [W | U], then the sequential state pass
// (h, V_new and, when ht is not null, the final state).
void forward_states(const GatedDeltaRuleChunkParams& p, Chunks& f, float* ht) {
  const int64_t BH = f.BH, NT = f.NT, N = f.N, C = f.C, K = f.K, V = f.V, KV1 = f.KV1, KV = K * V;
  prepare(p, f);
  gemm(N, C, C, K, {p.k, K, C * K}, {p.k, K, C * K, true}, f.kk.get(), C, C * C);
  invert_unit_lower(p, f);
  gemm(N, C, KV1, C, {f.tinv.get(), C, C * C}, {f.kvb.get(), KV1, C * KV1}, f.wu.get(), KV1, C * KV1);

  float* h = f.h.get();
  for (int64_t bh = 0; bh < BH; ++bh) {
    float* h_first = h + bh * NT * KV;
    if (p.h0)
      std::memcpy(h_first, p.h0 + bh * KV, KV * sizeof(float));
    else
      std::fill(h_first, h_first + KV, 0.0f);
  }
  for (int64_t c = 0; c < NT; ++c) {
    float* w = f.wu.get() + c * C * KV1;
    const float* S = h + c * KV;
    // V_new = U - W S_c, in place of U.
    gemm(BH, C, V, K, {w, KV1, NT * C * KV1}, {S, V, NT * KV}, w + K, KV1, NT * C * KV1, -1.0f, 1.0f);
    float* next = ht;
    int64_t next_stride = KV;
    if (c + 1 < NT) {
      next = h + (c + 1) * KV;
      next_stride = NT * KV;
    }
    if (!next) break;
    // S_{c+1} = e^Lambda S_c + K^T diag(e^{Lambda - G}) V_new.
    decay_states(f, c, S, NT * KV, next, next_stride);
    gemm(BH, K, V, C, {f.kdecay.get() + c * C * K, K, NT * C * K, true}, {w + K, KV1, NT * C * KV1}, next, V,
         next_stride, 1.0f, 1.0f);
  }
}

// scores[n] = scale (a[n] b[n]^T) o Gamma o M: the masked, decayed C x C score tiles.
void masked_scores(const Chunks& f, Operand a, Operand b, int64_t inner, float scale, float* scores) {
  const int64_t C = f.C;
  gemm(f.N, C, C, inner, a, b, scores, C, C * C);
  const float* D = f.decay.get();
  const int64_t total = f.N * C * C;
#pragma omp parallel for schedule(static)
  for (int64_t x = 0; x < total; ++x) scores[x] = D[x] != 0.0f ? scale * scores[x] * D[x] : 0.0f;
}

}  // namespace

void gated_delta_rule_chunk_forward_cpu(const GatedDeltaRuleChunkParams& p, float* o, float* ht) {
  Chunks f(p);
  forward_states(p, f, ht);
  const int64_t N = f.N, C = f.C, K = f.K, V = f.V, KV1 = f.KV1;
  Buffer scores(N * C * C);
  masked_scores(f, {p.q, K, C * K}, {p.k, K, C * K, true}, K, p.scale, scores.get());
  // O = (scale Q K^T o Gamma o M) V_new + scale diag(gamma) Q S_c.
  gemm(N, C, V, C, {scores.get(), C, C * C}, {f.wu.get() + K, KV1, C * KV1}, o, V, C * V);
  gemm(N, C, V, K, {f.qg.get(), K, C * K}, {f.h.get(), V, K * V}, o, V, C * V, 1.0f, 1.0f);
}

void gated_delta_rule_chunk_backward_cpu(const GatedDeltaRuleChunkParams& p, const float* d_o, const float* dht,
                                         const GatedDeltaRuleChunkGrads& grads) {
  Chunks f(p);
  forward_states(p, f, nullptr);
  const int64_t BH = f.BH, NT = f.NT, N = f.N, C = f.C, K = f.K, V = f.V, KV1 = f.KV1, KV = K * V;
  const float* h = f.h.get();
  const float* vnew = f.wu.get() + K;  // V_new rows, stride KV1
  Buffer tile(N * C * C), tile2(N * C * C), dwu(N * C * KV1), dh(N * KV), dG(N * C);
  Buffer dh0_scratch(grads.dh0 ? 0 : BH * KV);
  float* dh0 = grads.dh0 ? grads.dh0 : dh0_scratch.get();
  float* dvnew = dwu.get() + K;  // dU = dV_new, the right part of [dW | dU]

  // dV_new, local part: (scale Q K^T o Gamma o M)^T dO.
  masked_scores(f, {p.q, K, C * K}, {p.k, K, C * K, true}, K, p.scale, tile.get());
  gemm(N, C, V, C, {tile.get(), C, C * C, true}, {d_o, V, C * V}, dvnew, KV1, C * KV1);

  // Reverse state pass: dh[n] = dL/dS_{c+1} for n = bh * NT + c.
  for (int64_t bh = 0; bh < BH; ++bh) {
    float* dh_last = dh.get() + (bh * NT + NT - 1) * KV;
    if (dht)
      std::memcpy(dh_last, dht + bh * KV, KV * sizeof(float));
    else
      std::fill(dh_last, dh_last + KV, 0.0f);
  }
  for (int64_t c = NT - 1; c >= 0; --c) {
    const float* dS = dh.get() + c * KV;
    float* dvn = dvnew + c * C * KV1;
    gemm(BH, C, V, K, {f.kdecay.get() + c * C * K, K, NT * C * K}, {dS, V, NT * KV}, dvn, KV1, NT * C * KV1, 1.0f,
         1.0f);
    float* prev = dh0;
    int64_t prev_stride = KV;
    if (c > 0) {
      prev = dh.get() + (c - 1) * KV;
      prev_stride = NT * KV;
    }
    decay_states(f, c, dS, NT * KV, prev, prev_stride);
    gemm(BH, K, V, C, {f.qg.get() + c * C * K, K, NT * C * K, true}, {d_o + c * C * V, V, NT * C * V}, prev, V,
         prev_stride, 1.0f, 1.0f);
    gemm(BH, K, V, C, {f.wu.get() + c * C * KV1, KV1, NT * C * KV1, true}, {dvn, KV1, NT * C * KV1}, prev, V,
         prev_stride, -1.0f, 1.0f);
  }

  // dG, the gradient w.r.t. the chunk-local cumsum G, is summed from terms that each carry
  // their own decay factor (Gamma_ij for pairs i > j, gamma_i, e^{Lambda - G_j}), never as
  // q . dq - k . dk: that difference cancels O(1) diagonal terms and loses every digit of a
  // dg that strong decay makes tiny (the pairwise form of ALGORITHMS.md 2.3, precision note).
  // Output scores, pairs i > j: scale Gamma_ij (q_i . k_j)(dO_i . V_new_j) adds to dG_i and
  // subtracts from dG_j. Then P = scale (dO V_new^T) o Gamma o M in place.
  const float* scores = tile.get();
  float* P = tile2.get();
  gemm(N, C, C, V, {d_o, V, C * V}, {vnew, KV1, C * KV1, true}, P, C, C * C);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* sc = scores + n * C * C;
    const float* D = f.decay.get() + n * C * C;
    float* pn = P + n * C * C;
    float* dg = dG.get() + n * C;
    std::fill(dg, dg + C, 0.0f);
    for (int64_t i = 0; i < C; ++i) {
      float acc = 0.0f;
      for (int64_t j = 0; j < i; ++j) {
        const float t = sc[i * C + j] * pn[i * C + j];
        acc += t;
        dg[j] -= t;
      }
      dg[i] += acc;
      for (int64_t j = 0; j < C; ++j) pn[i * C + j] = D[i * C + j] != 0.0f ? p.scale * pn[i * C + j] * D[i * C + j] : 0.0f;
    }
  }
  // dQ = scale diag(gamma) dO S_c^T + P K; the first term gives dG_i += q_i . dq_i^inter.
  gemm(N, C, K, V, {d_o, V, C * V}, {h, V, KV, true}, grads.dq, K, C * K);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < C; ++i) {
      const int64_t r = n * C + i;
      const float s = p.scale * exp_nonpositive(f.G.get()[r]);
      float* dq = grads.dq + r * K;
      for (int64_t x = 0; x < K; ++x) dq[x] *= s;
      dG.get()[r] += dot(p.q + r * K, dq, K);
    }
  gemm(N, C, K, C, {P, C, C * C}, {p.k, K, C * K}, grads.dq, K, C * K, 1.0f, 1.0f);
  // dK = diag(e^{Lambda - G}) V_new dh_c^T + P^T Q. The state decay e^Lambda and the write
  // decays e^{Lambda - G_j} put e^Lambda <S_c, dh_c> on Lambda = G_last and the pairs
  // (last, j), j < last, with k_j . dk_j^inter (last: the last valid row; the pair
  // (last, last) has no decay and is left out).
  gemm(N, C, K, V, {vnew, KV1, C * KV1}, {dh.get(), V, KV, true}, grads.dk, K, C * K);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* G = f.G.get() + n * C;
    const float lambda = G[C - 1];
    const int64_t last = std::min(C, p.T - (n % NT) * C) - 1;
    float* dg = dG.get() + n * C;
    float acc = exp_nonpositive(lambda) * dot(h + n * KV, dh.get() + n * KV, KV);
    for (int64_t i = 0; i < C; ++i) {
      const float s = exp_nonpositive(lambda - G[i]);
      float* dk = grads.dk + (n * C + i) * K;
      for (int64_t x = 0; x < K; ++x) dk[x] *= s;
      if (i < last) {
        const float t = dot(p.k + (n * C + i) * K, dk, K);
        acc += t;
        dg[i] -= t;
      }
    }
    dg[last] += acc;
  }
  gemm(N, C, K, C, {P, C, C * C, true}, {p.q, K, C * K}, grads.dk, K, C * K, 1.0f, 1.0f);

  // dW = -dV_new S_c^T, the left part of [dW | dU].
  gemm(N, C, K, V, {dvnew, KV1, C * KV1}, {h, V, KV, true}, dwu.get(), KV1, C * KV1, -1.0f);
  // WY backward: dT (strictly lower), dA = -T^T dT T^T, [dKbg | dVb] = T^T [dW | dU].
  float* dT = tile.get();  // the scores are no longer needed
  gemm(N, C, C, KV1, {dwu.get(), KV1, C * KV1}, {f.kvb.get(), KV1, C * KV1, true}, dT, C, C * C);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < C; ++i) std::fill(dT + (n * C + i) * C + i, dT + (n * C + i + 1) * C, 0.0f);
  const float* T = f.tinv.get();
  gemm(N, C, C, C, {T, C, C * C, true}, {dT, C, C * C}, tile2.get(), C, C * C);
  float* dA = tile.get();
  gemm(N, C, C, C, {tile2.get(), C, C * C}, {T, C, C * C, true}, dA, C, C * C, -1.0f);
  float* dkvb = f.kvb.get();  // [diag(beta gamma) K | diag(beta) V] is no longer needed
  gemm(N, C, KV1, C, {T, C, C * C, true}, {dwu.get(), KV1, C * KV1}, dkvb, KV1, C * KV1);

  float* Esym = tile2.get();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* G = f.G.get() + n * C;
    const float* beta = p.beta + n * C;
    const float* kk = f.kk.get() + n * C * C;
    const float* D = f.decay.get() + n * C * C;
    const float* da = dA + n * C * C;
    float* E = Esym + n * C * C;
    float* dg = dG.get() + n * C;
    float* dbeta = grads.dbeta + n * C;
    for (int64_t i = 0; i < C; ++i) {
      const int64_t r = n * C + i;
      const float gamma = exp_nonpositive(G[i]), b = beta[i];
      const float* dkbg = dkvb + r * KV1;
      const float sk = dot(dkbg, p.k + r * K, K);
      float* dk = grads.dk + r * K;
      for (int64_t x = 0; x < K; ++x) dk[x] += b * gamma * dkbg[x];
      float* dv = grads.dv + r * V;
      for (int64_t x = 0; x < V; ++x) dv[x] = b * dkbg[K + x];
      dbeta[i] = gamma * sk + dot(dkbg + K, p.v + r * V, V);
      dg[i] += b * gamma * sk;
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
  }
  gemm(N, C, K, C, {Esym, C, C * C}, {p.k, K, C * K}, grads.dk, K, C * K, 1.0f, 1.0f);

  if (grads.dg) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* dG_n = dG.get() + n * C;
      float* dg = grads.dg + n * C;
      float acc = 0.0f;
      for (int64_t i = C - 1; i >= 0; --i) {
        acc += dG_n[i];
        dg[i] = acc;
      }
    }
  }
}

}  // namespace lat::linear_attention
