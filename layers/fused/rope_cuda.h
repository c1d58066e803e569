// CUDA kernel of the rotary position embedding (layers/fused/rope.h), f32.
#pragma once
#include <cstdint>

namespace lat::rope_cuda {

/// dst[b, t, h, :R] = src[b, t, h, :R] rotated by sign * angle(position_offset + t - start[t], i),
/// with angle(p, i) = p * theta^(-2i/R) for the pair (i, i + R/2), computed in double as on
/// the CPU; dst[b, t, h, R:] = src[b, t, h, R:]. src, dst: [B, T, H, D] on device `device`,
/// R even in [2, D]; start [T] on that device (the first token of each token's packed
/// sequence), or null for 0.
void rotate(const float* src, float* dst, int64_t B, int64_t T, int64_t H, int64_t D, int64_t R, double theta,
            int64_t position_offset, const int64_t* start, double sign, int device);

}  // namespace lat::rope_cuda
