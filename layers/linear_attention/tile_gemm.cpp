// The register-blocked small product of tile_gemm.h: C[r, :] += sum_k A[r, k] B[k, :] with
// kRows rows x 2 vectors of C in registers, so each k step loads two vectors of a row of
// op(B) and kRows scalars of A and issues 2 kRows fused multiply-adds.
#include "layers/linear_attention/tile_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "layers/linear_attention/vec16.h"

namespace lat::linear_attention {
namespace {

constexpr int64_t kRows = 8;  // rows of C per register tile

// C[r0 + i, c0 + j) for j < cols (<= 16) = alpha x_j + beta C (C only written when beta is
// 0): whole vectors straight from the register, a ragged last one lane by lane.
inline void store_vector(Vec16 x, int64_t cols, float* row, float alpha, float beta) {
  if (cols == kLanes) {
    store16(row, beta == 0.0f ? alpha * x : alpha * x + beta * load16(row));
    return;
  }
  float t[kLanes];  // lanes by a run-time index: a copy, so that x stays in a register
  std::memcpy(t, &x, sizeof(t));
  for (int64_t j = 0; j < cols; ++j) row[j] = beta == 0.0f ? alpha * t[j] : alpha * t[j] + beta * row[j];
}

// C rows [r0, r0 + R) x columns [c0, c0 + cols), cols <= 16 NV, = alpha op(A) op(B) + beta C,
// op(B) read as K rows of bp (row stride ldb) whose columns from c0 on are 16 NV wide.
template <int R, int NV, bool TransA>
inline void register_tile(int64_t K, const TileOperand& a, int64_t r0, const float* bp, int64_t ldb, int64_t c0,
                          int64_t cols, float* c, int64_t ldc, float alpha, float beta) {
  Vec16 acc[R][NV] = {};
  for (int64_t k = 0; k < K; ++k) {
    Vec16 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = load16(bp + k * ldb + c0 + v * kLanes);
    for (int i = 0; i < R; ++i) {
      const float x = TransA ? a.p[k * a.ld + r0 + i] : a.p[(r0 + i) * a.ld + k];
      for (int v = 0; v < NV; ++v) acc[i][v] += x * b[v];
    }
  }
  // Unrolled, so that every accumulator is a named register (a loop would index them in memory).
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      if (cols > v * kLanes)
        store_vector(acc[i][v], std::min(kLanes, cols - v * kLanes), c + (r0 + i) * ldc + c0 + v * kLanes, alpha,
                     beta);
}

// Rows [r0, r0 + R) of C: two-vector column tiles, then one one-vector tile when the
// padded width Np (a multiple of 16) leaves 16 columns.
template <int R, bool TransA>
inline void row_block(int64_t K, const TileOperand& a, int64_t r0, const float* bp, int64_t ldb, int64_t N, int64_t Np,
                      float* c, int64_t ldc, float alpha, float beta) {
  int64_t c0 = 0;
  for (; c0 + 2 * kLanes <= Np; c0 += 2 * kLanes)
    register_tile<R, 2, TransA>(K, a, r0, bp, ldb, c0, std::min(2 * kLanes, N - c0), c, ldc, alpha, beta);
  if (c0 < Np) register_tile<R, 1, TransA>(K, a, r0, bp, ldb, c0, N - c0, c, ldc, alpha, beta);
}

// The four shuffle rounds of a 16 x 16 transpose in registers (AVX-512's unpcklps,
// unpckhps, unpcklpd, unpckhpd and shuf_f32x4 patterns, written portably).
inline Vec16 unpack_lo32(Vec16 a, Vec16 b) {
  return __builtin_shufflevector(a, b, 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
}
inline Vec16 unpack_hi32(Vec16 a, Vec16 b) {
  return __builtin_shufflevector(a, b, 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
}
inline Vec16 unpack_lo64(Vec16 a, Vec16 b) {
  return __builtin_shufflevector(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
}
inline Vec16 unpack_hi64(Vec16 a, Vec16 b) {
  return __builtin_shufflevector(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
}
inline Vec16 lanes_even(Vec16 a, Vec16 b) {  // 128-bit lanes a0 a2 b0 b2
  return __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
}
inline Vec16 lanes_odd(Vec16 a, Vec16 b) {  // 128-bit lanes a1 a3 b1 b3
  return __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
}

template <bool TransA>
void all_rows(int64_t M, int64_t N, int64_t Np, int64_t K, const TileOperand& a, const float* bp, int64_t ldb, float* c,
              int64_t ldc, float alpha, float beta) {
  int64_t r = 0;
  for (; r + kRows <= M; r += kRows) row_block<kRows, TransA>(K, a, r, bp, ldb, N, Np, c, ldc, alpha, beta);
  if (r + 4 <= M) row_block<4, TransA>(K, a, r, bp, ldb, N, Np, c, ldc, alpha, beta), r += 4;
  if (r + 2 <= M) row_block<2, TransA>(K, a, r, bp, ldb, N, Np, c, ldc, alpha, beta), r += 2;
  if (r < M) row_block<1, TransA>(K, a, r, bp, ldb, N, Np, c, ldc, alpha, beta);
}

}  // namespace

void pack_transposed(const float* b, int64_t ld, int64_t N, int64_t K, float* panel, int64_t Np) {
  // Whole 16 x 16 blocks in registers: the four rounds leave column c of the block in
  // register c with bits 0 and 1 of c swapped.
  const int64_t N16 = N / 16 * 16, K16 = K / 16 * 16;
  for (int64_t j0 = 0; j0 < N16; j0 += 16)
    for (int64_t k0 = 0; k0 < K16; k0 += 16) {
      Vec16 r[16], t[16];
      for (int i = 0; i < 16; ++i) r[i] = load16(b + (j0 + i) * ld + k0);
      for (int i = 0; i < 16; i += 2) {
        t[i] = unpack_lo32(r[i], r[i + 1]);
        t[i + 1] = unpack_hi32(r[i], r[i + 1]);
      }
      for (int i = 0; i < 16; i += 4)
        for (int u = 0; u < 2; ++u) {
          r[i + u] = unpack_lo64(t[i + u], t[i + u + 2]);
          r[i + u + 2] = unpack_hi64(t[i + u], t[i + u + 2]);
        }
      for (int i = 0; i < 16; i += 8)
        for (int u = 0; u < 4; ++u) {
          t[i + u] = lanes_even(r[i + u], r[i + u + 4]);
          t[i + u + 4] = lanes_odd(r[i + u], r[i + u + 4]);
        }
      for (int u = 0; u < 8; ++u) {
        r[u] = lanes_even(t[u], t[u + 8]);
        r[u + 8] = lanes_odd(t[u], t[u + 8]);
      }
      for (int i = 0; i < 16; ++i) {
        const int c = (i & ~3) | ((i & 1) << 1) | ((i >> 1) & 1);
        std::memcpy(panel + (k0 + c) * Np + j0, &r[i], sizeof(Vec16));
      }
    }
  // What the blocks left: the last K % 16 columns of the block rows, then the last rows.
  // (memcpy, like the blocks: the elements may be other 32-bit data seen as floats).
  for (int64_t j = 0; j < N16; ++j)
    for (int64_t k = K16; k < K; ++k) std::memcpy(panel + k * Np + j, b + j * ld + k, sizeof(float));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = N16; j < N; ++j) std::memcpy(panel + k * Np + j, b + j * ld + k, sizeof(float));
}

void tile_gemm(int64_t M, int64_t N, int64_t K, TileOperand a, TileOperand b, float* c, int64_t ldc, float alpha,
               float beta) {
  // op(B) as K rows of Np floats, Np a whole number of vectors: B itself when it already
  // is, else packed into a thread-local panel (transposed, zero padded).
  const int64_t Np = (N + kLanes - 1) / kLanes * kLanes;
  const float* bp = b.p;
  int64_t ldp = b.ld;
  if (b.trans || Np != N) {
    thread_local std::vector<float> panel;
    if (static_cast<int64_t>(panel.size()) < K * Np) panel.resize(K * Np);
    float* rows = panel.data();
    if (b.trans)
      pack_transposed(b.p, b.ld, N, K, rows, Np);
    else
      for (int64_t k = 0; k < K; ++k) std::memcpy(rows + k * Np, b.p + k * b.ld, N * sizeof(float));
    for (int64_t k = 0; k < K; ++k) std::fill(rows + k * Np + N, rows + (k + 1) * Np, 0.0f);
    bp = rows;
    ldp = Np;
  }
  if (a.trans)
    all_rows<true>(M, N, Np, K, a, bp, ldp, c, ldc, alpha, beta);
  else
    all_rows<false>(M, N, Np, K, a, bp, ldp, c, ldc, alpha, beta);
}

}  // namespace lat::linear_attention
