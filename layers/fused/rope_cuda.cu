// CUDA kernel of the rotary embedding (see rope_cuda.h): one thread per rotated pair.
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "layers/fused/rope_cuda.h"

namespace lat::rope_cuda {
namespace {

__global__ void rotate_kernel(const float* src, float* dst, int64_t T, int64_t H, int64_t D, double theta,
                              int64_t position_offset, const int64_t* start, double sign, int64_t n) {
  const int64_t half = D / 2;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half, row = idx / half;  // row = (b * T + t) * H + h
    const int64_t t = (row / H) % T;
    const double inv_freq = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    const int64_t position = position_offset + t - (start != nullptr ? start[t] : 0);
    const double angle = static_cast<double>(position) * inv_freq;
    const float c = static_cast<float>(cos(angle)), s = static_cast<float>(sign * sin(angle));
    const float* x = src + row * D;
    float* y = dst + row * D;
    const float x1 = x[i], x2 = x[i + half];
    y[i] = x1 * c - x2 * s;
    y[i + half] = x2 * c + x1 * s;
  }
}

}  // namespace

void rotate(const float* src, float* dst, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
            int64_t position_offset, const int64_t* start, double sign, int device) {
  const int64_t n = B * T * H * (D / 2);
  if (n == 0) return;
  lat::cuda::DeviceGuard guard(device);
  rotate_kernel<<<lat::cuda::grid_for(n), lat::cuda::kBlock, 0, lat::cuda::current_stream(device)>>>(
      src, dst, T, H, D, theta, position_offset, start, sign, n);
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace lat::rope_cuda
