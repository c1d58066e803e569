// CUDA kernels of the reductions (see reduce.h).
//
// sum_axis: with inner == 1 a block reduces one segment of one row (warp shuffles, then
// shared memory); with inner > 1 a thread sums one (outer, inner) column over a segment of
// the axis, reading rows coalesced. When outputs are too few to fill the GPU, the axis is
// split into segments whose partial sums (double) a second kernel adds up in a fixed
// order, so results do not depend on scheduling.
#include <memory>
#include <vector>

#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/cuda_memory.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/reduce.h"
#include "autograd/cuda/stream.h"

namespace lat::cuda {
namespace {

// Enough threads in flight to fill an H100/H200 several times over.
constexpr int64_t kTargetThreads = int64_t{1} << 17;

__device__ double block_sum(double v) {
  __shared__ double warp_sums[kBlock / 32];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kBlock / 32; ++w) total += warp_sums[w];
  return total;  // valid in thread 0
}

// inner == 1: block b handles row o = b / splits, segment s = b % splits of length seg.
// Writes scale * sum to y[o] when splits == 1, else the raw sum to partial[o * splits + s].
template <class T>
__global__ void sum_rows_kernel(const T* x, int64_t n, int64_t splits, int64_t seg, double scale, T* y,
                                double* partial) {
  const int64_t o = blockIdx.x / splits, s = blockIdx.x % splits;
  const int64_t begin = s * seg, end = min(n, begin + seg);
  const T* row = x + o * n;
  double acc = 0.0;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) acc += static_cast<double>(row[j]);
  acc = block_sum(acc);
  if (threadIdx.x == 0) {
    if (splits == 1) {
      y[o] = static_cast<T>(acc * scale);
    } else {
      partial[o * splits + s] = acc;
    }
  }
}

// inner > 1: thread (o, s, i) sums x[o, j, i] over segment s of the axis.
template <class T>
__global__ void sum_columns_kernel(const T* x, int64_t outer, int64_t n, int64_t inner, int64_t splits, int64_t seg,
                                   double scale, T* y, double* partial) {
  const int64_t total = outer * splits * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, s = (t / inner) % splits, o = t / (inner * splits);
    const int64_t begin = s * seg, end = min(n, begin + seg);
    const T* src = x + o * n * inner + i;
    double acc = 0.0;
    for (int64_t j = begin; j < end; ++j) acc += static_cast<double>(src[j * inner]);
    if (splits == 1) {
      y[o * inner + i] = static_cast<T>(acc * scale);
    } else {
      partial[(o * splits + s) * inner + i] = acc;
    }
  }
}

// y[o, i] = scale * sum_s partial[o, s, i].
template <class T>
__global__ void combine_kernel(const double* partial, int64_t outer, int64_t splits, int64_t inner, double scale,
                               T* y) {
  const int64_t total = outer * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, o = t / inner;
    double acc = 0.0;
    for (int64_t s = 0; s < splits; ++s) acc += partial[(o * splits + s) * inner + i];
    y[t] = static_cast<T>(acc * scale);
  }
}

template <class T>
__global__ void expand_kernel(const T* g, int64_t n, int64_t inner, T scale, T* y, int64_t total) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, o = t / (inner * n);
    y[t] = g[o * inner + i] * scale;
  }
}

template <class T>
__global__ void max_kernel(const T* x, int64_t outer, int64_t n, int64_t inner, T* y, int64_t* arg) {
  const int64_t total = outer * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, o = t / inner;
    const T* src = x + o * n * inner + i;
    T best = src[0];
    int64_t best_j = 0;
    for (int64_t j = 1; j < n && best == best; ++j) {
      const T v = src[j * inner];
      if (v > best || v != v) {
        best = v;
        best_j = j;
      }
    }
    y[t] = best;
    arg[t] = best_j;
  }
}

template <class T>
__global__ void max_backward_kernel(const T* g, const int64_t* arg, int64_t n, int64_t inner, T* dx, int64_t total) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, j = (t / inner) % n, o = t / (inner * n);
    dx[t] = arg[o * inner + i] == j ? g[o * inner + i] : T(0);
  }
}

template <class T>
__global__ void sum_of_squares_kernel(const T* x, int64_t n, double* partial) {
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = static_cast<double>(x[i]);
    acc += v * v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// A device workspace of `count` doubles, returned to the caching allocator on scope exit
// (stream order keeps the reuse safe, see stream.h).
class Workspace {
 public:
  Workspace(int64_t count, int device)
      : device_(device), p_(static_cast<double*>(allocate(static_cast<size_t>(count) * sizeof(double), device))) {}
  ~Workspace() { release(p_, device_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  double* get() const { return p_; }

 private:
  int device_;
  double* p_;
};

template <class T>
void sum_axis_typed(const AxisArgs& a, const T* x, T* y, cudaStream_t stream) {
  const int64_t outputs = a.outer * a.inner;
  if (outputs == 0) return;
  if (a.n == 0) {  // an empty axis sums to 0
    LAT_CUDA_CHECK(cudaMemsetAsync(y, 0, outputs * sizeof(T), stream));
    return;
  }
  // Split the axis when the outputs alone give too few threads (blocks for inner == 1).
  const int64_t lanes = a.inner == 1 ? a.outer * kBlock : outputs;
  const int64_t min_seg = a.inner == 1 ? 4 * kBlock : 16;
  int64_t splits = std::max<int64_t>(1, std::min(kTargetThreads / std::max<int64_t>(lanes, 1), a.n / min_seg));
  const int64_t seg = (a.n + splits - 1) / splits;
  splits = (a.n + seg - 1) / seg;
  std::unique_ptr<Workspace> partial;
  if (splits > 1) partial = std::make_unique<Workspace>(outputs * splits, a.device);
  double* part = partial ? partial->get() : nullptr;
  if (a.inner == 1) {
    sum_rows_kernel<T><<<static_cast<unsigned>(a.outer * splits), kBlock, 0, stream>>>(x, a.n, splits, seg, a.scale,
                                                                                       y, part);
  } else {
    sum_columns_kernel<T><<<grid_for(outputs * splits), kBlock, 0, stream>>>(x, a.outer, a.n, a.inner, splits, seg,
                                                                             a.scale, y, part);
  }
  LAT_CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    combine_kernel<T><<<grid_for(outputs), kBlock, 0, stream>>>(part, a.outer, splits, a.inner, a.scale, y);
    LAT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void sum_axis(const AxisArgs& a, const void* x, void* y) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  if (a.dtype == DType::f32) {
    sum_axis_typed(a, static_cast<const float*>(x), static_cast<float*>(y), stream);
  } else {
    LAT_CHECK(a.dtype == DType::f64, "cuda sum: dtype: expected f32 or f64, got " << dtype_name(a.dtype));
    sum_axis_typed(a, static_cast<const double*>(x), static_cast<double*>(y), stream);
  }
}

void expand_axis(const AxisArgs& a, const void* g, void* y) {
  const int64_t total = a.outer * a.n * a.inner;
  if (total == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  if (a.dtype == DType::f32) {
    expand_kernel<float><<<grid_for(total), kBlock, 0, stream>>>(static_cast<const float*>(g), a.n, a.inner,
                                                                 static_cast<float>(a.scale),
                                                                 static_cast<float*>(y), total);
  } else {
    expand_kernel<double><<<grid_for(total), kBlock, 0, stream>>>(static_cast<const double*>(g), a.n, a.inner,
                                                                  a.scale, static_cast<double*>(y), total);
  }
  LAT_CUDA_CHECK_LAUNCH();
}

void max_axis(const AxisArgs& a, const void* x, void* y, int64_t* arg) {
  const int64_t outputs = a.outer * a.inner;
  if (outputs == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  if (a.dtype == DType::f32) {
    max_kernel<float><<<grid_for(outputs), kBlock, 0, stream>>>(static_cast<const float*>(x), a.outer, a.n, a.inner,
                                                                static_cast<float*>(y), arg);
  } else {
    max_kernel<double><<<grid_for(outputs), kBlock, 0, stream>>>(static_cast<const double*>(x), a.outer, a.n,
                                                                 a.inner, static_cast<double*>(y), arg);
  }
  LAT_CUDA_CHECK_LAUNCH();
}

void max_axis_backward(const AxisArgs& a, const void* g, const int64_t* arg, void* dx) {
  const int64_t total = a.outer * a.n * a.inner;
  if (total == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  if (a.dtype == DType::f32) {
    max_backward_kernel<float><<<grid_for(total), kBlock, 0, stream>>>(static_cast<const float*>(g), arg, a.n,
                                                                       a.inner, static_cast<float*>(dx), total);
  } else {
    max_backward_kernel<double><<<grid_for(total), kBlock, 0, stream>>>(static_cast<const double*>(g), arg, a.n,
                                                                        a.inner, static_cast<double*>(dx), total);
  }
  LAT_CUDA_CHECK_LAUNCH();
}

double sum_of_squares(const void* x, DType dtype, int64_t n, int device) {
  if (n == 0) return 0.0;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  const unsigned blocks = std::min<unsigned>(grid_for(n), 1024);
  Workspace partial(blocks, device);
  if (dtype == DType::f32) {
    sum_of_squares_kernel<float><<<blocks, kBlock, 0, stream>>>(static_cast<const float*>(x), n, partial.get());
  } else {
    LAT_CHECK(dtype == DType::f64, "cuda sum_of_squares: dtype: expected f32 or f64, got " << dtype_name(dtype));
    sum_of_squares_kernel<double><<<blocks, kBlock, 0, stream>>>(static_cast<const double*>(x), n, partial.get());
  }
  LAT_CUDA_CHECK_LAUNCH();
  std::vector<double> host(blocks);
  LAT_CUDA_CHECK(cudaMemcpyAsync(host.data(), partial.get(), blocks * sizeof(double), cudaMemcpyDeviceToHost, stream));
  LAT_CUDA_CHECK(cudaStreamSynchronize(stream));
  double total = 0.0;
  for (double v : host) total += v;
  return total;
}

}  // namespace lat::cuda
