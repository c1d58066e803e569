// Row-wise L2 normalization and its backward (see qk_l2norm.h).
#include "layers/linear_attention/qk_l2norm.h"

#include <cmath>

#include "layers/linear_attention/vec16.h"

namespace lat::linear_attention {

void l2norm_rows_forward(float* x, int64_t rows, int64_t D, float* rstd) {
#pragma omp parallel for if (rows * D > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * D;
    const float sum = dot(row, row, D);
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
    const float dy_y = dot(dr, yr, D);
    for (int64_t i = 0; i < D; ++i) dr[i] = rstd[r] * (dr[i] - dy_y * yr[i]);
  }
}

}  // namespace lat::linear_attention
