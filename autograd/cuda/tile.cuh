// 64 x 64 float tiles in shared memory and 4 x 4 register fragments: the building block of
// the chunkwise linear-attention and the tiled attention kernels.
//
// A block of kThreads = 256 threads is a 16 x 16 grid (ty = tid / 16, tx = tid % 16). Each
// thread owns the 4 x 4 elements (ty + 16a, tx + 16b), a, b in 0..3, of a 64 x 64 result
// (its fragment). Tiles in shared memory have row stride kLd = 65: with that padding both
// row-wise and column-wise reads of a tile by a warp hit distinct banks, so one product
// routine serves A B, A^T B, A B^T and A^T B^T through its strides.
//
// All products accumulate in f32 with fused multiply-adds; callers zero-fill the rows and
// columns of a tile that lie outside the data, so products never need bounds checks.
#pragma once
#include <cstdint>

namespace lat::cuda::tile {

constexpr int kT = 64;
constexpr int kLd = kT + 1;
constexpr int kThreads = 256;
constexpr int kTileFloats = kT * kLd;
constexpr size_t kTileBytes = sizeof(float) * kTileFloats;

struct Frag {
  float v[4][4];
};

__device__ __forceinline__ int frag_row(int a) { return static_cast<int>(threadIdx.x >> 4) + 16 * a; }
__device__ __forceinline__ int frag_col(int b) { return static_cast<int>(threadIdx.x & 15) + 16 * b; }

__device__ __forceinline__ void zero(Frag& f) {
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) f.v[a][b] = 0.0f;
}

/// f(i, j) += sum_{kk < n} A(i, kk) B(kk, j) with A(i, kk) = a[i * a_rs + kk * a_cs] and
/// B(kk, j) = b[kk * b_rs + j * b_cs] (shared memory, tiles with kLd padding).
__device__ __forceinline__ void mma(Frag& f, const float* a, int a_rs, int a_cs, const float* b, int b_rs, int b_cs,
                                   int n = kT) {
  const int ty = static_cast<int>(threadIdx.x >> 4), tx = static_cast<int>(threadIdx.x & 15);
  const float* pa = a + ty * a_rs;
  const float* pb = b + tx * b_cs;
#pragma unroll 4
  for (int kk = 0; kk < n; ++kk) {
    float av[4], bv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) av[i] = pa[16 * i * a_rs + kk * a_cs];
#pragma unroll
    for (int j = 0; j < 4; ++j) bv[j] = pb[kk * b_rs + 16 * j * b_cs];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) f.v[i][j] = fmaf(av[i], bv[j], f.v[i][j]);
  }
}

/// dst[r * kLd + c] = src[r * row_stride + c] * (row_factor ? row_factor[r] : 1) for
/// r < rows, c < cols; 0 elsewhere in the 64 x 64 tile. src is global memory.
__device__ __forceinline__ void load(float* dst, const float* src, int64_t row_stride, int rows, int cols,
                                     const float* row_factor = nullptr) {
  for (int e = threadIdx.x; e < kT * kT; e += kThreads) {
    const int r = e / kT, c = e % kT;
    float x = 0.0f;
    if (r < rows && c < cols) {
      x = src[r * row_stride + c];
      if (row_factor != nullptr) x *= row_factor[r];
    }
    dst[r * kLd + c] = x;
  }
}

/// dst[i * row_stride + j] = f(i, j) * factor for i < rows, j < cols (global memory).
__device__ __forceinline__ void store(const Frag& f, float* dst, int64_t row_stride, int rows, int cols,
                                      float factor = 1.0f) {
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int i = frag_row(a);
    if (i >= rows) continue;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int j = frag_col(b);
      if (j < cols) dst[i * row_stride + j] = f.v[a][b] * factor;
    }
  }
}

/// s[i * kLd + j] = f(i, j): a fragment into a shared tile.
__device__ __forceinline__ void store_shared(const Frag& f, float* s) {
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) s[frag_row(a) * kLd + frag_col(b)] = f.v[a][b];
}

/// Sum of v over the 16 threads that share a fragment row (same ty), returned to all 16.
__device__ __forceinline__ float row_sum16(float v) {
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace lat::cuda::tile
