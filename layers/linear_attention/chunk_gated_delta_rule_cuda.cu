// CUDA kernels of the chunkwise (gated) delta rule with the UT/WY transform
// (ALGORITHMS.md 2.4; Yang et al. 2024, 2025). Per chunk, with G the chunk-local
// cumulative g, gamma = e^G and L = G of the last row:
//   A = strictly lower beta_i (k_i . k_j) e^{G_i - G_j},  Tm = (I + A)^-1,
//   W = Tm diag(beta gamma) K,  U = Tm diag(beta) V,  V^new = U - W S_[c],
//   S_[c+1] = e^L S_[c] + K^T diag(e^{L-G}) V^new,
//   O = scale [diag(gamma) Q S_[c] + (Q K^T (.) D) V^new]   (chunk_fwd_o with V^new).
// Backward: dV^new = scale (Q K^T (.) D)^T dO + diag(e^{L-G}) K dH (reverse state pass,
// which also gives dH_{c-1} = e^L dH_c + scale (diag(gamma) Q)^T dO - W^T dV^new), the
// dq/dk/dG of simple_gla with V^new, dW = -dV^new S_[c]^T, then the WY backward:
//   dTm = dW (diag(beta gamma) K)^T + dU (diag(beta) V)^T (strictly lower),
//   dA = -Tm^T dTm Tm^T (strictly lower), E = dA (.) Gamma,
//   dK += diag(beta gamma) Tm^T dW + diag(beta) E K + E^T diag(beta) K,  dV = diag(beta) Tm^T dU,
//   dbeta_i = gamma_i (Tm^T dW)_i . k_i + (Tm^T dU)_i . v_i + sum_j E_ij (k_i . k_j),
//   dG_i += beta_i gamma_i (Tm^T dW)_i . k_i + sum_j (dA (.) A)_ij - sum_j (dA (.) A)_ji.
// The delta rule is g = 0 (G = 0, gamma = 1).
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "layers/linear_attention/chunk_cuda_common.cuh"
#include "layers/linear_attention/delta_kernels.h"

namespace lat::linear_attention::cuda {
namespace {

using tile::kLd;
using tile::kT;
using tile::kTileFloats;

// Grid (BH, NT): A, Tm, W and U of one chunk.
__global__ void __launch_bounds__(tile::kThreads) prepare_kernel(KernelDims d, Seq k, Seq v, const float* beta,
                                                                 const float* G, float* Tm, float* W, float* U) {
  extern __shared__ float smem[];
  float* t_in = smem;                  // K or V tile (rows scaled)
  float* t_a = smem + kTileFloats;     // A
  float* t_t = smem + 2 * kTileFloats; // Tm
  __shared__ float gs[kT], bs[kT], factor[kT];
  const int64_t bh = blockIdx.x, c = blockIdx.y;
  const int rows = chunk_rows(d, c);
  if (threadIdx.x < kT) {
    const int i = threadIdx.x;
    gs[i] = G[(bh * d.NT + c) * kT + i];
    bs[i] = i < rows ? beta[bth_index(d, bh, c * d.C + i)] : 0.0f;
  }
  tile::Frag kk;
  tile::zero(kk);
  for (int64_t kt = 0; kt < d.NK; ++kt) {
    const int k0 = static_cast<int>(kt * kT), nk = tile_extent(d.K, k0);
    __syncthreads();
    tile::load(t_in, seq_row(k, d.H, bh, c * d.C) + k0, k.st, rows, nk);
    __syncthreads();
    tile::mma(kk, t_in, kLd, 1, t_in, 1, kLd);  // K K^T
  }
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int i = tile::frag_row(a), j = tile::frag_col(b);
      kk.v[a][b] = i > j ? bs[i] * kk.v[a][b] * expf(gs[i] - gs[j]) : 0.0f;
    }
  tile::store_shared(kk, t_a);
  __syncthreads();
  // Tm = (I + A)^-1 by forward substitution, one column per thread:
  // Tm[i][col] = [i == col] - sum_{col <= j < i} A[i][j] Tm[j][col].
  if (threadIdx.x < kT) {
    const int col = threadIdx.x;
    for (int i = 0; i < kT; ++i) {
      float x = 0.0f;
      if (i == col) {
        x = 1.0f;
      } else if (i > col) {
        for (int j = col; j < i; ++j) x -= t_a[i * kLd + j] * t_t[j * kLd + col];
      }
      t_t[i * kLd + col] = x;
    }
  }
  __syncthreads();
  float* tm = Tm + (bh * d.NT + c) * kT * kT;
  for (int e = threadIdx.x; e < kT * kT; e += tile::kThreads) tm[e] = t_t[(e / kT) * kLd + e % kT];
  const int64_t row0 = (bh * d.NT + c) * d.C;  // first row of this chunk in [BH, NT*C, *]
  if (threadIdx.x < kT) factor[threadIdx.x] = bs[threadIdx.x] * expf(gs[threadIdx.x]);
  for (int64_t kt = 0; kt < d.NK; ++kt) {
    const int k0 = static_cast<int>(kt * kT), nk = tile_extent(d.K, k0);
    __syncthreads();
    tile::load(t_in, seq_row(k, d.H, bh, c * d.C) + k0, k.st, rows, nk, factor);
    __syncthreads();
    tile::Frag w;
    tile::zero(w);
    tile::mma(w, t_t, kLd, 1, t_in, kLd, 1);  // Tm diag(beta gamma) K
    tile::store(w, W + row0 * d.K + k0, d.K, rows, nk);
  }
  for (int64_t vt = 0; vt < d.NV; ++vt) {
    const int v0 = static_cast<int>(vt * kT), nv = tile_extent(d.V, v0);
    __syncthreads();
    tile::load(t_in, seq_row(v, d.H, bh, c * d.C) + v0, v.st, rows, nv, bs);
    __syncthreads();
    tile::Frag u;
    tile::zero(u);
    tile::mma(u, t_t, kLd, 1, t_in, kLd, 1);  // Tm diag(beta) V
    tile::store(u, U + row0 * d.V + v0, d.V, rows, nv);
  }
}

// Shared-memory state [NK*64, kLd] of the state passes: element (k, v) of the V tile.
// Each thread reads and writes its own fragment positions (k0 + row, col) only, except in
// the products, which are fenced by __syncthreads.

// Grid (BH, NV): the forward state pass over all of K for one V tile.
__global__ void __launch_bounds__(tile::kThreads) fwd_state_kernel(KernelDims d, Seq k, const float* W,
                                                                   const float* U, const float* G, const float* h0,
                                                                   float* h, float* v_new, float* ht) {
  extern __shared__ float smem[];
  float* t_in = smem;                   // W or K tile
  float* t_vn = smem + kTileFloats;     // V^new scaled by e^{L - G}
  float* S = smem + 2 * kTileFloats;    // the state, NK * 64 rows
  __shared__ float decay[kT];
  const int64_t bh = blockIdx.x, KV = d.K * d.V;
  const int v0 = blockIdx.y * kT, nv = tile_extent(d.V, v0);
  for (int64_t kt = 0; kt < d.NK; ++kt)
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int64_t kr = kt * kT + tile::frag_row(a);
        const int col = tile::frag_col(b);
        S[kr * kLd + col] = h0 != nullptr && kr < d.K && col < nv ? h0[bh * KV + kr * d.V + v0 + col] : 0.0f;
      }
  for (int64_t c = 0; c < d.NT; ++c) {
    const int rows = chunk_rows(d, c);
    const float* Gc = G + (bh * d.NT + c) * kT;
    const float last = Gc[kT - 1];
    const int64_t row0 = (bh * d.NT + c) * d.C;
    for (int64_t kt = 0; kt < d.NK; ++kt)
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int64_t kr = kt * kT + tile::frag_row(a);
          const int col = tile::frag_col(b);
          if (kr < d.K && col < nv) h[(bh * d.NT + c) * KV + kr * d.V + v0 + col] = S[kr * kLd + col];
        }
    if (threadIdx.x < kT) decay[threadIdx.x] = expf(last - Gc[threadIdx.x]);
    // V^new = U - W S
    tile::Frag vn;
    tile::zero(vn);
    for (int64_t kt = 0; kt < d.NK; ++kt) {
      const int k0 = static_cast<int>(kt * kT), nk = tile_extent(d.K, k0);
      __syncthreads();
      tile::load(t_in, W + row0 * d.K + k0, d.K, rows, nk);
      __syncthreads();
      tile::mma(vn, t_in, kLd, 1, S + k0 * kLd, kLd, 1);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int i = tile::frag_row(a);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int j = tile::frag_col(b);
        const float x = i < rows && j < nv ? U[(row0 + i) * d.V + v0 + j] - vn.v[a][b] : 0.0f;
        if (i < rows && j < nv) v_new[(row0 + i) * d.V + v0 + j] = x;
        vn.v[a][b] = x * decay[i];
      }
    }
    __syncthreads();
    tile::store_shared(vn, t_vn);
    // S = e^L S + K^T diag(e^{L - G}) V^new
    const float el = expf(last);
    for (int64_t kt = 0; kt < d.NK; ++kt) {
      const int k0 = static_cast<int>(kt * kT), nk = tile_extent(d.K, k0);
      __syncthreads();
      tile::load(t_in, seq_row(k, d.H, bh, c * d.C) + k0, k.st, rows, nk);
      __syncthreads();
      tile::Frag f;
      tile::zero(f);
      tile::mma(f, t_in, 1, kLd, t_vn, kLd, 1);
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          float& s = S[(k0 + tile::frag_row(a)) * kLd + tile::frag_col(b)];
          s = el * s + f.v[a][b];
        }
    }
    __syncthreads();
  }
  if (ht != nullptr)
    for (int64_t kt = 0; kt < d.NK; ++kt)
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int64_t kr = kt * kT + tile::frag_row(a);
          const int col = tile::frag_col(b);
          if (kr < d.K && col < nv) ht[bh * KV + kr * d.V + v0 + col] = S[kr * kLd + col];
        }
}

// Grid (BH, NV): the reverse state pass of the delta rule for one V tile.
__global__ void __launch_bounds__(tile::kThreads) bwd_state_kernel(KernelDims d, Seq q, Seq k, Seq d_o,
                                                                   const float* W, const float* G,
                                                                   const float* dv_local, const float* dht,
                                                                   float scale, float* dh, float* dv_new,
                                                                   float* dh0) {
  extern __shared__ float smem[];
  float* t_a = smem;                     // K or scaled Q tile
  float* t_w = smem + kTileFloats;       // W tile
  float* t_do = smem + 2 * kTileFloats;  // dO tile
  float* t_dvn = smem + 3 * kTileFloats; // dV^new tile
  float* D = smem + 4 * kTileFloats;     // dH, NK * 64 rows
  __shared__ float decay[kT], qfactor[kT];
  const int64_t bh = blockIdx.x, KV = d.K * d.V;
  const int v0 = blockIdx.y * kT, nv = tile_extent(d.V, v0);
  for (int64_t kt = 0; kt < d.NK; ++kt)
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int64_t kr = kt * kT + tile::frag_row(a);
        const int col = tile::frag_col(b);
        D[kr * kLd + col] = dht != nullptr && kr < d.K && col < nv ? dht[bh * KV + kr * d.V + v0 + col] : 0.0f;
      }
  for (int64_t c = d.NT - 1; c >= 0; --c) {
    const int rows = chunk_rows(d, c);
    const float* Gc = G + (bh * d.NT + c) * kT;
    const float last = Gc[kT - 1];
    const int64_t row0 = (bh * d.NT + c) * d.C;
    for (int64_t kt = 0; kt < d.NK; ++kt)
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int64_t kr = kt * kT + tile::frag_row(a);
          const int col = tile::frag_col(b);
          if (kr < d.K && col < nv) dh[(bh * d.NT + c) * KV + kr * d.V + v0 + col] = D[kr * kLd + col];
        }
    if (threadIdx.x < kT) {
      decay[threadIdx.x] = expf(last - Gc[threadIdx.x]);
      qfactor[threadIdx.x] = scale * expf(Gc[threadIdx.x]);
    }
    // dV^new = dv_local + diag(e^{L - G}) K dH
    tile::Frag f;
    tile::zero(f);
    for (int64_t kt = 0; kt < d.NK; ++kt) {
      const int k0 = static_cast<int>(kt * kT), nk = tile_extent(d.K, k0);
      __syncthreads();
      tile::load(t_a, seq_row(k, d.H, bh, c * d.C) + k0, k.st, rows, nk);
      __syncthreads();
      tile::mma(f, t_a, kLd, 1, D + k0 * kLd, kLd, 1);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int i = tile::frag_row(a);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int j = tile::frag_col(b);
        const bool in = i < rows && j < nv;
        const float x = in ? f.v[a][b] * decay[i] + dv_local[(row0 + i) * d.V + v0 + j] : 0.0f;
        if (in) dv_new[(row0 + i) * d.V + v0 + j] = x;
        f.v[a][b] = x;
      }
    }
    __syncthreads();
    tile::store_shared(f, t_dvn);
    tile::load(t_do, seq_row(d_o, d.H, bh, c * d.C) + v0, d_o.st, rows, nv);
    // dH = e^L dH + (scale diag(gamma) Q)^T dO - W^T dV^new
    const float el = expf(last);
    for (int64_t kt = 0; kt < d.NK; ++kt) {
      const int k0 = static_cast<int>(kt * kT), nk = tile_extent(d.K, k0);
      __syncthreads();
      tile::load(t_a, seq_row(q, d.H, bh, c * d.C) + k0, q.st, rows, nk, qfactor);
      tile::load(t_w, W + row0 * d.K + k0, d.K, rows, nk);
      __syncthreads();
      tile::Frag fq, fw;
      tile::zero(fq);
      tile::zero(fw);
      tile::mma(fq, t_a, 1, kLd, t_do, kLd, 1);
      tile::mma(fw, t_w, 1, kLd, t_dvn, kLd, 1);
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          float& s = D[(k0 + tile::frag_row(a)) * kLd + tile::frag_col(b)];
          s = el * s + fq.v[a][b] - fw.v[a][b];
        }
    }
    __syncthreads();
  }
  if (dh0 != nullptr)
    for (int64_t kt = 0; kt < d.NK; ++kt)
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int64_t kr = kt * kT + tile::frag_row(a);
          const int col = tile::frag_col(b);
          if (kr < d.K && col < nv) dh0[bh * KV + kr * d.V + v0 + col] = D[kr * kLd + col];
        }
}

// Grid (BH, NT): the WY backward of one chunk (see the file comment).
__global__ void __launch_bounds__(tile::kThreads) bwd_wy_kernel(KernelDims d, Seq k, Seq v, const float* beta,
                                                                const float* G, const float* Tm, const float* dW,
                                                                const float* dU, SeqOut dk, SeqOut dv,
                                                                float* dbeta, float* dg_slot) {
  extern __shared__ float smem[];
  float* t_t = smem;                    // Tm
  float* x = smem + kTileFloats;
  float* y = smem + 2 * kTileFloats;
  float* z = smem + 3 * kTileFloats;
  __shared__ float gs[kT], bs[kT], gam[kT], dbeta_e[kT], dg_a[kT], dkk[kT], vdot[kT];
  const int64_t bh = blockIdx.x, c = blockIdx.y;
  const int rows = chunk_rows(d, c);
  const int64_t row0 = (bh * d.NT + c) * d.C;       // this chunk's first row in [BH, NT*C, *]
  const int64_t tile_row0 = (bh * d.NT + c) * kT;  // and in the gate gradient's [BH, NT*64]
  if (threadIdx.x < kT) {
    const int i = threadIdx.x;
    gs[i] = G[(bh * d.NT + c) * kT + i];
    gam[i] = expf(gs[i]);
    bs[i] = i < rows ? beta[bth_index(d, bh, c * d.C + i)] : 0.0f;
    dkk[i] = 0.0f;
    vdot[i] = 0.0f;
  }
  const float* tm = Tm + (bh * d.NT + c) * kT * kT;
  for (int e = threadIdx.x; e < kT * kT; e += tile::kThreads) t_t[(e / kT) * kLd + e % kT] = tm[e];
  // (a) K K^T, dW K^T and dU V^T
  tile::Frag kk, dwk, duv;
  tile::zero(kk);
  tile::zero(dwk);
  tile::zero(duv);
  for (int64_t kt = 0; kt < d.NK; ++kt) {
    const int k0 = static_cast<int>(kt * kT), nk = tile_extent(d.K, k0);
    __syncthreads();
    tile::load(x, seq_row(k, d.H, bh, c * d.C) + k0, k.st, rows, nk);
    tile::load(y, dW + row0 * d.K + k0, d.K, rows, nk);
    __syncthreads();
    tile::mma(kk, x, kLd, 1, x, 1, kLd);
    tile::mma(dwk, y, kLd, 1, x, 1, kLd);
  }
  for (int64_t vt = 0; vt < d.NV; ++vt) {
    const int v0 = static_cast<int>(vt * kT), nv = tile_extent(d.V, v0);
    __syncthreads();
    tile::load(x, seq_row(v, d.H, bh, c * d.C) + v0, v.st, rows, nv);
    tile::load(y, dU + row0 * d.V + v0, d.V, rows, nv);
    __syncthreads();
    tile::mma(duv, y, kLd, 1, x, 1, kLd);
  }
  // (b) dTm (strictly lower), then dA = -Tm^T dTm Tm^T (strictly lower)
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int i = tile::frag_row(a), j = tile::frag_col(b);
      dwk.v[a][b] = i > j ? bs[j] * (gam[j] * dwk.v[a][b] + duv.v[a][b]) : 0.0f;
    }
  __syncthreads();
  tile::store_shared(dwk, z);
  __syncthreads();
  tile::Frag f;
  tile::zero(f);
  tile::mma(f, z, kLd, 1, t_t, 1, kLd);  // dTm Tm^T
  __syncthreads();
  tile::store_shared(f, x);
  __syncthreads();
  tile::Frag da;
  tile::zero(da);
  tile::mma(da, t_t, 1, kLd, x, kLd, 1);  // Tm^T (dTm Tm^T)
  // (c) E = dA (.) Gamma; store Eb = diag(beta) E, M = dA (.) A and E (.) K K^T
  tile::Frag eb, m, ekk;
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int i = tile::frag_row(a), j = tile::frag_col(b);
      const float dA = i > j ? -da.v[a][b] : 0.0f;
      const float gamma_ij = i > j ? expf(gs[i] - gs[j]) : 0.0f;
      const float e = dA * gamma_ij;
      eb.v[a][b] = bs[i] * e;
      m.v[a][b] = dA * bs[i] * kk.v[a][b] * gamma_ij;
      ekk.v[a][b] = e * kk.v[a][b];
    }
  __syncthreads();
  tile::store_shared(eb, z);
  tile::store_shared(m, y);
  tile::store_shared(ekk, x);
  __syncthreads();
  if (threadIdx.x < kT) {
    const int i = threadIdx.x;
    float rs_e = 0.0f, rs_m = 0.0f, cs_m = 0.0f;
    for (int j = 0; j < kT; ++j) {
      rs_e += x[i * kLd + j];
      rs_m += y[i * kLd + j];
      cs_m += y[j * kLd + i];
    }
    dbeta_e[i] = rs_e;
    dg_a[i] = rs_m - cs_m;
  }
  // (d) dK through W and A, and the row dots (Tm^T dW)_i . k_i
  for (int64_t kt = 0; kt < d.NK; ++kt) {
    const int k0 = static_cast<int>(kt * kT), nk = tile_extent(d.K, k0);
    __syncthreads();
    tile::load(x, seq_row(k, d.H, bh, c * d.C) + k0, k.st, rows, nk);
    tile::load(y, dW + row0 * d.K + k0, d.K, rows, nk);
    __syncthreads();
    tile::Frag dkb, add;
    tile::zero(dkb);
    tile::zero(add);
    tile::mma(dkb, t_t, 1, kLd, y, kLd, 1);  // Tm^T dW
    tile::mma(add, z, kLd, 1, x, kLd, 1);    // Eb K
    tile::mma(add, z, 1, kLd, x, kLd, 1);    // Eb^T K
    float* dk_rows = seq_row(dk, d.H, bh, c * d.C) + k0;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int i = tile::frag_row(a);
      float s = 0.0f;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int j = tile::frag_col(b);
        s += dkb.v[a][b] * x[i * kLd + j];
        if (i < rows && j < nk) dk_rows[i * dk.st + j] += add.v[a][b] + bs[i] * gam[i] * dkb.v[a][b];
      }
      s = tile::row_sum16(s);
      if ((threadIdx.x & 15) == 0) dkk[i] += s;
    }
  }
  // (e) dV = diag(beta) Tm^T dU, and the row dots (Tm^T dU)_i . v_i
  for (int64_t vt = 0; vt < d.NV; ++vt) {
    const int v0 = static_cast<int>(vt * kT), nv = tile_extent(d.V, v0);
    __syncthreads();
    tile::load(x, seq_row(v, d.H, bh, c * d.C) + v0, v.st, rows, nv);
    tile::load(y, dU + row0 * d.V + v0, d.V, rows, nv);
    __syncthreads();
    tile::Frag dvb;
    tile::zero(dvb);
    tile::mma(dvb, t_t, 1, kLd, y, kLd, 1);  // Tm^T dU
    float* dv_rows = seq_row(dv, d.H, bh, c * d.C) + v0;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int i = tile::frag_row(a);
      float s = 0.0f;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int j = tile::frag_col(b);
        s += dvb.v[a][b] * x[i * kLd + j];
        if (i < rows && j < nv) dv_rows[i * dv.st + j] = bs[i] * dvb.v[a][b];
      }
      s = tile::row_sum16(s);
      if ((threadIdx.x & 15) == 0) vdot[i] += s;
    }
  }
  __syncthreads();
  if (threadIdx.x < kT) {
    const int i = threadIdx.x;
    if (i < rows) dbeta[bth_index(d, bh, c * d.C + i)] = dbeta_e[i] + gam[i] * dkk[i] + vdot[i];
    if (dg_slot != nullptr) {
      dg_slot[tile_row0 + i] = dg_a[i] + bs[i] * gam[i] * dkk[i];
      dg_slot[d.B * d.H * d.NT * kT + tile_row0 + i] = 0.0f;  // nothing here is credited by prefix
    }
  }
}

// Warp per row: y = x / sqrt(sum x^2 + eps).
__global__ void l2norm_forward_kernel(const float* x, int64_t rows, int64_t D, float* y, float* rstd) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const float* xr = x + r * D;
    float s = 0.0f;
    for (int64_t j = threadIdx.x % 32; j < D; j += 32) s += xr[j] * xr[j];
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
    const float inv = 1.0f / sqrtf(s + 1e-6f);
    for (int64_t j = threadIdx.x % 32; j < D; j += 32) y[r * D + j] = xr[j] * inv;
    if (threadIdx.x % 32 == 0) rstd[r] = inv;
  }
}

// Warp per row, in place: dy <- rstd (dy - (dy . y) y).
__global__ void l2norm_backward_kernel(const float* y, const float* rstd, int64_t rows, int64_t D, float* dy) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const float* yr = y + r * D;
    float* dr = dy + r * D;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x % 32; j < D; j += 32) dot += dr[j] * yr[j];
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float s = rstd[r];
    for (int64_t j = threadIdx.x % 32; j < D; j += 32) dr[j] = s * (dr[j] - dot * yr[j]);
  }
}

size_t state_pass_smem(const Dims& d, int tiles) {
  return (static_cast<size_t>(tiles) + static_cast<size_t>(d.NK())) * tile::kTileBytes;
}

void check_dims(const Dims& d) {
  LAT_CHECK(d.C >= 1 && d.C <= kT, "delta rule (cuda): chunk_size: expected 1.." << kT << ", got " << d.C);
  LAT_CHECK(d.K <= 256, "delta rule (cuda): K: expected at most 256, got " << d.K);
}

unsigned warp_rows_grid(int64_t rows) {
  const int64_t per_block = lat::cuda::kBlock / 32;
  return static_cast<unsigned>(std::clamp<int64_t>((rows + per_block - 1) / per_block, 1, int64_t{1} << 20));
}

}  // namespace

void gdn_prepare(const Dims& d, Seq k, Seq v, const float* beta, const float* G, float* Tm, float* W, float* U) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  const size_t smem = 3 * tile::kTileBytes;
  allow_shared_memory(prepare_kernel, smem);
  prepare_kernel<<<grid3(d.BH(), d.NT(), 1), tile::kThreads, smem, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), k, v, beta, G, Tm, W, U);
  LAT_CUDA_CHECK_LAUNCH();
}

void gdn_fwd_state(const Dims& d, Seq k, const float* W, const float* U, const float* G, const float* h0, float* h,
                   float* v_new, float* ht) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  const size_t smem = state_pass_smem(d, 2);
  allow_shared_memory(fwd_state_kernel, smem);
  fwd_state_kernel<<<grid3(d.BH(), d.NV(), 1), tile::kThreads, smem, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), k, W, U, G, h0, h, v_new, ht);
  LAT_CUDA_CHECK_LAUNCH();
}

void gdn_bwd_state(const Dims& d, Seq q, Seq k, Seq d_o, const float* W, const float* G, const float* dv_local,
                   const float* dht, float scale, float* dh, float* dv_new, float* dh0) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  const size_t smem = state_pass_smem(d, 4);
  allow_shared_memory(bwd_state_kernel, smem);
  bwd_state_kernel<<<grid3(d.BH(), d.NV(), 1), tile::kThreads, smem, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), q, k, d_o, W, G, dv_local, dht, scale, dh, dv_new, dh0);
  LAT_CUDA_CHECK_LAUNCH();
}

void gdn_bwd_wy(const Dims& d, Seq k, Seq v, const float* beta, const float* G, const float* Tm, const float* dW,
                const float* dU, SeqOut dk, SeqOut dv, float* dbeta, float* dg_slot) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  const size_t smem = 4 * tile::kTileBytes;
  allow_shared_memory(bwd_wy_kernel, smem);
  bwd_wy_kernel<<<grid3(d.BH(), d.NT(), 1), tile::kThreads, smem, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), k, v, beta, G, Tm, dW, dU, dk, dv, dbeta, dg_slot);
  LAT_CUDA_CHECK_LAUNCH();
}

void l2norm_forward(const float* x, int64_t rows, int64_t D, float* y, float* rstd, int device) {
  if (rows == 0) return;
  lat::cuda::DeviceGuard guard(device);
  l2norm_forward_kernel<<<warp_rows_grid(rows), lat::cuda::kBlock, 0, lat::cuda::current_stream(device)>>>(
      x, rows, D, y, rstd);
  LAT_CUDA_CHECK_LAUNCH();
}

void l2norm_backward(const float* y, const float* rstd, int64_t rows, int64_t D, float* dy, int device) {
  if (rows == 0) return;
  lat::cuda::DeviceGuard guard(device);
  l2norm_backward_kernel<<<warp_rows_grid(rows), lat::cuda::kBlock, 0, lat::cuda::current_stream(device)>>>(
      y, rstd, rows, D, dy);
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace lat::linear_attention::cuda

// ---- the delta-rule family's chunk op (delta_kernels.h): the kernels in order -----------
// The output and dq/dk passes are chunk_simple_gla_cuda.cu's, run on V^new.

namespace lat::linear_attention {
namespace {

// What forward keeps for backward (the WY factors and states are recomputed): G and, with
// the in-kernel L2 norm, the normalized q and k with their rstd.
struct ChunkDeltaSaved : DeltaSaved {
  DeviceBuffer G;               // [BH, NT, 64]
  DeviceBuffer qn, kn;          // [B, T, H, K], with the L2 norm only
  DeviceBuffer q_rstd, k_rstd;  // [B*T*H], with the L2 norm only
};

cu::Dims dims_of(const DeltaParams& p) { return {p.B, p.T, p.H, p.K, p.V, p.C, p.device}; }

// The WY factors and the forward state pass: Tm, W, U, h, V^new.
struct WyForward {
  DeviceBuffer Tm, W, U, h, v_new;
};

WyForward wy_forward(const cu::Dims& d, cu::Seq k, const float* v, const float* beta, const float* G, const float* h0,
                     float* ht) {
  const int64_t rows = d.NT() * d.C;  // per head, in chunk order
  WyForward f;
  f.Tm = DeviceBuffer(d.BH() * d.NT() * cu::tile::kT * cu::tile::kT, d.device);
  f.W = DeviceBuffer(d.BH() * rows * d.K, d.device);
  f.U = DeviceBuffer(d.BH() * rows * d.V, d.device);
  cu::gdn_prepare(d, k, cu::api_seq(v, d, d.V), beta, G, f.Tm.data(), f.W.data(), f.U.data());
  f.h = DeviceBuffer(d.BH() * d.NT() * d.K * d.V, d.device);
  f.v_new = DeviceBuffer(d.BH() * rows * d.V, d.device);
  cu::gdn_fwd_state(d, k, f.W.data(), f.U.data(), G, h0, f.h.data(), f.v_new.data(), ht);
  return f;
}

}  // namespace

std::shared_ptr<const DeltaSaved> chunk_delta_forward_cuda(const DeltaParams& p, float* o, float* ht, bool save) {
  const cu::Dims d = dims_of(p);
  const int64_t rows = p.B * p.T * p.H;
  auto saved = std::make_shared<ChunkDeltaSaved>();
  const float* qn = p.q;
  const float* kn = p.k;
  if (p.use_qk_l2norm_in_kernel) {
    saved->qn = DeviceBuffer(rows * d.K, p.device), saved->kn = DeviceBuffer(rows * d.K, p.device);
    saved->q_rstd = DeviceBuffer(rows, p.device), saved->k_rstd = DeviceBuffer(rows, p.device);
    cu::l2norm_forward(p.q, rows, d.K, saved->qn.data(), saved->q_rstd.data(), p.device);
    cu::l2norm_forward(p.k, rows, d.K, saved->kn.data(), saved->k_rstd.data(), p.device);
    qn = saved->qn.data(), kn = saved->kn.data();
  }
  saved->G = DeviceBuffer(d.BH() * d.NT() * cu::tile::kT, p.device);
  const float* G = saved->G.data();
  cu::chunk_cumsum(d, p.g, saved->G.data());
  const cu::Seq q = cu::api_seq(qn, d, d.K), k = cu::api_seq(kn, d, d.K);
  {
    WyForward f = wy_forward(d, k, p.v, p.beta, G, p.h0, ht);
    cu::chunk_fwd_o(d, q, k, cu::head_seq(f.v_new.data(), d, d.V), G, f.h.data(), p.scale, cu::api_out(o, d, d.V));
  }
  return save ? saved : nullptr;
}

void chunk_delta_backward_cuda(const DeltaParams& p, const DeltaSaved& saved, const float* d_o, const float* dht,
                               const DeltaGrads& grads) {
  const auto& s = static_cast<const ChunkDeltaSaved&>(saved);
  const cu::Dims d = dims_of(p);
  const int64_t rows = p.B * p.T * p.H, chunk_rows = d.NT() * d.C;
  const bool l2 = p.use_qk_l2norm_in_kernel;
  const cu::Seq q = cu::api_seq(l2 ? s.qn.data() : p.q, d, d.K), k = cu::api_seq(l2 ? s.kn.data() : p.k, d, d.K);
  const cu::Seq dO = cu::api_seq(d_o, d, d.V);
  const float* G = s.G.data();
  WyForward f = wy_forward(d, k, p.v, p.beta, G, p.h0, nullptr);
  // dV^new from the outputs of its own chunk; the state pass adds the inter-chunk part.
  DeviceBuffer dv_local(d.BH() * chunk_rows * d.V, p.device);
  cu::chunk_bwd_dv(d, q, k, dO, G, nullptr, p.scale, cu::head_out(dv_local.data(), d, d.V));
  DeviceBuffer dh(d.BH() * d.NT() * d.K * d.V, p.device);
  DeviceBuffer dv_new(d.BH() * chunk_rows * d.V, p.device);
  cu::gdn_bwd_state(d, q, k, dO, f.W.data(), G, dv_local.data(), dht, p.scale, dh.data(), dv_new.data(), grads.dh0);
  DeviceBuffer dw(d.BH() * chunk_rows * d.K, p.device);
  // Gate gradient pieces: NK parts from the dq/dk kernel, one from the WY backward.
  const bool with_dg = p.g != nullptr && grads.dg != nullptr;
  const int64_t part = 2 * d.BH() * d.NT() * cu::tile::kT;
  DeviceBuffer dg_part = with_dg ? DeviceBuffer((d.NK() + 1) * part, p.device) : DeviceBuffer();
  cu::chunk_bwd_dqk(d, q, k, cu::head_seq(f.v_new.data(), d, d.V), dO, G, f.h.data(), dh.data(), p.scale,
                    cu::api_out(grads.dq, d, d.K), cu::api_out(grads.dk, d, d.K), dg_part.data(),
                    cu::head_seq(dv_new.data(), d, d.V), dw.data());
  cu::gdn_bwd_wy(d, k, cu::api_seq(p.v, d, d.V), p.beta, G, f.Tm.data(), dw.data(), dv_new.data(),
                 cu::api_out(grads.dk, d, d.K), cu::api_out(grads.dv, d, d.V), grads.dbeta,
                 with_dg ? dg_part.data() + d.NK() * part : nullptr);
  if (with_dg) cu::chunk_dg_finish(d, dg_part.data(), d.NK() + 1, grads.dg);
  if (l2) {
    cu::l2norm_backward(s.qn.data(), s.q_rstd.data(), rows, d.K, grads.dq, p.device);
    cu::l2norm_backward(s.kn.data(), s.k_rstd.data(), rows, d.K, grads.dk, p.device);
  }
}

}  // namespace lat::linear_attention
