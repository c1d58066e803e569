// CUDA kernels of the copying shape ops (plain-struct launch API): permutations and
// copies of a range along one axis. Elements are moved as 4- or 8-byte words, so every
// dtype is served by two kernel instantiations.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lat/tensor.h"

namespace lat::cuda {

/// dst = src with its dimensions permuted: dst dim i is src dim perm[i]. src: contiguous
/// `in_shape` (at most 8 dims), element size esize (4 or 8 bytes).
void permute(const void* src, void* dst, const Shape& in_shape, const std::vector<int64_t>& perm, size_t esize,
             int device);

/// For each of `outer` blocks: dst[o, dst_start : dst_start + count, :] =
/// src[o, src_start : src_start + count, :], with src_len / dst_len entries along the axis
/// and `inner` elements after it (the CPU copy_along_axis of autograd/ops_shape.cpp).
struct AxisCopy {
  const void* src = nullptr;
  int64_t src_len = 0, src_start = 0;
  void* dst = nullptr;
  int64_t dst_len = 0, dst_start = 0;
  int64_t count = 0, outer = 0, inner = 0;
  size_t esize = 4;
  int device = 0;
};
void copy_along_axis(const AxisCopy& c);

}  // namespace lat::cuda
