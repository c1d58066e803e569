// CUDA kernels of Katharopoulos' normalizer for chunk_linear_attn (ALGORITHMS.md 2.2): the
// constant-1 value column whose state column is z, and the division by the denominator.
// The chunkwise part is chunk_simple_gla_cuda.cu's kernels with g = 0.
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "layers/linear_attention/chunk_cuda.h"

namespace lat::linear_attention::cuda {
namespace {

__global__ void append_ones_kernel(const float* v, int64_t rows, int64_t V, float* v_ext) {
  const int64_t n = rows * (V + 1);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / (V + 1), j = i % (V + 1);
    v_ext[i] = j < V ? v[r * V + j] : 1.0f;
  }
}

__global__ void drop_column_kernel(const float* dv_ext, int64_t rows, int64_t V, float* dv) {
  const int64_t n = rows * V;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dv[i] = dv_ext[(i / V) * (V + 1) + i % V];
}

__global__ void normalize_forward_kernel(const float* r, int64_t rows, int64_t V, float eps, float* o) {
  const int64_t n = rows * V;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float* in = r + (i / V) * (V + 1);
    o[i] = in[i % V] * (1.0f / (in[V] + eps));
  }
}

// Warp per row: dr[:V] = do / den, dr[V] = -(do . o) / den.
__global__ void normalize_backward_kernel(const float* r, const float* d_o, int64_t rows, int64_t V, float eps,
                                          float* dr) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    const float* in = r + row * (V + 1);
    const float* dot = d_o + row * V;
    float* out = dr + row * (V + 1);
    const float inv = 1.0f / (in[V] + eps);
    float do_dot_o = 0.0f;
    for (int64_t j = threadIdx.x % 32; j < V; j += 32) {
      out[j] = dot[j] * inv;
      do_dot_o += dot[j] * in[j] * inv;
    }
    for (int offset = 16; offset > 0; offset /= 2) do_dot_o += __shfl_xor_sync(0xffffffffu, do_dot_o, offset);
    if (threadIdx.x % 32 == 0) out[V] = -do_dot_o * inv;
  }
}

}  // namespace

void append_ones_column(const float* v, int64_t rows, int64_t V, float* v_ext, int device) {
  if (rows == 0) return;
  lat::cuda::DeviceGuard guard(device);
  append_ones_kernel<<<lat::cuda::grid_for(rows * (V + 1)), lat::cuda::kBlock, 0, lat::cuda::current_stream(device)>>>(
      v, rows, V, v_ext);
  LAT_CUDA_CHECK_LAUNCH();
}

void drop_last_column(const float* dv_ext, int64_t rows, int64_t V, float* dv, int device) {
  if (rows == 0) return;
  lat::cuda::DeviceGuard guard(device);
  drop_column_kernel<<<lat::cuda::grid_for(rows * V), lat::cuda::kBlock, 0, lat::cuda::current_stream(device)>>>(
      dv_ext, rows, V, dv);
  LAT_CUDA_CHECK_LAUNCH();
}

void normalize_forward(const float* r, int64_t rows, int64_t V, float eps, float* o, int device) {
  if (rows == 0) return;
  lat::cuda::DeviceGuard guard(device);
  normalize_forward_kernel<<<lat::cuda::grid_for(rows * V), lat::cuda::kBlock, 0,
                             lat::cuda::current_stream(device)>>>(r, rows, V, eps, o);
  LAT_CUDA_CHECK_LAUNCH();
}

void normalize_backward(const float* r, const float* d_o, int64_t rows, int64_t V, float eps, float* dr,
                        int device) {
  if (rows == 0) return;
  lat::cuda::DeviceGuard guard(device);
  const int64_t per_block = lat::cuda::kBlock / 32;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((rows + per_block - 1) / per_block, 1 << 20));
  normalize_backward_kernel<<<blocks, lat::cuda::kBlock, 0, lat::cuda::current_stream(device)>>>(r, d_o, rows, V,
                                                                                                 eps, dr);
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace lat::linear_attention::cuda
