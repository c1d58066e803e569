// L2 normalization of q and k inside the delta-rule ops (use_qk_l2norm_in_kernel, as in
// flash-linear-attention; ALGORITHMS.md 2.4): y = x / sqrt(sum x^2 + eps), eps = 1e-6,
// computed in f32 over rows of length D, with its backward dx = rstd (dy - (dy . y) y).
#pragma once
#include <cstdint>

namespace lat::linear_attention {

/// The epsilon under the square root (fla's l2norm).
inline constexpr float kQkL2NormEps = 1e-6f;

/// x [rows, D] -> y = x * rstd in place; rstd [rows] = 1 / sqrt(sum x^2 + eps) is written
/// for the backward. OpenMP over rows.
void l2norm_rows_forward(float* x, int64_t rows, int64_t D, float* rstd);

/// In place on dy [rows, D]: dy <- rstd (dy - (dy . y) y), given the normalized y [rows, D]
/// and rstd [rows] of the forward. OpenMP over rows.
void l2norm_rows_backward(const float* y, const float* rstd, int64_t rows, int64_t D, float* dy);

}  // namespace lat::linear_attention
