// Block-wide reductions for kernels launched with kBlock threads (launch.cuh): warp
// shuffles, then one shared slot per warp. Every thread of the block must call them, and
// every thread receives the result.
#pragma once
#include "autograd/cuda/launch.cuh"

namespace lat::cuda {

__device__ inline double block_sum_all(double v) {
  __shared__ double slots[kBlock / 32];
  __shared__ double total;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    for (int w = 0; w < kBlock / 32; ++w) s += slots[w];
    total = s;
  }
  __syncthreads();
  const double result = total;
  __syncthreads();  // the slots may be reused by the next call
  return result;
}

template <class T>
__device__ inline T block_max_all(T v) {
  __shared__ T slots[kBlock / 32];
  __shared__ T best;
  for (int offset = 16; offset > 0; offset /= 2) v = max(v, __shfl_down_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T m = slots[0];
    for (int w = 1; w < kBlock / 32; ++w) m = max(m, slots[w]);
    best = m;
  }
  __syncthreads();
  const T result = best;
  __syncthreads();
  return result;
}

}  // namespace lat::cuda
