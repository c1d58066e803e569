// AdamW update kernel (see adamw_cuda.h); the same expression, in the same order and
// type, as adamw_update_cpu in optim/adamw.cpp.
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "optim/adamw_cuda.h"

namespace lat::optim_cuda {
namespace {

template <class T>
struct Scalars {
  T decay_factor, beta1, beta2, step_size, inv_bc2_sqrt, eps;
};

template <class T>
__global__ void adamw_kernel(T* p, const T* g, T* m, T* v, int64_t n, Scalars<T> s) {
  const T one_minus_beta1 = T(1) - s.beta1, one_minus_beta2 = T(1) - s.beta2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const T gi = g[i];
    const T mi = s.beta1 * m[i] + one_minus_beta1 * gi;
    const T vi = s.beta2 * v[i] + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const T denom = sqrt(vi) * s.inv_bc2_sqrt + s.eps;
    p[i] = p[i] * s.decay_factor - s.step_size * mi / denom;
  }
}

template <class T>
void launch(void* p, const void* g, void* m, void* v, int64_t n, const AdamWStep& s, cudaStream_t stream) {
  const Scalars<T> c{static_cast<T>(s.decay_factor), static_cast<T>(s.beta1),     static_cast<T>(s.beta2),
                     static_cast<T>(s.step_size),    static_cast<T>(s.inv_bc2_sqrt), static_cast<T>(s.eps)};
  adamw_kernel<T><<<lat::cuda::grid_for(n), lat::cuda::kBlock, 0, stream>>>(
      static_cast<T*>(p), static_cast<const T*>(g), static_cast<T*>(m), static_cast<T*>(v), n, c);
}

}  // namespace

void adamw_update(DType dtype, void* p, const void* g, void* m, void* v, int64_t n, const AdamWStep& s, int device) {
  if (n == 0) return;
  lat::cuda::DeviceGuard guard(device);
  cudaStream_t stream = lat::cuda::current_stream(device);
  if (dtype == DType::f32) {
    launch<float>(p, g, m, v, n, s, stream);
  } else {
    LAT_CHECK(dtype == DType::f64, "AdamW (cuda): dtype: expected f32 or f64, got " << dtype_name(dtype));
    launch<double>(p, g, m, v, n, s, stream);
  }
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace lat::optim_cuda
