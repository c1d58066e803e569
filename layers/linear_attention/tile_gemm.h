// A single-threaded product for the small per-chunk tiles of the chunk kernels (64 x 64 and
// the like). The kernels run one such product per chunk on every OpenMP thread at once, so
// a whole phase is one parallel loop over chunks: no thread team is started per product,
// and oneDNN, whose primitives are configured for the thread count they were created with,
// is never called from inside a parallel region.
#pragma once
#include <cstdint>

namespace lat::linear_attention {

/// A tile operand: base pointer and row stride; `trans` when it is stored transposed.
struct TileOperand {
  const float* p;
  int64_t ld;
  bool trans = false;
};

/// C = alpha op(A) op(B) + beta C, row-major. op(A) is M x K (A stored M x K, or K x M when
/// a.trans); op(B) is K x N (B stored K x N, or N x K when b.trans). With beta == 0, C is
/// only written. Register-blocked (8 rows x 32 columns of C per pass); a transposed or
/// ragged B is packed into a thread-local panel first. Single-threaded; thread-safe.
void tile_gemm(int64_t M, int64_t N, int64_t K, TileOperand a, TileOperand b, float* c, int64_t ldc, float alpha = 1.0f,
               float beta = 0.0f);

/// panel[k, j] = b[j, k] for j < N, k < K: the N x K matrix b (row stride ld) transposed into
/// K rows of row stride Np >= N (columns N..Np are not written). Moves bits only (no
/// arithmetic), so any 32-bit elements may pass through it as floats.
void pack_transposed(const float* b, int64_t ld, int64_t N, int64_t K, float* panel, int64_t Np);

}  // namespace lat::linear_attention
