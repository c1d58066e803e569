// Batched float32 GEMM on oneDNN's matmul primitive: the one entry point that every CPU
// matrix product in lat goes through (core matmul op, linear-attention chunk kernels).
#pragma once
#include <cstdint>

#include "lat/precision.h"

namespace lat::cpu {

/// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b in [0, batch), row-major.
/// op(A) is M x K: A[b] is stored M x K with row stride lda, or K x M when trans_a.
/// op(B) is K x N: B[b] is stored K x N with row stride ldb, or N x K when trans_b.
/// stride_* is the distance in elements between consecutive batch items; stride_b = 0
/// shares one B across the batch (A and C need a non-zero stride when batch > 1). beta is 0
/// (overwrite) or any value (accumulate).
/// precision bf16: A and B are rounded to bf16 (into thread-local copies; the inputs are not
/// changed) and multiplied with fp32 accumulation into the float C; the caller checks
/// bf16_supported first (oneDNN has no bf16 product below AVX-512).
struct GemmBatch {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  const float* A = nullptr;
  int64_t lda = 0, stride_a = 0;
  bool trans_a = false;
  const float* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  bool trans_b = false;
  float* C = nullptr;
  int64_t ldc = 0, stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
  Precision precision = Precision::fp32;
};

/// Runs the product through a cached oneDNN matmul primitive (keyed by every size,
/// stride, transpose flag, alpha and beta), so repeated shapes do not re-create
/// primitives. C has the same bits at every thread count: where oneDNN picks its
/// sgemm-based implementation (f32 below AVX-512), whose threading splits sums over K,
/// the product runs as fixed single-threaded tiles instead. K == 0 gives beta * C. Thread-safe, but must be called from outside OpenMP
/// parallel regions: the cached primitive is built for the full thread team, and run from
/// inside a parallel region (one thread) it would compute only part of the batch, so that
/// throws lat::Error. Also throws lat::Error for non-positive sizes or too-small strides.
void gemm_batched(const GemmBatch& g);

/// The bf16 product of gemm_batched for inputs already rounded to bf16 (float_to_bf16 of
/// autograd/cpu/bf16.h): A and B are bf16 arrays in the layout g describes (g.A, g.B and
/// g.precision are not read), so that an input used by several products is rounded once.
/// Same checks and errors as gemm_batched.
void gemm_batched_bf16(const GemmBatch& g, const uint16_t* A, const uint16_t* B);

/// Float64 reference product with the same conventions (plain loops, for references and
/// gradient checks).
void gemm_batched_f64(int64_t batch, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
                      int64_t stride_a, bool trans_a, const double* B, int64_t ldb, int64_t stride_b,
                      bool trans_b, double* C, int64_t ldc, int64_t stride_c, double alpha, double beta);

/// Number of primitives currently cached (for tests of the cache).
int64_t gemm_cache_size();

}  // namespace lat::cpu
