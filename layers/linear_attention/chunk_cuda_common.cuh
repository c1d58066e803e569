// Helpers shared by the chunkwise linear-attention kernels (chunk_cuda.h): device-side
// indexing, launch checks, and the host side's device buffers.
#pragma once
#include <utility>

#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/cuda_memory.h"
#include "autograd/cuda/tile.cuh"
#include "layers/linear_attention/chunk_cuda.h"

namespace lat::linear_attention::cuda {

namespace tile = lat::cuda::tile;

/// Dims with the derived counts precomputed, passed to kernels by value.
struct KernelDims {
  int64_t B, T, H, K, V, C, NT, NK, NV;
};

inline KernelDims kernel_dims(const Dims& d) { return {d.B, d.T, d.H, d.K, d.V, d.C, d.NT(), d.NK(), d.NV()}; }

__device__ __forceinline__ const float* seq_row(const Seq& s, int64_t H, int64_t bh, int64_t t) {
  return s.p + (bh / H) * s.sb + (bh % H) * s.sh + t * s.st;
}
__device__ __forceinline__ float* seq_row(const SeqOut& s, int64_t H, int64_t bh, int64_t t) {
  return s.p + (bh / H) * s.sb + (bh % H) * s.sh + t * s.st;
}

/// Valid rows of chunk c: min(C, T - c*C).
__device__ __forceinline__ int chunk_rows(const KernelDims& d, int64_t c) {
  return static_cast<int>(min(d.C, d.T - c * d.C));
}

/// Columns of the 64-wide tile starting at `start` inside a dimension of size `total`.
__device__ __forceinline__ int tile_extent(int64_t total, int64_t start) {
  const int64_t n = total - start;
  return static_cast<int>(n < tile::kT ? n : tile::kT);
}

/// Index of [B, T, H] data (g, beta, dg, dbeta) for head bh and token t.
__device__ __forceinline__ int64_t bth_index(const KernelDims& d, int64_t bh, int64_t t) {
  return ((bh / d.H) * d.T + t) * d.H + bh % d.H;
}

/// Lets `kernel` use `bytes` of dynamic shared memory (above the default 48 KiB).
template <class Kernel>
void allow_shared_memory(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    LAT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

/// Checks grid sizes against CUDA's limits (y and z at most 65535).
inline dim3 grid3(int64_t x, int64_t y, int64_t z) {
  LAT_CHECK(x > 0 && x < (int64_t{1} << 31) && y > 0 && y < 65536 && z > 0 && z < 65536,
            "linear attention (cuda): grid " << x << " x " << y << " x " << z << " exceeds CUDA's limits");
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>(z));
}

/// A float array on one device from lat's caching allocator (autograd/cuda/cuda_memory.h),
/// NaN-filled under LAT_POISON=1 as tensors are: a call's intermediates and what a forward
/// keeps for its backward. Freed in stream order (stream.h). Move-only; empty by default.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int64_t n, int device)
      : p_(static_cast<float*>(lat::cuda::allocate(static_cast<size_t>(n) * sizeof(float), device))),
        device_(device) {}
  ~DeviceBuffer() { lat::cuda::release(p_, device_); }
  DeviceBuffer(DeviceBuffer&& other) noexcept : p_(std::exchange(other.p_, nullptr)), device_(other.device_) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      lat::cuda::release(p_, device_);
      p_ = std::exchange(other.p_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  float* data() const { return p_; }

 private:
  float* p_ = nullptr;
  int device_ = 0;
};

}  // namespace lat::linear_attention::cuda

// The names the ops' host code in the .cu files uses.
namespace lat::linear_attention {
namespace cu = linear_attention::cuda;
using cuda::DeviceBuffer;
}  // namespace lat::linear_attention
