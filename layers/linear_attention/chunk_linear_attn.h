// Katharopoulos' normalizer of chunk_linear_attn and fused_recurrent_linear_attn
// (ALGORITHMS.md 2.2): with the constant-1 value column, the readout r = scale S^T q has
// V + 1 columns and its last one is the denominator scale q . z. The chunk kernel itself
// is the decayed one of chunk_simple_gla.h with g absent.
#pragma once
#include <cstdint>

namespace lat::linear_attention {

/// The normalizer's epsilon: o = r[:V] / (r[V] + kNormEps) (DESIGN.md).
inline constexpr float kNormEps = 1e-6f;

/// o[row, :V] = r[row, :V] / (r[row, V] + eps) for `rows` rows; r is [rows, V + 1].
void normalize_forward_cpu(const float* r, int64_t rows, int64_t V, float* o);

/// dr from do [rows, V]: dr[:V] = do / den, dr[V] = -(do . o) / den, den = r[V] + eps.
void normalize_backward_cpu(const float* r, const float* d_o, int64_t rows, int64_t V, float* dr);

}  // namespace lat::linear_attention
