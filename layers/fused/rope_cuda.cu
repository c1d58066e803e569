// CUDA kernel of the rotary embedding (see rope_cuda.h): one thread per rotated pair and one
// per passed-through dimension of a partial rotary head.
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "layers/fused/rope_cuda.h"

namespace lat::rope_cuda {
namespace {

// Work items per head row: R/2 rotated pairs, then the D - R dimensions copied through.
__global__ void rotate_kernel(const float* src, float* dst, int64_t T, int64_t H, int64_t D, int64_t R, double theta,
                              int64_t position_offset, const int64_t* start, double sign, int64_t n) {
  const int64_t half = R / 2, per_row = half + (D - R);
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = idx % per_row, row = idx / per_row;  // row = (b * T + t) * H + h
    const float* x = src + row * D;
    float* y = dst + row * D;
    if (j >= half) {
      const int64_t d = R + (j - half);
      y[d] = x[d];
      continue;
    }
    const int64_t t = (row / H) % T;
    const double inv_freq = pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(R));
    const int64_t position = position_offset + t - (start != nullptr ? start[t] : 0);
    const double angle = static_cast<double>(position) * inv_freq;
    const float c = static_cast<float>(cos(angle)), s = static_cast<float>(sign * sin(angle));
    const float x1 = x[j], x2 = x[j + half];
    y[j] = x1 * c - x2 * s;
    y[j + half] = x2 * c + x1 * s;
  }
}

}  // namespace

void rotate(const float* src, float* dst, int64_t B, int64_t T, int64_t H, int64_t D, int64_t R, double theta,
            int64_t position_offset, const int64_t* start, double sign, int device) {
  const int64_t n = B * T * H * (R / 2 + (D - R));
  if (n == 0) return;
  lat::cuda::DeviceGuard guard(device);
  rotate_kernel<<<lat::cuda::grid_for(n), lat::cuda::kBlock, 0, lat::cuda::current_stream(device)>>>(
      src, dst, T, H, D, R, theta, position_offset, start, sign, n);
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace lat::rope_cuda
