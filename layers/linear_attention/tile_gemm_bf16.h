// The bf16 form of tile_gemm (tile_gemm.h) for the chunk kernels under bf16 compute
// precision (lat/precision.h): the operands rounded to bf16 (round to nearest even) and
// multiplied with fp32 accumulation by AVX512-BF16's vdpbf16ps, which adds the products
// of PAIRS of bf16 values along K into an fp32 lane. The operands are packed once into
// 32-bit words that each hold such a pair, so a tile used by several products is rounded
// and packed once:
//   A (M x K): word (r, p) = (A_{r,2p}, A_{r,2p+1}), one word broadcast per row and pair;
//   B (K x N): word (p, j) = (B_{2p,j}, B_{2p+1,j}), 16 consecutive columns per vector.
// In each word the element of the lower k sits in the low 16 bits; an odd K's last pair
// has a zero high half. On a CPU without AVX512-BF16 (cpu::has_avx512_bf16() false) the
// same packing and products run in portable code: the same bf16 inputs, fp32 sums.
#pragma once
#include <cstdint>

#include "lat/precision.h"
#include "layers/linear_attention/tile_gemm.h"

namespace lat::linear_attention {

/// op(A) of a product, packed: word (r, p) at w[r * row + p * pair].
struct PackedA {
  const uint32_t* w;
  int64_t row, pair;
};

/// op(B) of a product, packed: word (p, j) at w[p * ld + j]; ld is a multiple of 16 and the
/// columns from N to ld hold zeros.
struct PackedB {
  const uint32_t* w;
  int64_t ld;
};

/// Words a packed M x K op(A) takes: ceil(K / 2) * (M rounded up to 16).
int64_t packed_a_words(int64_t M, int64_t K);

/// Words a packed K x N op(B) takes: ceil(K / 2) * (N rounded up to 16).
int64_t packed_b_words(int64_t K, int64_t N);

/// op(A) (M x K, stored as `a` says) rounded to bf16 and packed into w
/// (packed_a_words(M, K) words). Single-threaded.
PackedA pack_a_bf16(int64_t M, int64_t K, TileOperand a, uint32_t* w);

/// op(B) (K x N, stored as `b` says) rounded to bf16 and packed into w
/// (packed_b_words(K, N) words). Single-threaded.
PackedB pack_b_bf16(int64_t K, int64_t N, TileOperand b, uint32_t* w);

/// A^T (K x M) as op(B), packed into w (packed_b_words(K, M) words) from the packing `a` of
/// an M x K op(A) that was stored untransposed (pack_a_bf16 with a.trans false): the same
/// words, transposed, with no second rounding pass over the floats. Single-threaded.
PackedB pack_b_from_a(int64_t M, int64_t K, PackedA a, uint32_t* w);

/// C = alpha op(A) op(B) + beta C (row-major C, row stride ldc) from packed bf16 operands,
/// products accumulated in fp32. With beta == 0, C is only written; columns past N are not
/// touched. Single-threaded; thread-safe.
void tile_gemm_bf16(int64_t M, int64_t N, int64_t K, PackedA a, PackedB b, float* c, int64_t ldc, float alpha = 1.0f,
                    float beta = 0.0f);

/// The same from float operands (tile_gemm's conventions), packed into thread-local buffers
/// first: for operands used once.
void tile_gemm_bf16(int64_t M, int64_t N, int64_t K, TileOperand a, TileOperand b, float* c, int64_t ldc,
                    float alpha = 1.0f, float beta = 0.0f);

/// The same with one operand packed already (one shared by several products) and the
/// other packed into a thread-local buffer first.
void tile_gemm_bf16(int64_t M, int64_t N, int64_t K, PackedA a, TileOperand b, float* c, int64_t ldc,
                    float alpha = 1.0f, float beta = 0.0f);
void tile_gemm_bf16(int64_t M, int64_t N, int64_t K, TileOperand a, PackedB b, float* c, int64_t ldc,
                    float alpha = 1.0f, float beta = 0.0f);

/// A chunk kernel's product in its precision: tile_gemm for fp32 (the fp32 kernels'
/// results are those of tile_gemm, bit for bit), tile_gemm_bf16 for bf16.
inline void tile_product(Precision precision, int64_t M, int64_t N, int64_t K, TileOperand a, TileOperand b, float* c,
                         int64_t ldc, float alpha = 1.0f, float beta = 0.0f) {
  if (precision == Precision::bf16)
    tile_gemm_bf16(M, N, K, a, b, c, ldc, alpha, beta);
  else
    tile_gemm(M, N, K, a, b, c, ldc, alpha, beta);
}

}  // namespace lat::linear_attention
