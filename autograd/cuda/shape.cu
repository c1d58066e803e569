// CUDA kernels of the copying shape ops (see shape.h).
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/shape.h"
#include "autograd/cuda/stream.h"

namespace lat::cuda {
namespace {

constexpr int kMaxDims = 8;

// Output shape and, per output dimension, the stride of the source element it reads.
struct Permutation {
  int ndim = 0;
  int64_t out_shape[kMaxDims] = {};
  int64_t read_stride[kMaxDims] = {};
};

template <class W>
__global__ void permute_kernel(const W* src, W* dst, Permutation p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, offset = 0;
    for (int d = p.ndim - 1; d >= 0; --d) {
      offset += (rest % p.out_shape[d]) * p.read_stride[d];
      rest /= p.out_shape[d];
    }
    dst[i] = src[offset];
  }
}

template <class W>
__global__ void axis_copy_kernel(const W* src, int64_t src_len, int64_t src_start, W* dst, int64_t dst_len,
                                 int64_t dst_start, int64_t count, int64_t inner, int64_t n) {
  const int64_t block = count * inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / block, r = i % block;
    dst[(o * dst_len + dst_start) * inner + r] = src[(o * src_len + src_start) * inner + r];
  }
}

}  // namespace

void permute(const void* src, void* dst, const Shape& in_shape, const std::vector<int64_t>& perm, size_t esize,
             int device) {
  const int64_t n = shape_numel(in_shape);
  if (n == 0) return;
  const int nd = static_cast<int>(in_shape.size());
  LAT_CHECK(nd <= kMaxDims, "cuda permute: at most " << kMaxDims << " dims, got shape " << shape_str(in_shape));
  LAT_CHECK(esize == 4 || esize == 8, "cuda permute: element size " << esize << " not supported");
  Permutation p;
  p.ndim = nd;
  int64_t in_strides[kMaxDims] = {};
  int64_t stride = 1;
  for (int d = nd - 1; d >= 0; --d) {
    in_strides[d] = stride;
    stride *= in_shape[d];
  }
  for (int i = 0; i < nd; ++i) {
    p.out_shape[i] = in_shape[perm[i]];
    p.read_stride[i] = in_strides[perm[i]];
  }
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  if (esize == 4) {
    permute_kernel<uint32_t><<<grid_for(n), kBlock, 0, stream>>>(static_cast<const uint32_t*>(src),
                                                                 static_cast<uint32_t*>(dst), p, n);
  } else {
    permute_kernel<uint64_t><<<grid_for(n), kBlock, 0, stream>>>(static_cast<const uint64_t*>(src),
                                                                 static_cast<uint64_t*>(dst), p, n);
  }
  LAT_CUDA_CHECK_LAUNCH();
}

void copy_along_axis(const AxisCopy& c) {
  const int64_t n = c.outer * c.count * c.inner;
  if (n == 0) return;
  LAT_CHECK(c.esize == 4 || c.esize == 8, "cuda copy_along_axis: element size " << c.esize << " not supported");
  DeviceGuard guard(c.device);
  cudaStream_t stream = current_stream(c.device);
  if (c.esize == 4) {
    axis_copy_kernel<uint32_t><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<const uint32_t*>(c.src), c.src_len, c.src_start, static_cast<uint32_t*>(c.dst), c.dst_len,
        c.dst_start, c.count, c.inner, n);
  } else {
    axis_copy_kernel<uint64_t><<<grid_for(n), kBlock, 0, stream>>>(
        static_cast<const uint64_t*>(c.src), c.src_len, c.src_start, static_cast<uint64_t*>(c.dst), c.dst_len,
        c.dst_start, c.count, c.inner, n);
  }
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace lat::cuda
