// The register-blocked small product of tile_gemm.h: C[r, :] += sum_k A[r, k] B[k, :] with
// kRows rows x 2 vectors of C in registers, so each k step loads two vectors of the packed
// B row and kRows scalars of A and issues 2 kRows fused multiply-adds.
#include "layers/linear_attention/tile_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace lat::linear_attention {
namespace {

// 16 floats: one AVX-512 register with -march=native (GCC vector extension; split into
// narrower registers elsewhere).
typedef float Vec16 __attribute__((vector_size(64)));

constexpr int64_t kRows = 8;   // rows of C per register tile
constexpr int64_t kCols = 32;  // columns of C per register tile (two vectors)

inline Vec16 load(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof(Vec16));
  return v;
}

// Rows [r0, r0 + R) x columns [c0, c0 + 32) of op(A) Bp, Bp the K x Np rows of op(B) (row
// stride Np), into out (R x 32, row-major).
template <int R, bool TransA>
inline void register_tile(int64_t K, const TileOperand& a, int64_t r0, const float* bp, int64_t Np, int64_t c0,
                          float* out) {
  Vec16 acc[R][2] = {};
  for (int64_t k = 0; k < K; ++k) {
    const Vec16 b0 = load(bp + k * Np + c0), b1 = load(bp + k * Np + c0 + 16);
    for (int i = 0; i < R; ++i) {
      const float x = TransA ? a.p[k * a.ld + r0 + i] : a.p[(r0 + i) * a.ld + k];
      acc[i][0] += x * b0;
      acc[i][1] += x * b1;
    }
  }
  std::memcpy(out, acc, sizeof(acc));
}

// C rows [r0, r0 + R), columns [c0, c0 + cols) = alpha tile + beta C.
template <int R>
inline void store_tile(const float* tile, int64_t r0, int64_t c0, int64_t cols, float* c, int64_t ldc, float alpha,
                       float beta) {
  for (int i = 0; i < R; ++i) {
    float* row = c + (r0 + i) * ldc + c0;
    const float* t = tile + i * kCols;
    if (beta == 0.0f)
      for (int64_t j = 0; j < cols; ++j) row[j] = alpha * t[j];
    else
      for (int64_t j = 0; j < cols; ++j) row[j] = alpha * t[j] + beta * row[j];
  }
}

template <int R, bool TransA>
inline void row_block(int64_t K, const TileOperand& a, int64_t r0, const float* bp, int64_t Np, int64_t N, float* c,
                      int64_t ldc, float alpha, float beta) {
  alignas(64) float tile[R * kCols];
  for (int64_t c0 = 0; c0 < N; c0 += kCols) {
    register_tile<R, TransA>(K, a, r0, bp, Np, c0, tile);
    store_tile<R>(tile, r0, c0, std::min(kCols, N - c0), c, ldc, alpha, beta);
  }
}

template <bool TransA>
void all_rows(int64_t M, int64_t N, int64_t K, const TileOperand& a, const float* bp, int64_t Np, float* c, int64_t ldc,
              float alpha, float beta) {
  int64_t r = 0;
  for (; r + kRows <= M; r += kRows) row_block<kRows, TransA>(K, a, r, bp, Np, N, c, ldc, alpha, beta);
  if (r + 4 <= M) row_block<4, TransA>(K, a, r, bp, Np, N, c, ldc, alpha, beta), r += 4;
  if (r + 2 <= M) row_block<2, TransA>(K, a, r, bp, Np, N, c, ldc, alpha, beta), r += 2;
  if (r < M) row_block<1, TransA>(K, a, r, bp, Np, N, c, ldc, alpha, beta);
}

}  // namespace

void tile_gemm(int64_t M, int64_t N, int64_t K, TileOperand a, TileOperand b, float* c, int64_t ldc, float alpha,
               float beta) {
  // op(B) as row-major K x Np rows, Np a whole number of register tiles: B itself when it
  // already is, else packed into a thread-local panel (transposed, zero padded).
  const int64_t Np = (N + kCols - 1) / kCols * kCols;
  const float* bp = b.p;
  int64_t ldp = b.ld;
  if (b.trans || Np != N) {
    thread_local std::vector<float> panel;
    if (static_cast<int64_t>(panel.size()) < K * Np) panel.resize(K * Np);
    float* rows = panel.data();
    if (b.trans) {
      // Transposed in 16 x 16 blocks, so reads and writes both stay within a few lines.
      for (int64_t j0 = 0; j0 < N; j0 += 16)
        for (int64_t k0 = 0; k0 < K; k0 += 16)
          for (int64_t j = j0; j < std::min(N, j0 + 16); ++j)
            for (int64_t k = k0; k < std::min(K, k0 + 16); ++k) rows[k * Np + j] = b.p[j * b.ld + k];
    } else {
      for (int64_t k = 0; k < K; ++k) std::memcpy(rows + k * Np, b.p + k * b.ld, N * sizeof(float));
    }
    for (int64_t k = 0; k < K; ++k) std::fill(rows + k * Np + N, rows + (k + 1) * Np, 0.0f);
    bp = rows;
    ldp = Np;
  }
  if (a.trans)
    all_rows<true>(M, N, K, a, bp, ldp, c, ldc, alpha, beta);
  else
    all_rows<false>(M, N, K, a, bp, ldp, c, ldc, alpha, beta);
}

}  // namespace lat::linear_attention
