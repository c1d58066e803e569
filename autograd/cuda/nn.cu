// CUDA kernels of RMSNorm, softmax, log-softmax, cross-entropy and the embedding (see nn.h).
// The row kernels run one block of kBlock threads per row, striding over the row's
// elements (rows are the last axis: hidden sizes and vocabularies, 10^2 to 10^5 long).
#include "autograd/cuda/block_reduce.cuh"
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/cuda_memory.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/nn.h"
#include "autograd/cuda/stream.h"

namespace lat::cuda {
namespace {

template <class T>
__global__ void rms_norm_forward_kernel(const T* x, const T* weight, int64_t dim, double eps, T* y, double* rstd) {
  const T* xr = x + blockIdx.x * dim;
  T* yr = y + blockIdx.x * dim;
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) ss += static_cast<double>(xr[j]) * xr[j];
  ss = block_sum_all(ss);
  const double inv = 1.0 / sqrt(ss / static_cast<double>(dim) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = inv;
  const T rs = static_cast<T>(inv);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) yr[j] = xr[j] * rs * weight[j];
}

template <class T>
__global__ void rms_norm_dx_kernel(const T* x, const T* weight, const double* rstd, const T* g, int64_t dim, T* dx) {
  const T* xr = x + blockIdx.x * dim;
  const T* gr = g + blockIdx.x * dim;
  T* dxr = dx + blockIdx.x * dim;
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dot += static_cast<double>(gr[j]) * weight[j] * xr[j];
  dot = block_sum_all(dot);
  const double rs = rstd[blockIdx.x];
  const T a = static_cast<T>(rs), b = static_cast<T>(rs * rs * rs * dot / static_cast<double>(dim));
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dxr[j] = a * gr[j] * weight[j] - b * xr[j];
}

// partial[s, j] = sum over rows r of segment s of g[r, j] * x[r, j] * rstd[r].
template <class T>
__global__ void rms_norm_dweight_partial_kernel(const T* x, const double* rstd, const T* g, int64_t rows,
                                                int64_t dim, int64_t splits, int64_t seg, double* partial) {
  const int64_t total = splits * dim;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = t % dim, s = t / dim;
    const int64_t end = min(rows, (s + 1) * seg);
    double acc = 0.0;
    for (int64_t r = s * seg; r < end; ++r) acc += static_cast<double>(g[r * dim + j]) * x[r * dim + j] * rstd[r];
    partial[t] = acc;
  }
}

template <class T>
__global__ void rms_norm_dweight_combine_kernel(const double* partial, int64_t dim, int64_t splits, T* dweight) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < dim; j += int64_t(gridDim.x) * blockDim.x) {
    double acc = 0.0;
    for (int64_t s = 0; s < splits; ++s) acc += partial[s * dim + j];
    dweight[j] = static_cast<T>(acc);
  }
}

template <class T>
__device__ T row_max(const T* xr, int64_t dim) {
  T m = xr[0];
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) m = max(m, xr[j]);
  return block_max_all(m);
}

template <class T>
__global__ void softmax_forward_kernel(const T* x, int64_t dim, T* y) {
  const T* xr = x + blockIdx.x * dim;
  T* yr = y + blockIdx.x * dim;
  const T m = row_max(xr, dim);
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) s += static_cast<double>(exp(xr[j] - m));
  s = block_sum_all(s);
  const T inv = static_cast<T>(1.0 / s);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) yr[j] = exp(xr[j] - m) * inv;
}

template <class T>
__global__ void softmax_backward_kernel(const T* y, const T* g, int64_t dim, T* dx) {
  const int64_t off = blockIdx.x * dim;
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dot += static_cast<double>(g[off + j]) * y[off + j];
  const T d = static_cast<T>(block_sum_all(dot));
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dx[off + j] = y[off + j] * (g[off + j] - d);
}

// log(sum(exp(x - m))) + m of the block's row, in double.
template <class T>
__device__ double row_log_sum_exp(const T* xr, int64_t dim) {
  const T m = row_max(xr, dim);
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) s += static_cast<double>(exp(xr[j] - m));
  s = block_sum_all(s);
  return static_cast<double>(m) + log(s);
}

template <class T>
__global__ void log_softmax_forward_kernel(const T* x, int64_t dim, T* y) {
  const T* xr = x + blockIdx.x * dim;
  T* yr = y + blockIdx.x * dim;
  const double lse = row_log_sum_exp(xr, dim);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) yr[j] = static_cast<T>(xr[j] - lse);
}

template <class T>
__global__ void log_softmax_backward_kernel(const T* y, const T* g, int64_t dim, T* dx) {
  const int64_t off = blockIdx.x * dim;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) s += static_cast<double>(g[off + j]);
  const T gs = static_cast<T>(block_sum_all(s));
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dx[off + j] = g[off + j] - exp(y[off + j]) * gs;
}

template <class T>
__global__ void cross_entropy_rows_kernel(const T* logits, const int64_t* targets, int64_t dim, int64_t ignore_index,
                                          double* lse, double* row_loss) {
  const T* xr = logits + blockIdx.x * dim;
  const double l = row_log_sum_exp(xr, dim);
  if (threadIdx.x == 0) {
    lse[blockIdx.x] = l;
    const int64_t t = targets[blockIdx.x];
    row_loss[blockIdx.x] = t == ignore_index ? 0.0 : l - static_cast<double>(xr[t]);
  }
}

// One block: loss[0] = sum(row_loss) * inv_count (0 when nothing is counted).
template <class T>
__global__ void cross_entropy_total_kernel(const double* row_loss, int64_t rows, double inv_count, T* loss) {
  double s = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += row_loss[r];
  s = block_sum_all(s);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(s * inv_count);
}

template <class T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* targets, const double* lse,
                                              int64_t dim, int64_t ignore_index, const T* grad_loss,
                                              double inv_count, T* dlogits) {
  const int64_t off = blockIdx.x * dim;
  const int64_t t = targets[blockIdx.x];
  if (t == ignore_index) {
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dlogits[off + j] = T(0);
    return;
  }
  const T s = static_cast<T>(static_cast<double>(grad_loss[0]) * inv_count);
  const double l = lse[blockIdx.x];
  // exp(x - lse) <= 1: the shift by the row's log-sum-exp keeps it finite for any x.
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const T p = s * exp(static_cast<T>(logits[off + j] - l));
    dlogits[off + j] = j == t ? p - s : p;
  }
}

template <class T>
__global__ void embedding_forward_kernel(const T* weight, const int64_t* ids, int64_t count, int64_t dim, T* out) {
  const int64_t total = count * dim;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = weight[ids[i / dim] * dim + i % dim];
}

template <class T>
__global__ void embedding_backward_kernel(const T* g, const int64_t* ids, int64_t count, int64_t dim, T* dweight) {
  const int64_t total = count * dim;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    atomicAdd(dweight + ids[i / dim] * dim + i % dim, g[i]);
}

// Calls f(T{}) with T = float or double per `dtype` (the two instantiations of each kernel).
template <class F>
void dispatch_float(DType dtype, const char* op, F f) {
  if (dtype == DType::f32) {
    f(float{});
  } else {
    LAT_CHECK(dtype == DType::f64, "cuda " << op << ": dtype: expected f32 or f64, got " << dtype_name(dtype));
    f(double{});
  }
}

// A device buffer of `count` doubles from the caching allocator, released on scope exit.
struct DoubleBuffer {
  DoubleBuffer(int64_t count, int device)
      : device(device), p(static_cast<double*>(allocate(static_cast<size_t>(count) * sizeof(double), device))) {}
  ~DoubleBuffer() { release(p, device); }
  DoubleBuffer(const DoubleBuffer&) = delete;
  DoubleBuffer& operator=(const DoubleBuffer&) = delete;
  int device;
  double* p;
};

unsigned rows_grid(int64_t rows) {
  LAT_CHECK(rows <= 0x7fffffff, "cuda: " << rows << " rows exceed the grid limit");
  return static_cast<unsigned>(rows);
}

}  // namespace

void rms_norm_forward(const RowsArgs& a, const void* x, const void* weight, double eps, void* y, double* rstd) {
  if (a.rows == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  dispatch_float(a.dtype, "rms_norm", [&](auto zero) {
    using T = decltype(zero);
    rms_norm_forward_kernel<T><<<rows_grid(a.rows), kBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), a.dim, eps, static_cast<T*>(y), rstd);
  });
  LAT_CUDA_CHECK_LAUNCH();
}

void rms_norm_backward(const RowsArgs& a, const void* x, const void* weight, const double* rstd, const void* g,
                       void* dx, void* dweight) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  dispatch_float(a.dtype, "rms_norm", [&](auto zero) {
    using T = decltype(zero);
    if (dx != nullptr && a.rows > 0) {
      rms_norm_dx_kernel<T><<<rows_grid(a.rows), kBlock, 0, stream>>>(static_cast<const T*>(x),
                                                                      static_cast<const T*>(weight), rstd,
                                                                      static_cast<const T*>(g), a.dim,
                                                                      static_cast<T*>(dx));
      LAT_CUDA_CHECK_LAUNCH();
    }
    if (dweight != nullptr && a.dim > 0) {
      // Rows split into segments so that splits * dim threads fill the GPU.
      const int64_t splits = std::clamp<int64_t>((int64_t{1} << 16) / a.dim, 1, std::max<int64_t>(a.rows / 16, 1));
      const int64_t seg = (a.rows + splits - 1) / splits;
      DoubleBuffer partial(splits * a.dim, a.device);
      rms_norm_dweight_partial_kernel<T><<<grid_for(splits * a.dim), kBlock, 0, stream>>>(
          static_cast<const T*>(x), rstd, static_cast<const T*>(g), a.rows, a.dim, splits, seg, partial.p);
      LAT_CUDA_CHECK_LAUNCH();
      rms_norm_dweight_combine_kernel<T><<<grid_for(a.dim), kBlock, 0, stream>>>(partial.p, a.dim, splits,
                                                                                 static_cast<T*>(dweight));
      LAT_CUDA_CHECK_LAUNCH();
    }
  });
}

void softmax_forward(const RowsArgs& a, const void* x, void* y) {
  if (a.rows == 0 || a.dim == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  dispatch_float(a.dtype, "softmax", [&](auto zero) {
    using T = decltype(zero);
    softmax_forward_kernel<T><<<rows_grid(a.rows), kBlock, 0, stream>>>(static_cast<const T*>(x), a.dim,
                                                                        static_cast<T*>(y));
  });
  LAT_CUDA_CHECK_LAUNCH();
}

void softmax_backward(const RowsArgs& a, const void* y, const void* g, void* dx) {
  if (a.rows == 0 || a.dim == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  dispatch_float(a.dtype, "softmax", [&](auto zero) {
    using T = decltype(zero);
    softmax_backward_kernel<T><<<rows_grid(a.rows), kBlock, 0, stream>>>(
        static_cast<const T*>(y), static_cast<const T*>(g), a.dim, static_cast<T*>(dx));
  });
  LAT_CUDA_CHECK_LAUNCH();
}

void log_softmax_forward(const RowsArgs& a, const void* x, void* y) {
  if (a.rows == 0 || a.dim == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  dispatch_float(a.dtype, "log_softmax", [&](auto zero) {
    using T = decltype(zero);
    log_softmax_forward_kernel<T><<<rows_grid(a.rows), kBlock, 0, stream>>>(static_cast<const T*>(x), a.dim,
                                                                            static_cast<T*>(y));
  });
  LAT_CUDA_CHECK_LAUNCH();
}

void log_softmax_backward(const RowsArgs& a, const void* y, const void* g, void* dx) {
  if (a.rows == 0 || a.dim == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  dispatch_float(a.dtype, "log_softmax", [&](auto zero) {
    using T = decltype(zero);
    log_softmax_backward_kernel<T><<<rows_grid(a.rows), kBlock, 0, stream>>>(
        static_cast<const T*>(y), static_cast<const T*>(g), a.dim, static_cast<T*>(dx));
  });
  LAT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_forward(const RowsArgs& a, const void* logits, const int64_t* targets, int64_t ignore_index,
                           int64_t count, double* lse, void* loss) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  DoubleBuffer row_loss(std::max<int64_t>(a.rows, 1), a.device);
  const double inv_count = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  dispatch_float(a.dtype, "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    if (a.rows > 0) {
      cross_entropy_rows_kernel<T><<<rows_grid(a.rows), kBlock, 0, stream>>>(
          static_cast<const T*>(logits), targets, a.dim, ignore_index, lse, row_loss.p);
      LAT_CUDA_CHECK_LAUNCH();
    }
    cross_entropy_total_kernel<T><<<1, kBlock, 0, stream>>>(row_loss.p, a.rows, inv_count, static_cast<T*>(loss));
    LAT_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_backward(const RowsArgs& a, const void* logits, const int64_t* targets, const double* lse,
                            int64_t ignore_index, const void* grad_loss, double inv_count, void* dlogits) {
  if (a.rows == 0 || a.dim == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  dispatch_float(a.dtype, "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    cross_entropy_backward_kernel<T><<<rows_grid(a.rows), kBlock, 0, stream>>>(
        static_cast<const T*>(logits), targets, lse, a.dim, ignore_index, static_cast<const T*>(grad_loss),
        inv_count, static_cast<T*>(dlogits));
  });
  LAT_CUDA_CHECK_LAUNCH();
}

void embedding_forward(DType dtype, const void* weight, const int64_t* ids, int64_t count, int64_t dim, void* out,
                       int device) {
  if (count * dim == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  dispatch_float(dtype, "embedding", [&](auto zero) {
    using T = decltype(zero);
    embedding_forward_kernel<T><<<grid_for(count * dim), kBlock, 0, stream>>>(static_cast<const T*>(weight), ids,
                                                                              count, dim, static_cast<T*>(out));
  });
  LAT_CUDA_CHECK_LAUNCH();
}

void embedding_backward(DType dtype, const void* g, const int64_t* ids, int64_t count, int64_t dim, int64_t num,
                        void* dweight, int device) {
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  LAT_CUDA_CHECK(cudaMemsetAsync(dweight, 0, static_cast<size_t>(num * dim) * dtype_size(dtype), stream));
  if (count * dim == 0) return;
  dispatch_float(dtype, "embedding", [&](auto zero) {
    using T = decltype(zero);
    embedding_backward_kernel<T><<<grid_for(count * dim), kBlock, 0, stream>>>(static_cast<const T*>(g), ids, count,
                                                                               dim, static_cast<T*>(dweight));
  });
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace lat::cuda
