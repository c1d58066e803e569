// CUDA kernels of the short convolution (see short_conv_cuda.h and short_conv.cpp for the
// derivation). With xe = concat(state, x) along time (T + W - 1 rows per batch item):
//   pre[t] = sum_w weight[w] xe[t + w] (+ bias),  y = silu(pre),  dbias = sum_t dpre[t],  dpre = dy silu'(pre),
//   dxe[s] = sum_w weight[w] dpre[s - w],  dweight[w] = sum_t dpre[t] xe[t + w],
// where with packed sequences (Args::start) the pairs (t, t + w) whose input lies before
// the start of t's sequence are left out of all three sums.
// Threads run over channels, the innermost axis, so every access is coalesced.
#include <algorithm>

#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/cuda_memory.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "layers/fused/short_conv_cuda.h"

namespace lat::short_conv_cuda {
namespace {

using lat::cuda::grid_for;
using lat::cuda::kBlock;

// Row s of the extended input of batch item b at channel c (0 for an absent state).
__device__ __forceinline__ float xe_at(const Args& a, int64_t b, int64_t s, int64_t c) {
  if (s >= a.W - 1) return a.x[(b * a.T + s - (a.W - 1)) * a.D + c];
  return a.state != nullptr ? a.state[(b * (a.W - 1) + s) * a.D + c] : 0.0f;
}

// True when output t reads extended row t + w: always without sequences; with them, only
// rows of t's own sequence.
__device__ __forceinline__ bool reads(const Args& a, int64_t t, int64_t w) {
  return a.start == nullptr || t + w - (a.W - 1) >= a.start[t];
}

// The input output t of batch item b reads at tap w, channel c (0 outside its sequence).
__device__ __forceinline__ float input_at(const Args& a, int64_t b, int64_t t, int64_t w, int64_t c) {
  return reads(a, t, w) ? xe_at(a, b, t + w, c) : 0.0f;
}

__device__ __forceinline__ float pre_at(const Args& a, int64_t b, int64_t t, int64_t c) {
  float acc = 0.0f;
  for (int64_t w = 0; w < a.W; ++w) acc += a.weight[c * a.W + w] * input_at(a, b, t, w, c);
  return a.bias != nullptr ? acc + a.bias[c] : acc;
}

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void forward_kernel(Args a, float* y) {
  const int64_t n = a.B * a.T * a.D;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % a.D, t = (i / a.D) % a.T, b = i / (a.D * a.T);
    const float p = pre_at(a, b, t, c);
    y[i] = p * sigmoid(p);
  }
}

// dpre = dy * silu'(pre), silu'(p) = s (1 + p (1 - s)).
__global__ void dpre_kernel(Args a, const float* dy, float* dpre) {
  const int64_t n = a.B * a.T * a.D;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % a.D, t = (i / a.D) % a.T, b = i / (a.D * a.T);
    const float p = pre_at(a, b, t, c), s = sigmoid(p);
    dpre[i] = dy[i] * s * (1.0f + p * (1.0f - s));
  }
}

// dxe[b, s, c] for every extended row s: dx (s >= W-1) and dstate (s < W-1, when wanted).
__global__ void dx_kernel(Args a, const float* dpre, float* dx, float* dstate) {
  const int64_t TE = a.T + a.W - 1, n = a.B * TE * a.D;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % a.D, s = (i / a.D) % TE, b = i / (a.D * TE);
    float* out = s >= a.W - 1 ? dx + (b * a.T + s - (a.W - 1)) * a.D + c
                              : (dstate != nullptr ? dstate + (b * (a.W - 1) + s) * a.D + c : nullptr);
    if (out == nullptr) continue;
    float acc = 0.0f;
    for (int64_t w = 0; w < a.W; ++w) {
      const int64_t t = s - w;
      if (t >= 0 && t < a.T && reads(a, t, w)) acc += a.weight[c * a.W + w] * dpre[(b * a.T + t) * a.D + c];
    }
    *out = acc;
  }
}

// partial[sp, w, c] = sum over rows bt of segment sp of dpre[bt, c] xe[bt + w, c].
__global__ void dweight_partial_kernel(Args a, const float* dpre, int64_t splits, int64_t seg, double* partial) {
  const int64_t n = splits * a.D, rows = a.B * a.T;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % a.D, sp = i / a.D;
    double acc[kMaxKernel] = {};
    const int64_t end = min(rows, (sp + 1) * seg);
    for (int64_t bt = sp * seg; bt < end; ++bt) {
      const int64_t b = bt / a.T, t = bt % a.T;
      const double d = dpre[bt * a.D + c];
      for (int64_t w = 0; w < a.W; ++w) acc[w] += d * input_at(a, b, t, w, c);
    }
    for (int64_t w = 0; w < a.W; ++w) partial[(sp * a.W + w) * a.D + c] = acc[w];
  }
}

__global__ void dweight_combine_kernel(const double* partial, int64_t splits, int64_t W, int64_t D, float* dweight) {
  const int64_t n = W * D;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % D, w = i / D;
    double acc = 0.0;
    for (int64_t sp = 0; sp < splits; ++sp) acc += partial[(sp * W + w) * D + c];
    dweight[c * W + w] = static_cast<float>(acc);
  }
}

// dbias[c] = sum over the B * T rows of dpre[., c], in double, one thread per channel.
__global__ void dbias_kernel(const float* dpre, int64_t rows, int64_t D, float* dbias) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < D; c += int64_t(gridDim.x) * blockDim.x) {
    double acc = 0.0;
    for (int64_t bt = 0; bt < rows; ++bt) acc += dpre[bt * D + c];
    dbias[c] = static_cast<float>(acc);
  }
}

void check(const Args& a) {
  LAT_CHECK(a.W >= 1 && a.W <= kMaxKernel,
            "short_conv (cuda): weight: expected a kernel size in 1.." << kMaxKernel << ", got " << a.W);
}

}  // namespace

void forward(const Args& a, float* y) {
  check(a);
  const int64_t n = a.B * a.T * a.D;
  if (n == 0) return;
  lat::cuda::DeviceGuard guard(a.device);
  forward_kernel<<<grid_for(n), kBlock, 0, lat::cuda::current_stream(a.device)>>>(a, y);
  LAT_CUDA_CHECK_LAUNCH();
}

void backward(const Args& a, const float* dy, float* dx, float* dweight, float* dstate, float* dbias) {
  check(a);
  lat::cuda::DeviceGuard guard(a.device);
  cudaStream_t stream = lat::cuda::current_stream(a.device);
  const int64_t n = a.B * a.T * a.D, rows = a.B * a.T;
  float* dpre = static_cast<float*>(lat::cuda::allocate(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float),
                                                        a.device));
  if (n > 0) {
    dpre_kernel<<<grid_for(n), kBlock, 0, stream>>>(a, dy, dpre);
    LAT_CUDA_CHECK_LAUNCH();
  }
  const int64_t ne = a.B * (a.T + a.W - 1) * a.D;
  if (ne > 0) {
    dx_kernel<<<grid_for(ne), kBlock, 0, stream>>>(a, dpre, dx, dstate);
    LAT_CUDA_CHECK_LAUNCH();
  }
  // Rows split into segments so that splits * D threads fill the GPU.
  const int64_t splits = std::clamp<int64_t>((int64_t{1} << 16) / std::max<int64_t>(a.D, 1), 1,
                                             std::max<int64_t>(rows / 8, 1));
  const int64_t seg = (rows + splits - 1) / splits;
  double* partial = static_cast<double*>(
      lat::cuda::allocate(static_cast<size_t>(splits * a.W * std::max<int64_t>(a.D, 1)) * sizeof(double), a.device));
  if (a.D > 0) {
    dweight_partial_kernel<<<grid_for(splits * a.D), kBlock, 0, stream>>>(a, dpre, splits, seg, partial);
    LAT_CUDA_CHECK_LAUNCH();
    dweight_combine_kernel<<<grid_for(a.W * a.D), kBlock, 0, stream>>>(partial, splits, a.W, a.D, dweight);
    LAT_CUDA_CHECK_LAUNCH();
    if (dbias != nullptr) {
      dbias_kernel<<<grid_for(a.D), kBlock, 0, stream>>>(dpre, rows, a.D, dbias);
      LAT_CUDA_CHECK_LAUNCH();
    }
  }
  lat::cuda::release(partial, a.device);
  lat::cuda::release(dpre, a.device);
}

}  // namespace lat::short_conv_cuda
