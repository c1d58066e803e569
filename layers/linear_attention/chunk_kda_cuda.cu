// CUDA kernels of chunkwise KDA, forward and backward, and the CUDA form of
// fused_recurrent_kda (kda_kernels.h). The math is chunk_kda_cpu.cpp's, term for term
// (ALGORITHMS.md 2.7; its file comment derives the backward); this file keeps its
// letters: per chunk G [C, K] the chunk-local cumsum of max(g, -100) per channel,
// E = e^G, Lambda = G_{C-1}, wdec = e^{Lambda - G}, M and Qm the key-key and query-key
// pair products with per-channel decay, Tm = (I + diag(beta) M)^-1, W = Tm diag(beta) (K o E),
// U = Tm diag(beta) V, V_new = U - W S.
//
// Schedule: one block per (batch, head) walks its chunks in order (the state passes are
// sequential anyway), every product of a chunk spread over the block's threads element by
// element, the chunk's tiles in a per-block workspace in global memory (so K and V are not
// bounded by shared memory; the caches hold a chunk's tiles). Simple rather than fast: the
// pair decays e^{G_ic - G_jc} are formed elementwise for every pair j <= i only, so every
// exponent is <= 0 and nothing above the diagonal is ever exponentiated, for any decay.
//
// The forward keeps nothing but the L2-normalized q and k (when asked for); the backward
// reruns the forward state pass to get the state entering each chunk ([BH, NT, K, V]),
// then walks the chunks in reverse. fused_recurrent_kda on CUDA runs the recurrence token
// by token (one thread per state column) and shares the chunk backward (same gradients).
#include <utility>

#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "layers/linear_attention/chunk_cuda_common.cuh"
#include "layers/linear_attention/kda_kernels.h"

namespace lat::linear_attention {
namespace {

// Largest key dim of the CUDA kernels (as the gated delta rule's, chunk_cuda.h).
constexpr int64_t kMaxK = 256;
// Largest chunk size (the chunk's beta sits in a fixed shared array).
constexpr int64_t kMaxC = 64;
// Log-decays below this act as this value (as chunk_kda_cpu.cpp: -inf would make
// G_i - G_j = -inf - (-inf) = NaN).
constexpr float kMinLogDecay = -100.0f;

// Sizes of one call and its API-layout strides.
struct KdaDims {
  int64_t T, H, K, V, C, NT;
  float scale;
};

// e^x for x <= 0 (the callers' exponents are <= 0 up to rounding; the clamp keeps it so).
__device__ __forceinline__ float decay_exp(float x) { return expf(fminf(x, 0.0f)); }

// Per-block workspace of the forward pass of one chunk, in floats from `base`.
struct ChunkTiles {
  float *q, *k, *G, *E, *wdec, *W;  // [C, K]
  float *M, *Tm, *Qm;               // [C, C]
  float *v, *vn;                    // [C, V]: v, then U and V_new in vn
  __device__ ChunkTiles(float* base, const KdaDims& d) {
    const int64_t CK = d.C * d.K, CC = d.C * d.C, CV = d.C * d.V;
    q = base, k = q + CK, G = k + CK, E = G + CK, wdec = E + CK, W = wdec + CK;
    M = W + CK, Tm = M + CC, Qm = Tm + CC;
    v = Qm + CC, vn = v + CV;
  }
  static constexpr int64_t floats(int64_t C, int64_t K, int64_t V) { return 6 * C * K + 3 * C * C + 2 * C * V; }
};

// The backward's further tiles, after a ChunkTiles.
struct GradTiles {
  float *dq, *dk, *dG, *dW, *dkb;  // [C, K]
  float *F, *dAM;                  // [C, C]: dQ then diag(beta) dA; dA o M
  float *dO, *dvn, *u, *dbv;       // [C, V]
  float* dlam;                     // [K]
  __device__ GradTiles(float* base, const KdaDims& d) {
    const int64_t CK = d.C * d.K, CC = d.C * d.C, CV = d.C * d.V;
    dq = base, dk = dq + CK, dG = dk + CK, dW = dG + CK, dkb = dW + CK;
    F = dkb + CK, dAM = F + CC;
    dO = dAM + CC, dvn = dO + CV, u = dvn + CV, dbv = u + CV;
    dlam = dbv + CV;
  }
  static constexpr int64_t floats(int64_t C, int64_t K, int64_t V) { return 5 * C * K + 2 * C * C + 4 * C * V + K; }
};

// Row of token t of head bh in the [B, T, H] layout.
__device__ __forceinline__ int64_t token_row(const KdaDims& d, int64_t bh, int64_t t) {
  return ((bh / d.H) * d.T + t) * d.H + bh % d.H;
}

// Valid rows of chunk c.
__device__ __forceinline__ int64_t rows_of(const KdaDims& d, int64_t c) { return min(d.C, d.T - c * d.C); }

// Loads chunk c of head bh (rows past T: q = k = v = beta = 0, g = 0) and computes G, E,
// wdec, M, Qm, Tm, W and U (in t.vn). beta_s [C] in shared memory. Ends synchronized.
__device__ void chunk_prepare(const KdaDims& d, const KdaParams& p, const float* q, const float* k, int64_t bh,
                              int64_t c, const ChunkTiles& t, float* beta_s) {
  const int64_t C = d.C, K = d.K, V = d.V, rows = rows_of(d, c), tid = threadIdx.x, nt = blockDim.x;
  for (int64_t e = tid; e < C * K; e += nt) {
    const int64_t i = e / K, ch = e % K;
    const bool in = i < rows;
    const int64_t at = in ? token_row(d, bh, c * C + i) * K + ch : 0;
    t.q[e] = in ? q[at] : 0.0f;
    t.k[e] = in ? k[at] : 0.0f;
    t.G[e] = in ? fmaxf(p.gk[at], kMinLogDecay) : 0.0f;
  }
  for (int64_t e = tid; e < C * V; e += nt) {
    const int64_t i = e / V;
    t.v[e] = i < rows ? p.v[token_row(d, bh, c * C + i) * V + e % V] : 0.0f;
  }
  for (int64_t i = tid; i < C; i += nt) beta_s[i] = i < rows ? p.beta[token_row(d, bh, c * C + i)] : 0.0f;
  __syncthreads();
  for (int64_t ch = tid; ch < K; ch += nt)
    for (int64_t i = 1; i < C; ++i) t.G[i * K + ch] += t.G[(i - 1) * K + ch];
  __syncthreads();
  for (int64_t e = tid; e < C * K; e += nt) {
    t.E[e] = decay_exp(t.G[e]);
    t.wdec[e] = decay_exp(t.G[(C - 1) * K + e % K] - t.G[e]);
  }
  // The pairs j <= i only: M_ij = sum_c k_ic k_jc e^{G_ic - G_jc} (j < i), Qm likewise with q_i (j <= i).
  for (int64_t e = tid; e < C * C; e += nt) {
    const int64_t i = e / C, j = e % C;
    float m = 0.0f, qm = 0.0f;
    if (j <= i) {
      const float *gi = t.G + i * K, *gj = t.G + j * K, *ki = t.k + i * K, *kj = t.k + j * K, *qi = t.q + i * K;
      for (int64_t ch = 0; ch < K; ++ch) {
        const float x = kj[ch] * decay_exp(gi[ch] - gj[ch]);
        m += ki[ch] * x;
        qm += qi[ch] * x;
      }
    }
    t.M[e] = j < i ? m : 0.0f;
    t.Qm[e] = qm;
  }
  __syncthreads();
  // Tm = (I + diag(beta) M)^-1 by forward substitution, one column per thread:
  // Tm_i,col = [i == col] - sum_{col <= j < i} beta_i M_ij Tm_j,col.
  for (int64_t col = tid; col < C; col += nt)
    for (int64_t i = 0; i < C; ++i) {
      float x = i == col ? 1.0f : 0.0f;
      if (i > col) {
        for (int64_t j = col; j < i; ++j) x -= t.M[i * C + j] * t.Tm[j * C + col];
        x *= beta_s[i];
      }
      t.Tm[i * C + col] = x;
    }
  __syncthreads();
  // W = Tm diag(beta) (K o E), U = Tm diag(beta) V (Tm lower: j <= i).
  for (int64_t e = tid; e < C * K; e += nt) {
    const int64_t i = e / K, ch = e % K;
    float w = 0.0f;
    for (int64_t j = 0; j <= i; ++j) w += t.Tm[i * C + j] * beta_s[j] * t.k[j * K + ch] * t.E[j * K + ch];
    t.W[e] = w;
  }
  for (int64_t e = tid; e < C * V; e += nt) {
    const int64_t i = e / V, x = e % V;
    float u = 0.0f;
    for (int64_t j = 0; j <= i; ++j) u += t.Tm[i * C + j] * beta_s[j] * t.v[j * V + x];
    t.vn[e] = u;
  }
  __syncthreads();
}

// V_new = U - W S in place (S [K, V] the state entering the chunk). Ends synchronized.
__device__ void chunk_v_new(const KdaDims& d, const ChunkTiles& t, const float* S) {
  const int64_t K = d.K, V = d.V;
  for (int64_t e = threadIdx.x; e < d.C * V; e += blockDim.x) {
    const int64_t i = e / V, x = e % V;
    float ws = 0.0f;
    for (int64_t ch = 0; ch < K; ++ch) ws += t.W[i * K + ch] * S[ch * V + x];
    t.vn[e] -= ws;
  }
  __syncthreads();
}

// Grid BH: the forward over every chunk of head bh. Writes o (null: not wanted), the state
// entering each chunk into h [BH, NT, K, V] (null: not wanted) and the final state into ht
// (null: not wanted); ws: ChunkTiles + K*V floats per block.
__global__ void __launch_bounds__(lat::cuda::kBlock)
    forward_kernel(KdaDims d, KdaParams p, const float* q, const float* k, float* ws, float* o, float* h, float* ht) {
  __shared__ float beta_s[kMaxC];
  const int64_t bh = blockIdx.x, C = d.C, K = d.K, V = d.V, KV = K * V, tid = threadIdx.x, nt = blockDim.x;
  float* base = ws + bh * (ChunkTiles::floats(C, K, V) + KV);
  const ChunkTiles t(base, d);
  float* S = base + ChunkTiles::floats(C, K, V);
  for (int64_t e = tid; e < KV; e += nt) S[e] = p.h0 != nullptr ? p.h0[bh * KV + e] : 0.0f;
  __syncthreads();
  for (int64_t c = 0; c < d.NT; ++c) {
    chunk_prepare(d, p, q, k, bh, c, t, beta_s);
    chunk_v_new(d, t, S);
    if (h != nullptr)
      for (int64_t e = tid; e < KV; e += nt) h[(bh * d.NT + c) * KV + e] = S[e];
    // O = scale [(Q o E) S + Qm V_new].
    if (o != nullptr) {
      const int64_t rows = rows_of(d, c);
      for (int64_t e = tid; e < rows * V; e += nt) {
        const int64_t i = e / V, x = e % V;
        float acc = 0.0f;
        for (int64_t ch = 0; ch < K; ++ch) acc += t.q[i * K + ch] * t.E[i * K + ch] * S[ch * V + x];
        for (int64_t j = 0; j <= i; ++j) acc += t.Qm[i * C + j] * t.vn[j * V + x];
        o[token_row(d, bh, c * C + i) * V + x] = d.scale * acc;
      }
    }
    __syncthreads();
    // S' = Diag(e^Lambda) S + (K o wdec)^T V_new.
    for (int64_t e = tid; e < KV; e += nt) {
      const int64_t ch = e / V, x = e % V;
      float acc = t.E[(C - 1) * K + ch] * S[e];
      for (int64_t i = 0; i < C; ++i) acc += t.k[i * K + ch] * t.wdec[i * K + ch] * t.vn[i * V + x];
      S[e] = acc;
    }
    __syncthreads();
  }
  if (ht != nullptr)
    for (int64_t e = tid; e < KV; e += nt) ht[bh * KV + e] = S[e];
}

// Y_ic = sum_{j<i} F_ij y_jc e^{G_ic - G_jc} (row i, channel ch; F [C, C] read below the diagonal).
__device__ float decayed_lower(const KdaDims& d, const float* F, const float* y, const float* G, int64_t i,
                               int64_t ch) {
  float acc = 0.0f;
  for (int64_t j = 0; j < i; ++j)
    acc += F[i * d.C + j] * y[j * d.K + ch] * decay_exp(G[i * d.K + ch] - G[j * d.K + ch]);
  return acc;
}

// Z_jc = sum_{i>j} F_ij x_ic e^{G_ic - G_jc} (row j, channel ch).
__device__ float decayed_upper(const KdaDims& d, const float* F, const float* x, const float* G, int64_t j,
                               int64_t ch) {
  float acc = 0.0f;
  for (int64_t i = j + 1; i < d.C; ++i)
    acc += F[i * d.C + j] * x[i * d.K + ch] * decay_exp(G[i * d.K + ch] - G[j * d.K + ch]);
  return acc;
}

// Grid BH: the reverse pass of head bh from h (forward_kernel's states) and d_o, dht (null:
// zero). Writes the gradients in the API layout (dq, dk w.r.t. the q, k read) and dh0
// (null: not wanted); ws: ChunkTiles + GradTiles + K*V floats per block.
__global__ void __launch_bounds__(lat::cuda::kBlock)
    backward_kernel(KdaDims d, KdaParams p, const float* q, const float* k, const float* h, const float* d_o,
                    const float* dht, float* ws, KdaGrads grads) {
  __shared__ float beta_s[kMaxC];
  const int64_t bh = blockIdx.x, C = d.C, K = d.K, V = d.V, KV = K * V, tid = threadIdx.x, nt = blockDim.x;
  const int64_t tiles = ChunkTiles::floats(C, K, V), grad_tiles = GradTiles::floats(C, K, V);
  float* base = ws + bh * (tiles + grad_tiles + KV);
  const ChunkTiles t(base, d);
  const GradTiles g(base + tiles, d);
  float* dS = base + tiles + grad_tiles;
  for (int64_t e = tid; e < KV; e += nt) dS[e] = dht != nullptr ? dht[bh * KV + e] : 0.0f;
  for (int64_t c = d.NT - 1; c >= 0; --c) {
    const int64_t rows = rows_of(d, c), last = rows - 1;
    const float* S = h + (bh * d.NT + c) * KV;
    chunk_prepare(d, p, q, k, bh, c, t, beta_s);
    chunk_v_new(d, t, S);
    for (int64_t e = tid; e < C * V; e += nt) {
      const int64_t i = e / V;
      g.dO[e] = i < rows ? d_o[token_row(d, bh, c * C + i) * V + e % V] : 0.0f;
    }
    __syncthreads();
    // dV_new = scale Qm^T dO + (K o wdec) dS; dq = scale (dO S^T) o E, dG = dq o q;
    // dk = (V_new dS^T) o wdec, and the write decays' share of dG (rows before the last).
    for (int64_t e = tid; e < C * V; e += nt) {
      const int64_t j = e / V, x = e % V;
      float acc = 0.0f;
      for (int64_t i = j; i < C; ++i) acc += t.Qm[i * C + j] * g.dO[i * V + x];
      acc *= d.scale;
      for (int64_t ch = 0; ch < K; ++ch) acc += t.k[j * K + ch] * t.wdec[j * K + ch] * dS[ch * V + x];
      g.dvn[e] = acc;
    }
    for (int64_t e = tid; e < C * K; e += nt) {
      const int64_t i = e / K, ch = e % K;
      float read = 0.0f, write = 0.0f;
      for (int64_t x = 0; x < V; ++x) {
        read += g.dO[i * V + x] * S[ch * V + x];
        write += t.vn[i * V + x] * dS[ch * V + x];
      }
      const float dq = d.scale * read * t.E[e], dk = write * t.wdec[e];
      g.dq[e] = dq;
      g.dk[e] = dk;
      g.dG[e] = dq * t.q[e] - (i < last ? dk * t.k[e] : 0.0f);
    }
    __syncthreads();
    // dLambda (the state decay and the write decays of the rows before the last); dQ =
    // scale dO V_new^T (j <= i); dW = -dV_new S^T; U = V_new + W S.
    for (int64_t ch = tid; ch < K; ch += nt) {
      float acc = 0.0f;
      for (int64_t x = 0; x < V; ++x) acc += S[ch * V + x] * dS[ch * V + x];
      acc *= t.E[(C - 1) * K + ch];
      for (int64_t i = 0; i < last; ++i) acc += g.dk[i * K + ch] * t.k[i * K + ch];
      g.dlam[ch] = acc;
    }
    for (int64_t e = tid; e < C * C; e += nt) {
      const int64_t i = e / C, j = e % C;
      float acc = 0.0f;
      if (j <= i)
        for (int64_t x = 0; x < V; ++x) acc += g.dO[i * V + x] * t.vn[j * V + x];
      g.F[e] = d.scale * acc;
    }
    for (int64_t e = tid; e < C * K; e += nt) {
      const int64_t i = e / K, ch = e % K;
      float acc = 0.0f;
      for (int64_t x = 0; x < V; ++x) acc += g.dvn[i * V + x] * S[ch * V + x];
      g.dW[e] = -acc;
    }
    for (int64_t e = tid; e < C * V; e += nt) {
      const int64_t i = e / V, x = e % V;
      float acc = t.vn[e];
      for (int64_t ch = 0; ch < K; ++ch) acc += t.W[i * K + ch] * S[ch * V + x];
      g.u[e] = acc;
    }
    __syncthreads();
    // The state entering: dS <- Diag(e^Lambda) dS + scale (Q o E)^T dO - W^T dV_new.
    for (int64_t e = tid; e < KV; e += nt) {
      const int64_t ch = e / V, x = e % V;
      float read = 0.0f, wy = 0.0f;
      for (int64_t i = 0; i < C; ++i) {
        read += t.q[i * K + ch] * t.E[i * K + ch] * g.dO[i * V + x];
        wy += t.W[i * K + ch] * g.dvn[i * V + x];
      }
      dS[e] = t.E[(C - 1) * K + ch] * dS[e] + d.scale * read - wy;
    }
    // Through Qm: its diagonal (no decay) and its pairs; [dKb | dVb] = Tm^T [dW | dU].
    for (int64_t e = tid; e < C * K; e += nt) {
      const int64_t i = e / K, ch = e % K;
      const float diag = g.F[i * C + i];
      const float y = decayed_lower(d, g.F, t.k, t.G, i, ch), z = decayed_upper(d, g.F, t.q, t.G, i, ch);
      g.dq[e] += diag * t.k[e] + y;
      g.dk[e] += diag * t.q[e] + z;
      g.dG[e] += t.q[e] * y - t.k[e] * z;
      float acc = 0.0f;
      for (int64_t j = i; j < C; ++j) acc += t.Tm[j * C + i] * g.dW[j * K + ch];
      g.dkb[e] = acc;
    }
    for (int64_t e = tid; e < C * V; e += nt) {
      const int64_t i = e / V, x = e % V;
      float acc = 0.0f;
      for (int64_t j = i; j < C; ++j) acc += t.Tm[j * C + i] * g.dvn[j * V + x];
      g.dbv[e] = acc;
    }
    __syncthreads();
    // dA = -(dKb W^T + dVb U^T) below the diagonal: F = diag(beta) dA, dAM = dA o M;
    // dk, dG through W's K o E; dv = diag(beta) dVb.
    for (int64_t e = tid; e < C * C; e += nt) {
      const int64_t i = e / C, j = e % C;
      float da = 0.0f;
      if (j < i) {
        for (int64_t ch = 0; ch < K; ++ch) da -= g.dkb[i * K + ch] * t.W[j * K + ch];
        for (int64_t x = 0; x < V; ++x) da -= g.dbv[i * V + x] * g.u[j * V + x];
      }
      g.F[e] = beta_s[i] * da;
      g.dAM[e] = da * t.M[e];
    }
    for (int64_t e = tid; e < C * K; e += nt) {
      const int64_t i = e / K;
      const float tb = beta_s[i] * g.dkb[e] * t.E[e];
      g.dk[e] += tb;
      g.dG[e] += tb * t.k[e];
    }
    for (int64_t e = tid; e < rows * V; e += nt) {
      const int64_t i = e / V;
      grads.dv[token_row(d, bh, c * C + i) * V + e % V] = beta_s[i] * g.dbv[e];
    }
    __syncthreads();
    // dbeta; the pairs of A = diag(beta) M.
    for (int64_t i = tid; i < rows; i += nt) {
      float db = 0.0f;
      for (int64_t ch = 0; ch < K; ++ch) db += g.dkb[i * K + ch] * t.E[i * K + ch] * t.k[i * K + ch];
      for (int64_t x = 0; x < V; ++x) db += g.dbv[i * V + x] * t.v[i * V + x];
      for (int64_t j = 0; j < i; ++j) db += g.dAM[i * C + j];
      grads.dbeta[token_row(d, bh, c * C + i)] = db;
    }
    for (int64_t e = tid; e < C * K; e += nt) {
      const int64_t i = e / K, ch = e % K;
      const float y = decayed_lower(d, g.F, t.k, t.G, i, ch), z = decayed_upper(d, g.F, t.k, t.G, i, ch);
      g.dk[e] += y + z;
      g.dG[e] += t.k[e] * (y - z);
    }
    __syncthreads();
    // dg = reverse cumsum of dG within the chunk (Lambda's gradient on the last row).
    for (int64_t ch = tid; ch < K; ch += nt) {
      float acc = g.dlam[ch];
      for (int64_t i = C - 1; i >= 0; --i) {
        acc += g.dG[i * K + ch];
        if (i < rows) {
          const int64_t at = token_row(d, bh, c * C + i) * K + ch;
          grads.dgk[at] = acc;
          grads.dq[at] = g.dq[i * K + ch];
          grads.dk[at] = g.dk[i * K + ch];
        }
      }
    }
    __syncthreads();
  }
  if (grads.dh0 != nullptr)
    for (int64_t e = tid; e < KV; e += nt) grads.dh0[bh * KV + e] = dS[e];
}

// Grid BH, one thread per state column: the recurrence token by token,
// S <- Diag(e^g) S; u = beta (v - S^T k); S <- S + k u^T; o = scale S^T q. S [K, V] at state
// (h0's or zeros first), left holding the final state.
__global__ void __launch_bounds__(lat::cuda::kBlock)
    recurrent_kernel(KdaDims d, KdaParams p, const float* q, const float* k, float* state, float* o) {
  __shared__ float qs[kMaxK], ks[kMaxK], as[kMaxK];
  const int64_t bh = blockIdx.x, K = d.K, V = d.V, KV = K * V;
  float* S = state + bh * KV;
  for (int64_t e = threadIdx.x; e < KV; e += blockDim.x) S[e] = p.h0 != nullptr ? p.h0[bh * KV + e] : 0.0f;
  for (int64_t t = 0; t < d.T; ++t) {
    const int64_t row = token_row(d, bh, t);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
      qs[i] = q[row * K + i];
      ks[i] = k[row * K + i];
      as[i] = decay_exp(p.gk[row * K + i]);
    }
    __syncthreads();
    const float b = p.beta[row];
    for (int64_t col = threadIdx.x; col < V; col += blockDim.x) {
      float r = p.v[row * V + col];
      for (int64_t i = 0; i < K; ++i) r -= ks[i] * as[i] * S[i * V + col];
      const float u = b * r;
      float acc = 0.0f;
      for (int64_t i = 0; i < K; ++i) {
        const float s = as[i] * S[i * V + col] + ks[i] * u;
        S[i * V + col] = s;
        acc += qs[i] * s;
      }
      o[row * V + col] = d.scale * acc;
    }
  }
}

void check_kda_dims(const char* op, const KdaParams& p) {
  LAT_CHECK(p.K <= kMaxK, op << " (cuda): K: expected at most " << kMaxK << ", got " << p.K);
  LAT_CHECK(p.C >= 1 && p.C <= kMaxC, op << " (cuda): chunk_size: expected 1.." << kMaxC << ", got " << p.C);
}

KdaDims kda_dims(const KdaParams& p) { return {p.T, p.H, p.K, p.V, p.C, p.NT(), p.scale}; }

// What a CUDA forward keeps for its backward: with the in-kernel L2 norm, the normalized
// q and k [B, T, H, K] with their rstd [B*T*H] (nothing otherwise).
struct CudaKdaSaved : KdaSaved {
  DeviceBuffer qn, kn, q_rstd, k_rstd;
};

// q and k as the kernels read them: normalized into `saved` when asked for.
std::pair<const float*, const float*> kernel_qk(const KdaParams& p, CudaKdaSaved& saved) {
  if (!p.use_qk_l2norm_in_kernel) return {p.q, p.k};
  const int64_t rows = p.B * p.T * p.H;
  saved.qn = DeviceBuffer(rows * p.K, p.device), saved.kn = DeviceBuffer(rows * p.K, p.device);
  saved.q_rstd = DeviceBuffer(rows, p.device), saved.k_rstd = DeviceBuffer(rows, p.device);
  cu::l2norm_forward(p.q, rows, p.K, saved.qn.data(), saved.q_rstd.data(), p.device);
  cu::l2norm_forward(p.k, rows, p.K, saved.kn.data(), saved.k_rstd.data(), p.device);
  return {saved.qn.data(), saved.kn.data()};
}

unsigned blocks_of(const KdaParams& p) { return cu::grid3(p.B * p.H, 1, 1).x; }

// Runs forward_kernel (o, h, ht each null when not wanted).
void launch_forward(const KdaParams& p, const float* q, const float* k, float* o, float* h, float* ht) {
  const int64_t per_block = ChunkTiles::floats(p.C, p.K, p.V) + p.K * p.V;
  DeviceBuffer ws(p.B * p.H * per_block, p.device);
  forward_kernel<<<blocks_of(p), lat::cuda::kBlock, 0, lat::cuda::current_stream(p.device)>>>(
      kda_dims(p), p, q, k, ws.data(), o, h, ht);
  LAT_CUDA_CHECK_LAUNCH();
}

// The backward of either form (the chunk size p.C, at most kMaxC).
void kda_backward(const char* op, const KdaParams& p, const KdaSaved& saved, const float* d_o, const float* dht,
                  const KdaGrads& grads) {
  check_kda_dims(op, p);
  lat::cuda::DeviceGuard guard(p.device);
  const auto& s = static_cast<const CudaKdaSaved&>(saved);
  const bool l2 = p.use_qk_l2norm_in_kernel;
  const float* q = l2 ? s.qn.data() : p.q;
  const float* k = l2 ? s.kn.data() : p.k;
  const int64_t BH = p.B * p.H, KV = p.K * p.V;
  DeviceBuffer h(BH * p.NT() * KV, p.device);
  launch_forward(p, q, k, nullptr, h.data(), nullptr);
  const int64_t per_block = ChunkTiles::floats(p.C, p.K, p.V) + GradTiles::floats(p.C, p.K, p.V) + KV;
  DeviceBuffer ws(BH * per_block, p.device);
  backward_kernel<<<blocks_of(p), lat::cuda::kBlock, 0, lat::cuda::current_stream(p.device)>>>(
      kda_dims(p), p, q, k, h.data(), d_o, dht, ws.data(), grads);
  LAT_CUDA_CHECK_LAUNCH();
  if (l2) {
    const int64_t rows = p.B * p.T * p.H;
    cu::l2norm_backward(s.qn.data(), s.q_rstd.data(), rows, p.K, grads.dq, p.device);
    cu::l2norm_backward(s.kn.data(), s.k_rstd.data(), rows, p.K, grads.dk, p.device);
  }
}

}  // namespace

std::shared_ptr<const KdaSaved> chunk_kda_forward_cuda(const KdaParams& p, float* o, float* ht, bool save) {
  check_kda_dims("chunk_kda", p);
  lat::cuda::DeviceGuard guard(p.device);
  auto saved = std::make_shared<CudaKdaSaved>();
  const auto [q, k] = kernel_qk(p, *saved);
  launch_forward(p, q, k, o, nullptr, ht);
  return save ? saved : nullptr;
}

void chunk_kda_backward_cuda(const KdaParams& p, const KdaSaved& saved, const float* d_o, const float* dht,
                             const KdaGrads& grads) {
  kda_backward("chunk_kda", p, saved, d_o, dht, grads);
}

std::shared_ptr<const KdaSaved> fused_recurrent_kda_forward_cuda(const KdaParams& p, float* o, float* ht, bool save) {
  LAT_CHECK(p.K <= kMaxK, "fused_recurrent_kda (cuda): K: expected at most " << kMaxK << ", got " << p.K);
  lat::cuda::DeviceGuard guard(p.device);
  auto saved = std::make_shared<CudaKdaSaved>();
  const auto [q, k] = kernel_qk(p, *saved);
  DeviceBuffer state = ht != nullptr ? DeviceBuffer() : DeviceBuffer(p.B * p.H * p.K * p.V, p.device);
  recurrent_kernel<<<blocks_of(p), lat::cuda::kBlock, 0, lat::cuda::current_stream(p.device)>>>(
      kda_dims(p), p, q, k, ht != nullptr ? ht : state.data(), o);
  LAT_CUDA_CHECK_LAUNCH();
  return save ? saved : nullptr;
}

void fused_recurrent_kda_backward_cuda(const KdaParams& p, const KdaSaved& saved, const float* d_o, const float* dht,
                                       const KdaGrads& grads) {
  KdaParams chunked = p;
  chunked.C = kMaxC;
  kda_backward("fused_recurrent_kda", chunked, saved, d_o, dht, grads);
}

}  // namespace lat::linear_attention
