// The packed bf16 tile product of tile_gemm_bf16.h. The AVX512-BF16 code is compiled for
// that instruction set whatever the build's -march and called only after the runtime
// check (cpu::has_avx512_bf16); the portable code computes the same from the same words.
//
// Register tile: kRows rows x NV vectors of 16 columns of C in fp32 accumulators; each
// pair step loads NV vectors of packed B and broadcasts one word of A per row, 2 kRows
// vdpbf16ps for NV = 2 (each two multiply-adds per lane: twice fp32's work per instruction).
#include "layers/linear_attention/tile_gemm_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "autograd/cpu/bf16.h"

#define LAT_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace lat::linear_attention {
namespace {

constexpr int64_t kRows = 8;
constexpr int64_t kLanes = 16;

int64_t pairs(int64_t K) { return (K + 1) / 2; }
int64_t padded(int64_t N) { return (N + kLanes - 1) / kLanes * kLanes; }

uint32_t word(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16; }

// ---- AVX512-BF16 -------------------------------------------------------------------------

LAT_AVX512_BF16 inline __mmask16 first_lanes(int64_t n) {
  return n >= kLanes ? static_cast<__mmask16>(0xffff) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1u);
}

// Rows of `cols` floats (row stride ld) into rows of ceil(cols / 2) pair words (row stride
// `stride` words): the rows of a non-transposed A, or the rows of B^T.
LAT_AVX512_BF16 void pair_columns_avx512(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* w,
                                         int64_t stride) {
  const int64_t words = pairs(cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k0 = 0; k0 < cols; k0 += 2 * kLanes) {
      const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(cols - k0), src + r * ld + k0);
      const __m512 hi = _mm512_maskz_loadu_ps(first_lanes(cols - k0 - kLanes), src + r * ld + k0 + kLanes);
      const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      _mm512_mask_storeu_epi32(w + r * stride + k0 / 2, first_lanes(words - k0 / 2), v);
    }
}

// Rows 2p and 2p + 1 of `rows` rows of `cols` floats (row stride ld) into row p of pair
// words (row stride ldw, a multiple of 16; columns cols..ldw zero): a non-transposed B,
// or the columns of A^T.
LAT_AVX512_BF16 void pair_rows_avx512(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* w,
                                      int64_t ldw) {
  // vpermw index: word j = (element j of the lower row, element j of the upper row).
  alignas(64) static const uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int64_t p = 0; p < pairs(rows); ++p) {
    const float* lower = src + 2 * p * ld;
    const float* upper = 2 * p + 1 < rows ? lower + ld : nullptr;
    for (int64_t j0 = 0; j0 < ldw; j0 += kLanes) {
      const __mmask16 m = first_lanes(cols - j0);
      const __m512 lo = _mm512_maskz_loadu_ps(m, lower + j0);
      const __m512 hi = upper ? _mm512_maskz_loadu_ps(m, upper + j0) : _mm512_setzero_ps();
      const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      _mm512_storeu_si512(w + p * ldw + j0, _mm512_permutexvar_epi16(interleave, v));
    }
  }
}

// Rows [r0, r0 + R) x columns [c0, c0 + 16 NV) of C (cols of them inside C) over P pairs.
template <int R, int NV>
LAT_AVX512_BF16 inline void register_tile_avx512(int64_t P, const PackedA& a, int64_t r0, const PackedB& b, int64_t c0,
                                                 int64_t cols, float* c, int64_t ldc, float alpha, float beta) {
  __m512 acc[R][NV];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  const uint32_t* arow = a.w + r0 * a.row;
  for (int64_t p = 0; p < P; ++p) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v)
      bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b.w + p * b.ld + c0 + v * kLanes));
    for (int i = 0; i < R; ++i) {
      const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(arow[i * a.row + p * a.pair])));
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], bv[v], x);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  // Unrolled, so that every accumulator is a named register (a loop would index them in memory).
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = first_lanes(cols - v * kLanes);
      float* out = c + (r0 + i) * ldc + c0 + v * kLanes;
      __m512 r = _mm512_mul_ps(va, acc[i][v]);
      if (beta != 0.0f) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, out), r);
      _mm512_mask_storeu_ps(out, m, r);
    }
}

template <int R>
LAT_AVX512_BF16 inline void row_block_avx512(int64_t P, const PackedA& a, int64_t r0, const PackedB& b, int64_t N,
                                             float* c, int64_t ldc, float alpha, float beta) {
  int64_t c0 = 0;
  for (; c0 + 2 * kLanes <= padded(N); c0 += 2 * kLanes)
    register_tile_avx512<R, 2>(P, a, r0, b, c0, N - c0, c, ldc, alpha, beta);
  if (c0 < N) register_tile_avx512<R, 1>(P, a, r0, b, c0, N - c0, c, ldc, alpha, beta);
}

LAT_AVX512_BF16 void gemm_avx512(int64_t M, int64_t N, int64_t K, const PackedA& a, const PackedB& b, float* c,
                                 int64_t ldc, float alpha, float beta) {
  const int64_t P = pairs(K);
  int64_t r = 0;
  for (; r + kRows <= M; r += kRows) row_block_avx512<kRows>(P, a, r, b, N, c, ldc, alpha, beta);
  if (r + 4 <= M) row_block_avx512<4>(P, a, r, b, N, c, ldc, alpha, beta), r += 4;
  if (r + 2 <= M) row_block_avx512<2>(P, a, r, b, N, c, ldc, alpha, beta), r += 2;
  if (r < M) row_block_avx512<1>(P, a, r, b, N, c, ldc, alpha, beta);
}

// ---- portable ----------------------------------------------------------------------------

uint16_t bf16_at(const float* src, int64_t ld, int64_t r, int64_t k, int64_t rows, int64_t cols) {
  return r < rows && k < cols ? cpu::float_to_bf16(src[r * ld + k]) : 0;
}

void pair_columns_portable(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* w, int64_t stride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < pairs(cols); ++p)
      w[r * stride + p] = word(bf16_at(src, ld, r, 2 * p, rows, cols), bf16_at(src, ld, r, 2 * p + 1, rows, cols));
}

void pair_rows_portable(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* w, int64_t ldw) {
  for (int64_t p = 0; p < pairs(rows); ++p)
    for (int64_t j = 0; j < ldw; ++j)
      w[p * ldw + j] = word(bf16_at(src, ld, 2 * p, j, rows, cols), bf16_at(src, ld, 2 * p + 1, j, rows, cols));
}

void gemm_portable(int64_t M, int64_t N, int64_t K, const PackedA& a, const PackedB& b, float* c, int64_t ldc,
                   float alpha, float beta) {
  for (int64_t r = 0; r < M; ++r)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < pairs(K); ++p) {
        const uint32_t x = a.w[r * a.row + p * a.pair], y = b.w[p * b.ld + j];
        acc += cpu::bf16_to_float(static_cast<uint16_t>(x)) * cpu::bf16_to_float(static_cast<uint16_t>(y));
        acc += cpu::bf16_to_float(static_cast<uint16_t>(x >> 16)) * cpu::bf16_to_float(static_cast<uint16_t>(y >> 16));
      }
      float& out = c[r * ldc + j];
      out = beta == 0.0f ? alpha * acc : alpha * acc + beta * out;
    }
}

// ---- dispatch ----------------------------------------------------------------------------

// cpu::has_avx512_bf16(), read once into a local static: the small tiles of the chunk
// kernels make hundreds of packings and products per chunk, each of which dispatches.
bool avx512_bf16() {
  static const bool has = cpu::has_avx512_bf16();
  return has;
}

void pair_columns(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* w, int64_t stride) {
  if (avx512_bf16())
    pair_columns_avx512(src, ld, rows, cols, w, stride);
  else
    pair_columns_portable(src, ld, rows, cols, w, stride);
}

void pair_rows(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* w, int64_t ldw) {
  if (avx512_bf16())
    pair_rows_avx512(src, ld, rows, cols, w, ldw);
  else
    pair_rows_portable(src, ld, rows, cols, w, ldw);
}

}  // namespace

int64_t packed_a_words(int64_t M, int64_t K) { return padded(M) * pairs(K); }

int64_t packed_b_words(int64_t K, int64_t N) { return pairs(K) * padded(N); }

PackedA pack_a_bf16(int64_t M, int64_t K, TileOperand a, uint32_t* w) {
  if (!a.trans) {
    pair_columns(a.p, a.ld, M, K, w, pairs(K));
    return {w, pairs(K), 1};
  }
  // Stored K x M: pairs of its rows, pair p of row r at w[p * padded(M) + r].
  pair_rows(a.p, a.ld, K, M, w, padded(M));
  return {w, 1, padded(M)};
}

PackedB pack_b_bf16(int64_t K, int64_t N, TileOperand b, uint32_t* w) {
  const int64_t P = pairs(K), ldw = padded(N);
  if (!b.trans) {
    pair_rows(b.p, b.ld, K, N, w, ldw);
    return {w, ldw};
  }
  // Stored N x K, i.e. op(B) = X^T for the N x K matrix X: each row's pairs are adjacent;
  // pair them as X's packing as op(A), then transpose the N x P words.
  thread_local std::vector<uint32_t> rows;
  if (static_cast<int64_t>(rows.size()) < N * P) rows.resize(N * P);
  return pack_b_from_a(N, K, pack_a_bf16(N, K, {b.p, b.ld}, rows.data()), w);
}

PackedB pack_b_from_a(int64_t M, int64_t K, PackedA a, uint32_t* w) {
  assert(a.pair == 1 && "pack_b_from_a: a must pack an untransposed op(A)");
  const int64_t P = pairs(K), ldw = padded(M);
  pack_transposed(reinterpret_cast<const float*>(a.w), a.row, M, P, reinterpret_cast<float*>(w), ldw);
  for (int64_t p = 0; p < P; ++p) std::fill(w + p * ldw + M, w + (p + 1) * ldw, 0u);
  return {w, ldw};
}

void tile_gemm_bf16(int64_t M, int64_t N, int64_t K, PackedA a, PackedB b, float* c, int64_t ldc, float alpha,
                    float beta) {
  if (avx512_bf16())
    gemm_avx512(M, N, K, a, b, c, ldc, alpha, beta);
  else
    gemm_portable(M, N, K, a, b, c, ldc, alpha, beta);
}

namespace {

// Thread-local words for packing operands used once: slot 0 for A, 1 for B.
uint32_t* packing_words(int slot, int64_t words) {
  thread_local std::vector<uint32_t> buffers[2];
  std::vector<uint32_t>& w = buffers[slot];
  if (static_cast<int64_t>(w.size()) < words) w.resize(words);
  return w.data();
}

}  // namespace

void tile_gemm_bf16(int64_t M, int64_t N, int64_t K, TileOperand a, TileOperand b, float* c, int64_t ldc, float alpha,
                    float beta) {
  tile_gemm_bf16(M, N, K, pack_a_bf16(M, K, a, packing_words(0, packed_a_words(M, K))),
                 pack_b_bf16(K, N, b, packing_words(1, packed_b_words(K, N))), c, ldc, alpha, beta);
}

void tile_gemm_bf16(int64_t M, int64_t N, int64_t K, PackedA a, TileOperand b, float* c, int64_t ldc, float alpha,
                    float beta) {
  tile_gemm_bf16(M, N, K, a, pack_b_bf16(K, N, b, packing_words(1, packed_b_words(K, N))), c, ldc, alpha, beta);
}

void tile_gemm_bf16(int64_t M, int64_t N, int64_t K, TileOperand a, PackedB b, float* c, int64_t ldc, float alpha,
                    float beta) {
  tile_gemm_bf16(M, N, K, pack_a_bf16(M, K, a, packing_words(0, packed_a_words(M, K))), b, c, ldc, alpha, beta);
}

}  // namespace lat::linear_attention
