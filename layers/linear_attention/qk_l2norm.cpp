// Row-wise L2 normalization and its backward (see qk_l2norm.h).
#include "layers/linear_attention/qk_l2norm.h"

#include <cmath>

namespace lat::linear_attention {

void l2norm_rows_forward(float* x, int64_t rows, int64_t D, float* rstd) {
#pragma omp parallel for if (rows * D > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * D;
    float sum = 0.0f;
    for (int64_t i = 0; i < D; ++i) sum += row[i] * row[i];
    const float s = 1.0f / std::sqrt(sum + kQkL2NormEps);
    for (int64_t i = 0; i < D; ++i) row[i] *= s;
    rstd[r] = s;
  }
}

void l2norm_rows_backward(const float* y, const float* rstd, int64_t rows, int64_t D, float* dy) {
#pragma omp parallel for if (rows * D > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * D;
    float* dr = dy + r * D;
    float dot = 0.0f;
    for (int64_t i = 0; i < D; ++i) dot += dr[i] * yr[i];
    for (int64_t i = 0; i < D; ++i) dr[i] = rstd[r] * (dr[i] - dot * yr[i]);
  }
}

}  // namespace lat::linear_attention
