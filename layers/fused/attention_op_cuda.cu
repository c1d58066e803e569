// CUDA kernels of the fused causal attention (see attention_op_cuda.h). Per (batch, head):
// S = scale Q K^T (masked), P = softmax_rows(S), O = P V, lse_i = log sum_j exp(S_ij).
// Backward with delta_i = dO_i . O_i and P_ij = exp(S_ij - lse_i):
//   dS_ij = P_ij (dP_ij - delta_i), dP = dO V^T, dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO.
// Tiles are 64 queries x 64 keys (autograd/cuda/tile.cuh); the head dims are walked in
// 64-wide slices, and the output accumulators of up to two slices stay in registers.
#include <cmath>

#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/cuda_memory.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "autograd/cuda/tile.cuh"
#include "layers/fused/attention_op_cuda.h"

namespace lat::attention_cuda {
namespace {

namespace tile = lat::cuda::tile;
using tile::kLd;
using tile::kT;
using tile::kTileFloats;

constexpr int kSlices = static_cast<int>(kMaxHeadDim / kT);

struct KernelArgs {
  const float* q;
  const float* k;
  const float* v;
  int64_t Tq, Tk, H, Hkv, D, Dv, q_bs, k_bs, v_bs, q_offset, window;
  float scale;
};

__device__ __forceinline__ bool visible(const KernelArgs& a, int64_t i, int64_t j) {
  const int64_t p = i + a.q_offset;
  return j <= p && (a.window == 0 || j > p - a.window);
}

__device__ __forceinline__ float row_max16(float v) {
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ int extent(int64_t total, int64_t start) {
  const int64_t n = total - start;
  return static_cast<int>(n < kT ? n : kT);
}

// Grid (query tiles, H, B).
__global__ void __launch_bounds__(tile::kThreads) forward_kernel(KernelArgs a, float* o, float* lse) {
  extern __shared__ float smem[];
  float* ta = smem;
  float* tb = smem + kTileFloats;
  const int64_t i0 = int64_t(blockIdx.x) * kT, h = blockIdx.y, b = blockIdx.z, hk = h / (a.H / a.Hkv);
  const int nr = extent(a.Tq, i0);
  const float* qb = a.q + b * a.q_bs + h * a.D;
  const float* kb = a.k + b * a.k_bs + hk * a.D;
  const float* vb = a.v + b * a.v_bs + hk * a.Dv;
  const int64_t q_st = a.H * a.D, k_st = a.Hkv * a.D, v_st = a.Hkv * a.Dv;
  const int nd = static_cast<int>((a.D + kT - 1) / kT), ndv = static_cast<int>((a.Dv + kT - 1) / kT);
  tile::Frag acc[kSlices];
  float m[4], l[4];
#pragma unroll
  for (int s = 0; s < kSlices; ++s) tile::zero(acc[s]);
#pragma unroll
  for (int r = 0; r < 4; ++r) m[r] = -INFINITY, l[r] = 0.0f;
  const int64_t last_query = i0 + nr - 1;
  const int64_t key_begin = a.window > 0 ? max(int64_t{0}, i0 + a.q_offset - a.window + 1) : 0;
  const int64_t key_end = min(a.Tk, last_query + a.q_offset + 1);
  for (int64_t j0 = key_begin; j0 < key_end; j0 += kT) {
    const int nc = extent(key_end, j0);
    tile::Frag s;
    tile::zero(s);
    for (int ds = 0; ds < nd; ++ds) {
      __syncthreads();
      tile::load(ta, qb + i0 * q_st + ds * kT, q_st, nr, extent(a.D, ds * kT));
      tile::load(tb, kb + j0 * k_st + ds * kT, k_st, nc, extent(a.D, ds * kT));
      __syncthreads();
      tile::mma(s, ta, kLd, 1, tb, 1, kLd);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t i = i0 + tile::frag_row(r);
      float x[4], mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int jc = tile::frag_col(c);
        x[c] = jc < nc && visible(a, i, j0 + jc) ? s.v[r][c] * a.scale : -INFINITY;
        mx = fmaxf(mx, x[c]);
      }
      // The shuffles run in every lane (a warp holds two rows, which may differ in
      // visibility), so a row without a visible key in this tile only skips the update.
      mx = row_max16(mx);
      const bool any = mx != -INFINITY;
      // Online softmax: rescale what was accumulated under the old running max.
      const float m_new = any ? fmaxf(m[r], mx) : m[r];
      const float alpha = any ? expf(m[r] - m_new) : 1.0f;
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s.v[r][c] = any ? expf(x[c] - m_new) : 0.0f;
        sum += s.v[r][c];
      }
      sum = tile::row_sum16(sum);
      if (!any) continue;
      l[r] = l[r] * alpha + sum;
      m[r] = m_new;
#pragma unroll
      for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[sl].v[r][c] *= alpha;
    }
    __syncthreads();
    tile::store_shared(s, ta);
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl) {
      if (sl >= ndv) break;
      tile::load(tb, vb + j0 * v_st + sl * kT, v_st, nc, extent(a.Dv, sl * kT));
      __syncthreads();
      tile::mma(acc[sl], ta, kLd, 1, tb, kLd, 1);
      __syncthreads();
    }
  }
  // Every query sees at least its own position (q_offset <= Tk - Tq), so l > 0.
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = tile::frag_row(r);
    if (row >= nr) continue;
    const float inv = 1.0f / l[r];
    float* out = o + ((b * a.Tq + i0 + row) * a.H + h) * a.Dv;
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t col = sl * kT + tile::frag_col(c);
        if (sl < ndv && col < a.Dv) out[col] = acc[sl].v[r][c] * inv;
      }
    if (lse != nullptr && (threadIdx.x & 15) == 0) lse[(b * a.H + h) * a.Tq + i0 + row] = m[r] + logf(l[r]);
  }
}

// Warp per (b, i, h): delta[b, h, i] = dO . O.
__global__ void delta_kernel(const float* o, const float* d_o, int64_t B, int64_t Tq, int64_t H, int64_t Dv,
                             float* delta) {
  const int64_t rows = B * Tq * H, warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    float s = 0.0f;
    for (int64_t j = threadIdx.x % 32; j < Dv; j += 32) s += o[r * Dv + j] * d_o[r * Dv + j];
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
    if (threadIdx.x % 32 == 0) {
      const int64_t h = r % H, i = (r / H) % Tq, b = r / (H * Tq);
      delta[(b * H + h) * Tq + i] = s;
    }
  }
}

// Grid (query tiles, H, B): dq rows of one query tile.
__global__ void __launch_bounds__(tile::kThreads) dq_kernel(KernelArgs a, const float* d_o, const float* lse,
                                                            const float* delta, float* dq) {
  extern __shared__ float smem[];
  float* ta = smem;
  float* tb = smem + kTileFloats;
  const int64_t i0 = int64_t(blockIdx.x) * kT, h = blockIdx.y, b = blockIdx.z, hk = h / (a.H / a.Hkv);
  const int nr = extent(a.Tq, i0);
  const float* qb = a.q + b * a.q_bs + h * a.D;
  const float* kb = a.k + b * a.k_bs + hk * a.D;
  const float* vb = a.v + b * a.v_bs + hk * a.Dv;
  const float* dob = d_o + b * a.Tq * a.H * a.Dv + h * a.Dv;
  const int64_t q_st = a.H * a.D, k_st = a.Hkv * a.D, v_st = a.Hkv * a.Dv, do_st = a.H * a.Dv;
  const int nd = static_cast<int>((a.D + kT - 1) / kT), ndv = static_cast<int>((a.Dv + kT - 1) / kT);
  float lse_r[4], delta_r[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = tile::frag_row(r);
    lse_r[r] = row < nr ? lse[(b * a.H + h) * a.Tq + i0 + row] : 0.0f;
    delta_r[r] = row < nr ? delta[(b * a.H + h) * a.Tq + i0 + row] : 0.0f;
  }
  tile::Frag acc[kSlices];
#pragma unroll
  for (int s = 0; s < kSlices; ++s) tile::zero(acc[s]);
  const int64_t last_query = i0 + nr - 1;
  const int64_t key_begin = a.window > 0 ? max(int64_t{0}, i0 + a.q_offset - a.window + 1) : 0;
  const int64_t key_end = min(a.Tk, last_query + a.q_offset + 1);
  for (int64_t j0 = key_begin; j0 < key_end; j0 += kT) {
    const int nc = extent(key_end, j0);
    tile::Frag s, dp;
    tile::zero(s);
    tile::zero(dp);
    for (int ds = 0; ds < nd; ++ds) {
      __syncthreads();
      tile::load(ta, qb + i0 * q_st + ds * kT, q_st, nr, extent(a.D, ds * kT));
      tile::load(tb, kb + j0 * k_st + ds * kT, k_st, nc, extent(a.D, ds * kT));
      __syncthreads();
      tile::mma(s, ta, kLd, 1, tb, 1, kLd);
    }
    for (int dv = 0; dv < ndv; ++dv) {
      __syncthreads();
      tile::load(ta, dob + i0 * do_st + dv * kT, do_st, nr, extent(a.Dv, dv * kT));
      tile::load(tb, vb + j0 * v_st + dv * kT, v_st, nc, extent(a.Dv, dv * kT));
      __syncthreads();
      tile::mma(dp, ta, kLd, 1, tb, 1, kLd);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t i = i0 + tile::frag_row(r);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int jc = tile::frag_col(c);
        const bool in = tile::frag_row(r) < nr && jc < nc && visible(a, i, j0 + jc);
        s.v[r][c] = in ? expf(s.v[r][c] * a.scale - lse_r[r]) * (dp.v[r][c] - delta_r[r]) : 0.0f;  // dS
      }
    }
    __syncthreads();
    tile::store_shared(s, ta);
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl) {
      if (sl >= nd) break;
      tile::load(tb, kb + j0 * k_st + sl * kT, k_st, nc, extent(a.D, sl * kT));
      __syncthreads();
      tile::mma(acc[sl], ta, kLd, 1, tb, kLd, 1);
      __syncthreads();
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = tile::frag_row(r);
    if (row >= nr) continue;
    float* out = dq + ((b * a.Tq + i0 + row) * a.H + h) * a.D;
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t col = sl * kT + tile::frag_col(c);
        if (sl < nd && col < a.D) out[col] = acc[sl].v[r][c] * a.scale;
      }
  }
}

// Grid (key tiles, Hkv, B): dk, dv rows of one key tile, summed over the group's query heads.
__global__ void __launch_bounds__(tile::kThreads) dkv_kernel(KernelArgs a, const float* d_o, const float* lse,
                                                             const float* delta, float* dk, float* dv) {
  extern __shared__ float smem[];
  float* ta = smem;                    // K or V slice (keys as rows)
  float* tb = smem + kTileFloats;      // Q or dO slice (queries as rows)
  float* tp = smem + 2 * kTileFloats;  // P^T
  float* tds = smem + 3 * kTileFloats; // dS^T
  const int64_t j0 = int64_t(blockIdx.x) * kT, hk = blockIdx.y, b = blockIdx.z, group = a.H / a.Hkv;
  const int nc = extent(a.Tk, j0);
  const float* kb = a.k + b * a.k_bs + hk * a.D;
  const float* vb = a.v + b * a.v_bs + hk * a.Dv;
  const int64_t q_st = a.H * a.D, k_st = a.Hkv * a.D, v_st = a.Hkv * a.Dv, do_st = a.H * a.Dv;
  const int nd = static_cast<int>((a.D + kT - 1) / kT), ndv = static_cast<int>((a.Dv + kT - 1) / kT);
  tile::Frag dk_acc[kSlices], dv_acc[kSlices];
#pragma unroll
  for (int s = 0; s < kSlices; ++s) tile::zero(dk_acc[s]), tile::zero(dv_acc[s]);
  const int64_t last_key = j0 + nc - 1;
  const int64_t query_begin = max(int64_t{0}, j0 - a.q_offset);
  const int64_t query_end = a.window > 0 ? min(a.Tq, last_key - a.q_offset + a.window) : a.Tq;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const float* qb = a.q + b * a.q_bs + h * a.D;
    const float* dob = d_o + b * a.Tq * a.H * a.Dv + h * a.Dv;
    for (int64_t i0 = query_begin; i0 < query_end; i0 += kT) {
      const int nr = extent(query_end, i0);
      tile::Frag st, dpt;
      tile::zero(st);
      tile::zero(dpt);
      for (int ds = 0; ds < nd; ++ds) {
        __syncthreads();
        tile::load(ta, kb + j0 * k_st + ds * kT, k_st, nc, extent(a.D, ds * kT));
        tile::load(tb, qb + i0 * q_st + ds * kT, q_st, nr, extent(a.D, ds * kT));
        __syncthreads();
        tile::mma(st, ta, kLd, 1, tb, 1, kLd);  // K Q^T
      }
      for (int dvs = 0; dvs < ndv; ++dvs) {
        __syncthreads();
        tile::load(ta, vb + j0 * v_st + dvs * kT, v_st, nc, extent(a.Dv, dvs * kT));
        tile::load(tb, dob + i0 * do_st + dvs * kT, do_st, nr, extent(a.Dv, dvs * kT));
        __syncthreads();
        tile::mma(dpt, ta, kLd, 1, tb, 1, kLd);  // V dO^T
      }
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int qc = tile::frag_col(c);
        const int64_t i = i0 + qc;
        const float lse_i = qc < nr ? lse[(b * a.H + h) * a.Tq + i] : 0.0f;
        const float delta_i = qc < nr ? delta[(b * a.H + h) * a.Tq + i] : 0.0f;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int kr = tile::frag_row(r);
          const bool in = kr < nc && qc < nr && visible(a, i, j0 + kr);
          const float p = in ? expf(st.v[r][c] * a.scale - lse_i) : 0.0f;
          st.v[r][c] = p;
          dpt.v[r][c] = in ? p * (dpt.v[r][c] - delta_i) : 0.0f;
        }
      }
      __syncthreads();
      tile::store_shared(st, tp);
      tile::store_shared(dpt, tds);
#pragma unroll
      for (int sl = 0; sl < kSlices; ++sl) {
        if (sl >= ndv) break;
        tile::load(tb, dob + i0 * do_st + sl * kT, do_st, nr, extent(a.Dv, sl * kT));
        __syncthreads();
        tile::mma(dv_acc[sl], tp, kLd, 1, tb, kLd, 1);  // P^T dO
        __syncthreads();
      }
#pragma unroll
      for (int sl = 0; sl < kSlices; ++sl) {
        if (sl >= nd) break;
        tile::load(tb, qb + i0 * q_st + sl * kT, q_st, nr, extent(a.D, sl * kT));
        __syncthreads();
        tile::mma(dk_acc[sl], tds, kLd, 1, tb, kLd, 1);  // dS^T Q
        __syncthreads();
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = tile::frag_row(r);
    if (row >= nc) continue;
    float* dk_out = dk + ((b * a.Tk + j0 + row) * a.Hkv + hk) * a.D;
    float* dv_out = dv + ((b * a.Tk + j0 + row) * a.Hkv + hk) * a.Dv;
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t col = sl * kT + tile::frag_col(c);
        if (sl < nd && col < a.D) dk_out[col] = dk_acc[sl].v[r][c] * a.scale;
        if (sl < ndv && col < a.Dv) dv_out[col] = dv_acc[sl].v[r][c];
      }
  }
}

KernelArgs kernel_args(const Args& a) {
  LAT_CHECK(a.D <= kMaxHeadDim && a.Dv <= kMaxHeadDim,
            "causal_attention (cuda): head dims D = " << a.D << ", Dv = " << a.Dv << ": expected at most "
                                                      << kMaxHeadDim);
  LAT_CHECK(a.H < 65536 && a.B < 65536, "causal_attention (cuda): B = " << a.B << ", H = " << a.H
                                                                        << " exceed the grid limit 65535");
  return {a.q, a.k, a.v, a.Tq, a.Tk, a.H, a.Hkv, a.D, a.Dv, a.q_batch_stride, a.k_batch_stride, a.v_batch_stride,
          a.q_offset, a.window, a.scale};
}

// Launches a tile kernel on `stream`: a grid of (64-row tiles of n, heads, batch) blocks,
// each with `tiles` shared 64 x 64 tiles (above 48 KiB only once the kernel is allowed more).
template <class... Params, class... Args>
void launch_tiles(void (*kernel)(Params...), int tiles, int64_t n, int64_t heads, int64_t batch, cudaStream_t stream,
                  Args... args) {
  const size_t smem = tiles * tile::kTileBytes;
  if (smem > 48 * 1024)
    LAT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((n + kT - 1) / kT), static_cast<unsigned>(heads), static_cast<unsigned>(batch));
  kernel<<<grid, tile::kThreads, smem, stream>>>(args...);
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void forward(const Args& a, float* o, float* lse) {
  const KernelArgs k = kernel_args(a);
  lat::cuda::DeviceGuard guard(a.device);
  launch_tiles(forward_kernel, 2, a.Tq, a.H, a.B, lat::cuda::current_stream(a.device), k, o, lse);
}

void backward(const Args& a, const float* o, const float* lse, const float* do_, float* dq, float* dk, float* dv) {
  const KernelArgs k = kernel_args(a);
  lat::cuda::DeviceGuard guard(a.device);
  cudaStream_t stream = lat::cuda::current_stream(a.device);
  const int64_t rows = a.B * a.Tq * a.H;
  float* delta = static_cast<float*>(lat::cuda::allocate(static_cast<size_t>(rows) * sizeof(float), a.device));
  const unsigned delta_blocks =
      static_cast<unsigned>(std::clamp<int64_t>((rows + 7) / 8, 1, int64_t{1} << 20));  // 8 warps per block
  delta_kernel<<<delta_blocks, lat::cuda::kBlock, 0, stream>>>(o, do_, a.B, a.Tq, a.H, a.Dv, delta);
  LAT_CUDA_CHECK_LAUNCH();
  launch_tiles(dq_kernel, 2, a.Tq, a.H, a.B, stream, k, do_, lse, delta, dq);
  launch_tiles(dkv_kernel, 4, a.Tk, a.Hkv, a.B, stream, k, do_, lse, delta, dk, dv);
  lat::cuda::release(delta, a.device);
}

}  // namespace lat::attention_cuda
