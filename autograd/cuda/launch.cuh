// Launch helpers shared by the CUDA kernels: grid sizes for grid-stride loops.
#pragma once
#include <algorithm>
#include <cstdint>

namespace lat::cuda {

constexpr int kBlock = 256;

/// Blocks for a grid-stride loop over n elements (at least 1, at most 2^20: each thread
/// then handles several elements when n is huge).
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

}  // namespace lat::cuda
