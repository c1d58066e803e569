// CUDA kernels of the decayed chunkwise recurrence S_t = e^{g_t} S_{t-1} + k_t v_t^T,
// o_t = scale S_t^T q_t (chunk_simple_gla; chunk_linear_attn with g = 0; and, with V^new in
// place of V, the output and dq/dk parts of the delta rule). ALGORITHMS.md 2.3 has the math;
// chunk_cuda.h the buffers. In a chunk, G is the inclusive cumulative sum of g and
// L = G of the last row; every exponent taken is <= 0 (G_i - G_j for i >= j, L - G_j, G_i),
// and the upper triangle of the decay matrix is never exponentiated (selected away first),
// so g down to -20 per token stays finite.
//
// Gate gradient: every G-dependent factor's gradient times the factor, credited to the
// g_t it depends on (ALGORITHMS.md 2.3 with the pairwise form of its precision note):
//   dg_t = sum_{i>=t} (q_i . dq_i^inter + sum_{j<i} M_ij - sum_{r>i} M_ri)
//          + e^L <h[c], dH_c>_F + sum_{j<t} k_j . dk_j^inter
// with dq^inter = scale e^{G_i} dO h[c]^T, dk^inter = e^{L-G} V dH^T and M = P (.) Q K^T.
// The diagonal pairs, which do not depend on G, are left out, and the write decays
// e^{L-G_j} are credited by a prefix sum: the textbook q . dq - k . dk then reverse cumsum
// subtracts nearly equal sums under strong decay and loses dg to rounding. Each producer
// writes per-row terms to two slots of dg_part, one summed from the end of the chunk
// (suffix), one from its start (exclusive prefix); chunk_dg_finish adds them up.
#include "autograd/cuda/block_reduce.cuh"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "layers/linear_attention/chunk_cuda_common.cuh"
#include "layers/linear_attention/decay_kernels.h"

namespace lat::linear_attention::cuda {
namespace {

using tile::kLd;
using tile::kTileFloats;

// A fragment from global memory: f(i, j) = src[i * row_stride + j] inside rows x cols, else 0.
__device__ void load_frag(tile::Frag& f, const float* src, int64_t row_stride, int rows, int cols) {
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int i = tile::frag_row(a), j = tile::frag_col(b);
      f.v[a][b] = i < rows && j < cols ? src[i * row_stride + j] : 0.0f;
    }
}

__device__ void scale_frag(tile::Frag& f, float s) {
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) f.v[a][b] *= s;
}

// One thread per (bh, chunk).
__global__ void cumsum_kernel(KernelDims d, const float* g, float* G) {
  const int64_t n = d.B * d.H * d.NT;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = idx / d.NT, c = idx % d.NT;
    const int rows = chunk_rows(d, c);
    float acc = 0.0f;
    for (int i = 0; i < tile::kT; ++i) {
      if (g != nullptr && i < rows) acc += g[bth_index(d, bh, c * d.C + i)];
      G[idx * tile::kT + i] = acc;
    }
  }
}

// Grid (BH, NK, NV): the [64 x 64] tile (k0.., v0..) of one head's state, walked over chunks.
__global__ void __launch_bounds__(tile::kThreads) fwd_h_kernel(KernelDims d, Seq k, Seq v, const float* G,
                                                               const float* h0, float* h, float* ht) {
  __shared__ float ks[kTileFloats];
  __shared__ float vs[kTileFloats];
  __shared__ float decay[tile::kT];
  const int64_t bh = blockIdx.x, KV = d.K * d.V;
  const int k0 = blockIdx.y * tile::kT, v0 = blockIdx.z * tile::kT;
  const int nk = tile_extent(d.K, k0);
  const int nv = tile_extent(d.V, v0);
  tile::Frag S;
  if (h0 != nullptr) {
    load_frag(S, h0 + bh * KV + k0 * d.V + v0, d.V, nk, nv);
  } else {
    tile::zero(S);
  }
  for (int64_t c = 0; c < d.NT; ++c) {
    const int rows = chunk_rows(d, c);
    const float* Gc = G + (bh * d.NT + c) * tile::kT;
    const float last = Gc[tile::kT - 1];
    if (h != nullptr) tile::store(S, h + (bh * d.NT + c) * KV + k0 * d.V + v0, d.V, nk, nv);
    if (threadIdx.x < tile::kT) decay[threadIdx.x] = expf(last - Gc[threadIdx.x]);
    __syncthreads();
    tile::load(ks, seq_row(k, d.H, bh, c * d.C) + k0, k.st, rows, nk);
    tile::load(vs, seq_row(v, d.H, bh, c * d.C) + v0, v.st, rows, nv, decay);
    __syncthreads();
    // S(k, v) = e^L S(k, v) + sum_j K[j][k] e^{L - G_j} V[j][v]
    scale_frag(S, expf(last));
    tile::mma(S, ks, 1, kLd, vs, kLd, 1);
  }
  if (ht != nullptr) tile::store(S, ht + bh * KV + k0 * d.V + v0, d.V, nk, nv);
}

// Grid (BH, NT, NV): o rows of chunk c, value columns v0..v0+63.
__global__ void __launch_bounds__(tile::kThreads) fwd_o_kernel(KernelDims d, Seq q, Seq k, Seq v, const float* G,
                                                               const float* h, float scale, SeqOut o) {
  extern __shared__ float smem[];
  float* t0 = smem;
  float* t1 = smem + kTileFloats;
  float* t2 = smem + 2 * kTileFloats;
  __shared__ float gs[tile::kT];
  const int64_t bh = blockIdx.x, c = blockIdx.y, KV = d.K * d.V;
  const int v0 = blockIdx.z * tile::kT;
  const int nv = tile_extent(d.V, v0);
  const int rows = chunk_rows(d, c);
  if (threadIdx.x < tile::kT) gs[threadIdx.x] = G[(bh * d.NT + c) * tile::kT + threadIdx.x];
  const float* hc = h + (bh * d.NT + c) * KV;
  tile::Frag acc_o, acc_a;
  tile::zero(acc_o);
  tile::zero(acc_a);
  for (int64_t kt = 0; kt < d.NK; ++kt) {
    const int k0 = static_cast<int>(kt * tile::kT);
    const int nk = tile_extent(d.K, k0);
    __syncthreads();
    tile::load(t0, seq_row(q, d.H, bh, c * d.C) + k0, q.st, rows, nk);
    tile::load(t1, seq_row(k, d.H, bh, c * d.C) + k0, k.st, rows, nk);
    tile::load(t2, hc + k0 * d.V + v0, d.V, nk, nv);
    __syncthreads();
    tile::mma(acc_a, t0, kLd, 1, t1, 1, kLd);  // Q K^T
    tile::mma(acc_o, t0, kLd, 1, t2, kLd, 1);  // Q h
  }
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int i = tile::frag_row(a);
    const float eg = expf(gs[i]);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int j = tile::frag_col(b);
      acc_o.v[a][b] *= eg;
      acc_a.v[a][b] = i >= j ? acc_a.v[a][b] * expf(gs[i] - gs[j]) : 0.0f;
    }
  }
  __syncthreads();
  tile::store_shared(acc_a, t0);
  tile::load(t1, seq_row(v, d.H, bh, c * d.C) + v0, v.st, rows, nv);
  __syncthreads();
  tile::mma(acc_o, t0, kLd, 1, t1, kLd, 1);  // (Q K^T (.) D) V
  tile::store(acc_o, seq_row(o, d.H, bh, c * d.C) + v0, o.st, rows, nv, scale);
}

// Grid (BH, NK, NV): the reverse walk of one tile of dH.
__global__ void __launch_bounds__(tile::kThreads) bwd_dh_kernel(KernelDims d, Seq q, Seq d_o, const float* G,
                                                                const float* dht, float scale, float* dh,
                                                                float* dh0) {
  __shared__ float qs[kTileFloats];
  __shared__ float ds[kTileFloats];
  __shared__ float factor[tile::kT];
  const int64_t bh = blockIdx.x, KV = d.K * d.V;
  const int k0 = blockIdx.y * tile::kT, v0 = blockIdx.z * tile::kT;
  const int nk = tile_extent(d.K, k0);
  const int nv = tile_extent(d.V, v0);
  tile::Frag D;
  if (dht != nullptr) {
    load_frag(D, dht + bh * KV + k0 * d.V + v0, d.V, nk, nv);
  } else {
    tile::zero(D);
  }
  for (int64_t c = d.NT - 1; c >= 0; --c) {
    const int rows = chunk_rows(d, c);
    const float* Gc = G + (bh * d.NT + c) * tile::kT;
    const float last = Gc[tile::kT - 1];
    tile::store(D, dh + (bh * d.NT + c) * KV + k0 * d.V + v0, d.V, nk, nv);
    if (threadIdx.x < tile::kT) factor[threadIdx.x] = scale * expf(Gc[threadIdx.x]);
    __syncthreads();
    tile::load(qs, seq_row(q, d.H, bh, c * d.C) + k0, q.st, rows, nk, factor);
    tile::load(ds, seq_row(d_o, d.H, bh, c * d.C) + v0, d_o.st, rows, nv);
    __syncthreads();
    // dH(k, v) = e^L dH(k, v) + sum_i scale e^{G_i} Q[i][k] dO[i][v]
    scale_frag(D, expf(last));
    tile::mma(D, qs, 1, kLd, ds, kLd, 1);
  }
  if (dh0 != nullptr) tile::store(D, dh0 + bh * KV + k0 * d.V + v0, d.V, nk, nv);
}

// Grid (BH, NT, NK): dq, dk columns k0..k0+63 of chunk c (and dw for the delta rule).
__global__ void __launch_bounds__(tile::kThreads) bwd_dqk_kernel(KernelDims d, Seq q, Seq k, Seq v, Seq d_o,
                                                                 const float* G, const float* h, const float* dh,
                                                                 float scale, SeqOut dq, SeqOut dk, float* dg_part,
                                                                 Seq dv_new, float* dw) {
  extern __shared__ float smem[];
  float* t_do = smem;
  float* t_v = smem + kTileFloats;
  float* t_h = smem + 2 * kTileFloats;
  float* t_dh = smem + 3 * kTileFloats;
  float* t_dvn = smem + 4 * kTileFloats;
  __shared__ float gs[tile::kT];
  const int64_t bh = blockIdx.x, c = blockIdx.y, KV = d.K * d.V;
  const int k0 = blockIdx.z * tile::kT;
  const int nk = tile_extent(d.K, k0);
  const int rows = chunk_rows(d, c);
  const bool with_dw = dw != nullptr;
  if (threadIdx.x < tile::kT) gs[threadIdx.x] = G[(bh * d.NT + c) * tile::kT + threadIdx.x];
  const float* hc = h + (bh * d.NT + c) * KV + k0 * d.V;
  const float* dhc = dh + (bh * d.NT + c) * KV + k0 * d.V;
  tile::Frag dp, dqf, dkf, dwf;
  tile::zero(dp);
  tile::zero(dqf);
  tile::zero(dkf);
  tile::zero(dwf);
  float hdh = 0.0f;  // this thread's share of <h[c], dH_c> over the K tile
  for (int64_t vt = 0; vt < d.NV; ++vt) {
    const int v0 = static_cast<int>(vt * tile::kT);
    const int nv = tile_extent(d.V, v0);
    __syncthreads();
    tile::load(t_do, seq_row(d_o, d.H, bh, c * d.C) + v0, d_o.st, rows, nv);
    tile::load(t_v, seq_row(v, d.H, bh, c * d.C) + v0, v.st, rows, nv);
    tile::load(t_h, hc + v0, d.V, nk, nv);
    tile::load(t_dh, dhc + v0, d.V, nk, nv);
    if (with_dw) tile::load(t_dvn, seq_row(dv_new, d.H, bh, c * d.C) + v0, dv_new.st, rows, nv);
    __syncthreads();
    tile::mma(dp, t_do, kLd, 1, t_v, 1, kLd);    // dO V^T
    tile::mma(dqf, t_do, kLd, 1, t_h, 1, kLd);   // dO h^T
    tile::mma(dkf, t_v, kLd, 1, t_dh, 1, kLd);   // V dH^T
    if (with_dw) tile::mma(dwf, t_dvn, kLd, 1, t_h, 1, kLd);  // dV^new h^T
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int e = tile::frag_row(a) * kLd + tile::frag_col(b);
        hdh += t_h[e] * t_dh[e];
      }
  }
  const float last = gs[tile::kT - 1];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int i = tile::frag_row(a);
    const float eq = scale * expf(gs[i]), ek = expf(last - gs[i]);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int j = tile::frag_col(b);
      dqf.v[a][b] *= eq;  // dq^inter
      dkf.v[a][b] *= ek;  // dk^inter
      dp.v[a][b] = i >= j ? scale * dp.v[a][b] * expf(gs[i] - gs[j]) : 0.0f;  // P
    }
  }
  float* t_q = t_do;
  float* t_k = t_v;
  float* t_p = t_h;
  float* t_m = t_dh;  // the pair terms M of the gate gradient
  __shared__ float column_sums[tile::kT];
  __syncthreads();
  tile::load(t_q, seq_row(q, d.H, bh, c * d.C) + k0, q.st, rows, nk);
  tile::load(t_k, seq_row(k, d.H, bh, c * d.C) + k0, k.st, rows, nk);
  tile::store_shared(dp, t_p);
  __syncthreads();
  // Gate gradient pieces over this K tile (see the file comment), taken before the P terms
  // join dq and dk: for the suffix sums, q_i . dq_i^inter plus the pair terms M = P (.) Q K^T
  // strictly below the diagonal (their row sums here, minus their column sums below); for
  // the prefix sums, k_i . dk_i^inter.
  const bool with_dg = dg_part != nullptr;
  float suffix_terms[4] = {0.0f, 0.0f, 0.0f, 0.0f}, prefix_terms[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (with_dg) {
    tile::Frag qk;
    tile::zero(qk);
    tile::mma(qk, t_q, kLd, 1, t_k, 1, kLd);
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int i = tile::frag_row(a);
      float s = 0.0f, kd = 0.0f;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int j = tile::frag_col(b), e = i * kLd + j;
        qk.v[a][b] = i > j ? dp.v[a][b] * qk.v[a][b] : 0.0f;  // M_ij
        s += t_q[e] * dqf.v[a][b] + qk.v[a][b];
        kd += t_k[e] * dkf.v[a][b];
      }
      suffix_terms[a] = tile::row_sum16(s);
      prefix_terms[a] = tile::row_sum16(kd);
    }
    tile::store_shared(qk, t_m);
  }
  tile::mma(dqf, t_p, kLd, 1, t_k, kLd, 1);  // + P K
  tile::mma(dkf, t_p, 1, kLd, t_q, kLd, 1);  // + P^T Q
  tile::store(dqf, seq_row(dq, d.H, bh, c * d.C) + k0, dq.st, rows, nk);
  tile::store(dkf, seq_row(dk, d.H, bh, c * d.C) + k0, dk.st, rows, nk);
  if (with_dw) tile::store(dwf, dw + (bh * d.NT + c) * d.C * d.K + k0, d.K, rows, nk, -1.0f);
  if (with_dg) {
    const float state_term = expf(last) * static_cast<float>(lat::cuda::block_sum_all(static_cast<double>(hdh)));
    __syncthreads();
    if (threadIdx.x < tile::kT) {  // minus the pairs (r > i) whose earlier element is i
      const int i = threadIdx.x;
      float s = 0.0f;
      for (int r = i + 1; r < tile::kT; ++r) s += t_m[r * kLd + i];
      column_sums[i] = s;
    }
    __syncthreads();
    const int64_t slot = d.B * d.H * d.NT * tile::kT;
    float* suffix = dg_part + 2 * blockIdx.z * slot + bh * d.NT * tile::kT + c * tile::kT;
    float* prefix = suffix + slot;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int i = tile::frag_row(a);
      if ((threadIdx.x & 15) == 0) {
        // The state term concerns every g_t of the chunk: it rides on the suffix of the last row.
        suffix[i] = suffix_terms[a] - column_sums[i] + (i == tile::kT - 1 ? state_term : 0.0f);
        prefix[i] = prefix_terms[a];
      }
    }
  }
}

// Grid (BH, NT, NV): dv columns v0..v0+63 of chunk c.
__global__ void __launch_bounds__(tile::kThreads) bwd_dv_kernel(KernelDims d, Seq q, Seq k, Seq d_o, const float* G,
                                                                const float* dh, float scale, SeqOut dv) {
  extern __shared__ float smem[];
  float* t0 = smem;
  float* t1 = smem + kTileFloats;
  float* t2 = smem + 2 * kTileFloats;
  __shared__ float gs[tile::kT];
  const int64_t bh = blockIdx.x, c = blockIdx.y, KV = d.K * d.V;
  const int v0 = blockIdx.z * tile::kT;
  const int nv = tile_extent(d.V, v0);
  const int rows = chunk_rows(d, c);
  if (threadIdx.x < tile::kT) gs[threadIdx.x] = G[(bh * d.NT + c) * tile::kT + threadIdx.x];
  tile::Frag af, dvf;
  tile::zero(af);
  tile::zero(dvf);
  for (int64_t kt = 0; kt < d.NK; ++kt) {
    const int k0 = static_cast<int>(kt * tile::kT);
    const int nk = tile_extent(d.K, k0);
    __syncthreads();
    tile::load(t0, seq_row(q, d.H, bh, c * d.C) + k0, q.st, rows, nk);
    tile::load(t1, seq_row(k, d.H, bh, c * d.C) + k0, k.st, rows, nk);
    if (dh != nullptr) tile::load(t2, dh + (bh * d.NT + c) * KV + k0 * d.V + v0, d.V, nk, nv);
    __syncthreads();
    tile::mma(af, t0, kLd, 1, t1, 1, kLd);                       // Q K^T
    if (dh != nullptr) tile::mma(dvf, t1, kLd, 1, t2, kLd, 1);   // K dH
  }
  const float last = gs[tile::kT - 1];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int i = tile::frag_row(a);
    const float ek = expf(last - gs[i]);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int j = tile::frag_col(b);
      dvf.v[a][b] *= ek;
      af.v[a][b] = i >= j ? scale * af.v[a][b] * expf(gs[i] - gs[j]) : 0.0f;
    }
  }
  __syncthreads();
  tile::store_shared(af, t0);
  tile::load(t1, seq_row(d_o, d.H, bh, c * d.C) + v0, d_o.st, rows, nv);
  __syncthreads();
  tile::mma(dvf, t0, 1, kLd, t1, kLd, 1);  // (scale Q K^T (.) D)^T dO
  tile::store(dvf, seq_row(dv, d.H, bh, c * d.C) + v0, dv.st, rows, nv);
}

// One thread per (bh, chunk): dg_t = sum over parts of the suffix sum (rows >= t) of slot
// 0 plus the exclusive prefix sum (rows < t) of slot 1.
__global__ void dg_finish_kernel(KernelDims d, const float* part, int64_t parts, float* dg) {
  const int64_t BH = d.B * d.H, n = BH * d.NT, slot = BH * d.NT * tile::kT;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = idx / d.NT, c = idx % d.NT, row0 = bh * d.NT * tile::kT + c * tile::kT;
    const int rows = chunk_rows(d, c);
    float prefix[tile::kT];
    float acc = 0.0f;
    for (int i = 0; i < tile::kT; ++i) {
      prefix[i] = acc;
      for (int64_t p = 0; p < parts; ++p) acc += part[(2 * p + 1) * slot + row0 + i];
    }
    acc = 0.0f;
    for (int i = tile::kT - 1; i >= 0; --i) {
      for (int64_t p = 0; p < parts; ++p) acc += part[2 * p * slot + row0 + i];
      if (i < rows) dg[bth_index(d, bh, c * d.C + i)] = acc + prefix[i];
    }
  }
}

void check_dims(const Dims& d) {
  LAT_CHECK(d.C >= 1 && d.C <= tile::kT, "linear attention (cuda): chunk_size: expected 1.." << tile::kT << ", got "
                                                                                            << d.C);
}

}  // namespace

void chunk_cumsum(const Dims& d, const float* g, float* G) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  const int64_t n = d.BH() * d.NT();
  cumsum_kernel<<<lat::cuda::grid_for(n), lat::cuda::kBlock, 0, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), g, G);
  LAT_CUDA_CHECK_LAUNCH();
}

void chunk_fwd_h(const Dims& d, Seq k, Seq v, const float* G, const float* h0, float* h, float* ht) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  fwd_h_kernel<<<grid3(d.BH(), d.NK(), d.NV()), tile::kThreads, 0, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), k, v, G, h0, h, ht);
  LAT_CUDA_CHECK_LAUNCH();
}

void chunk_fwd_o(const Dims& d, Seq q, Seq k, Seq v, const float* G, const float* h, float scale, SeqOut o) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  const size_t smem = 3 * tile::kTileBytes;
  allow_shared_memory(fwd_o_kernel, smem);
  fwd_o_kernel<<<grid3(d.BH(), d.NT(), d.NV()), tile::kThreads, smem, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), q, k, v, G, h, scale, o);
  LAT_CUDA_CHECK_LAUNCH();
}

void chunk_bwd_dh(const Dims& d, Seq q, Seq d_o, const float* G, const float* dht, float scale, float* dh,
                  float* dh0) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  bwd_dh_kernel<<<grid3(d.BH(), d.NK(), d.NV()), tile::kThreads, 0, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), q, d_o, G, dht, scale, dh, dh0);
  LAT_CUDA_CHECK_LAUNCH();
}

void chunk_bwd_dqk(const Dims& d, Seq q, Seq k, Seq v, Seq d_o, const float* G, const float* h, const float* dh,
                   float scale, SeqOut dq, SeqOut dk, float* dg_part, Seq dv_new, float* dw) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  const size_t smem = 5 * tile::kTileBytes;
  allow_shared_memory(bwd_dqk_kernel, smem);
  bwd_dqk_kernel<<<grid3(d.BH(), d.NT(), d.NK()), tile::kThreads, smem, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), q, k, v, d_o, G, h, dh, scale, dq, dk, dg_part, dv_new, dw);
  LAT_CUDA_CHECK_LAUNCH();
}

void chunk_bwd_dv(const Dims& d, Seq q, Seq k, Seq d_o, const float* G, const float* dh, float scale, SeqOut dv) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  const size_t smem = 3 * tile::kTileBytes;
  allow_shared_memory(bwd_dv_kernel, smem);
  bwd_dv_kernel<<<grid3(d.BH(), d.NT(), d.NV()), tile::kThreads, smem, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), q, k, d_o, G, dh, scale, dv);
  LAT_CUDA_CHECK_LAUNCH();
}

void chunk_dg_finish(const Dims& d, const float* dg_part, int64_t parts, float* dg) {
  check_dims(d);
  lat::cuda::DeviceGuard guard(d.device);
  const int64_t n = d.BH() * d.NT();
  dg_finish_kernel<<<lat::cuda::grid_for(n), lat::cuda::kBlock, 0, lat::cuda::current_stream(d.device)>>>(
      kernel_dims(d), dg_part, parts, dg);
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace lat::linear_attention::cuda

// ---- the decayed family's chunk op (decay_kernels.h): the kernels above in order ---------

namespace lat::linear_attention {
namespace {

// The kernels' sizes; their V is the state width Vs.
cu::Dims dims_of(const DecayParams& p) { return {p.B, p.T, p.H, p.K, p.Vs(), p.C, p.device}; }

// What forward keeps for backward (the states are recomputed): G and, with the
// normalizer, the extended values and the readout.
struct ChunkDecaySaved : DecaySaved {
  DeviceBuffer G;        // [BH, NT, 64]
  DeviceBuffer values;   // [B, T, H, V + 1]: [v, 1], with the normalizer only
  DeviceBuffer readout;  // [B, T, H, V + 1]: r, with the normalizer only
};

}  // namespace

std::shared_ptr<const DecaySaved> chunk_decay_forward_cuda(const DecayParams& p, float* o, float* ht, bool save) {
  const cu::Dims d = dims_of(p);
  const int64_t Vs = d.V, rows = p.B * p.T * p.H;
  auto saved = std::make_shared<ChunkDecaySaved>();
  // With the normalizer the values get a constant-1 column (state [K, V + 1], z last) and
  // the readout r [B, T, H, V + 1] is divided by its last column into o.
  const float* values = p.v;
  float* r = o;
  if (p.normalize) {
    saved->values = DeviceBuffer(rows * Vs, p.device);
    cu::append_ones_column(p.v, rows, p.V, saved->values.data(), p.device);
    values = saved->values.data();
    saved->readout = DeviceBuffer(rows * Vs, p.device);
    r = saved->readout.data();
  }
  saved->G = DeviceBuffer(d.BH() * d.NT() * cu::tile::kT, p.device);
  const float* G = saved->G.data();
  cu::chunk_cumsum(d, p.g, saved->G.data());
  const cu::Seq q = cu::api_seq(p.q, d, d.K), k = cu::api_seq(p.k, d, d.K), v = cu::api_seq(values, d, Vs);
  {
    DeviceBuffer h(d.BH() * d.NT() * d.K * Vs, p.device);
    cu::chunk_fwd_h(d, k, v, G, p.h0, h.data(), ht);
    cu::chunk_fwd_o(d, q, k, v, G, h.data(), p.scale, cu::api_out(r, d, Vs));
  }
  if (p.normalize) cu::normalize_forward(r, rows, p.V, kNormEps, o, p.device);
  return save ? saved : nullptr;
}

void chunk_decay_backward_cuda(const DecayParams& p, const DecaySaved& saved, const float* d_o, const float* dht,
                               const DecayGrads& grads) {
  const auto& s = static_cast<const ChunkDecaySaved&>(saved);
  const cu::Dims d = dims_of(p);
  const int64_t Vs = d.V, rows = p.B * p.T * p.H;
  const float* G = s.G.data();
  const cu::Seq q = cu::api_seq(p.q, d, d.K), k = cu::api_seq(p.k, d, d.K);
  const cu::Seq v = cu::api_seq(p.normalize ? s.values.data() : p.v, d, Vs);
  // dr, the readout's gradient: through the normalizer, or d_o itself.
  DeviceBuffer dr_normalized;
  if (p.normalize) {
    dr_normalized = DeviceBuffer(rows * Vs, p.device);
    cu::normalize_backward(s.readout.data(), d_o, rows, p.V, kNormEps, dr_normalized.data(), p.device);
  }
  const cu::Seq dr = cu::api_seq(p.normalize ? dr_normalized.data() : d_o, d, Vs);
  DeviceBuffer h(d.BH() * d.NT() * d.K * Vs, p.device);
  cu::chunk_fwd_h(d, k, v, G, p.h0, h.data(), nullptr);
  DeviceBuffer dh(d.BH() * d.NT() * d.K * Vs, p.device);
  cu::chunk_bwd_dh(d, q, dr, G, dht, p.scale, dh.data(), grads.dh0);
  const bool with_dg = p.g != nullptr && grads.dg != nullptr;
  DeviceBuffer dg_part = with_dg ? DeviceBuffer(d.NK() * 2 * d.BH() * d.NT() * cu::tile::kT, p.device) : DeviceBuffer();
  cu::chunk_bwd_dqk(d, q, k, v, dr, G, h.data(), dh.data(), p.scale, cu::api_out(grads.dq, d, d.K),
                    cu::api_out(grads.dk, d, d.K), dg_part.data(), cu::Seq{}, nullptr);
  // dv of the extended values; the constant column's gradient is dropped.
  DeviceBuffer dvs = p.normalize ? DeviceBuffer(rows * Vs, p.device) : DeviceBuffer();
  cu::chunk_bwd_dv(d, q, k, dr, G, dh.data(), p.scale, cu::api_out(p.normalize ? dvs.data() : grads.dv, d, Vs));
  if (p.normalize) cu::drop_last_column(dvs.data(), rows, p.V, grads.dv, p.device);
  if (with_dg) cu::chunk_dg_finish(d, dg_part.data(), d.NK(), grads.dg);
}

}  // namespace lat::linear_attention
