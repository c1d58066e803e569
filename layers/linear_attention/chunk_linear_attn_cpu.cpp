// CPU kernels of Katharopoulos' normalizer of the linear attention (decay_kernels.h): the
// division by the readout's constant-1 column and its backward. The chunkwise part is
// chunk_simple_gla_cpu.cpp's kernel without a gate.
#include "layers/linear_attention/decay_kernels.h"

namespace lat::linear_attention {

void normalize_forward_cpu(const float* r, int64_t rows, int64_t V, float* o) {
#pragma omp parallel for if (rows * V > (1 << 14))
  for (int64_t i = 0; i < rows; ++i) {
    const float* in = r + i * (V + 1);
    float inv = 1.0f / (in[V] + kNormEps);
    for (int64_t j = 0; j < V; ++j) o[i * V + j] = in[j] * inv;
  }
}

void normalize_backward_cpu(const float* r, const float* d_o, int64_t rows, int64_t V, float* dr) {
#pragma omp parallel for if (rows * V > (1 << 14))
  for (int64_t i = 0; i < rows; ++i) {
    const float* in = r + i * (V + 1);
    const float* dot = d_o + i * V;
    float* out = dr + i * (V + 1);
    float inv = 1.0f / (in[V] + kNormEps);
    float do_dot_o = 0.0f;
    for (int64_t j = 0; j < V; ++j) {
      out[j] = dot[j] * inv;
      do_dot_o += dot[j] * in[j] * inv;
    }
    out[V] = -do_dot_o * inv;
  }
}

}  // namespace lat::linear_attention
