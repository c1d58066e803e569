// CUDA kernels of the causal depthwise short convolution + SiLU (layers/fused/short_conv.h has
// the op and the formulas), f32. Letters: B batch, T tokens, D channels, W kernel size.
#pragma once
#include <cstdint>

namespace lat::short_conv_cuda {

/// Largest kernel size W of the CUDA kernels (the per-thread weight-gradient registers).
inline constexpr int64_t kMaxKernel = 16;

/// x [B, T, D], weight [D, 1, W], bias [D] or null (none), state [B, W-1, D] or null (zeros), start [T] (packed
/// sequences, B == 1: the first token of each token's sequence; output t reads no token
/// before start[t]) or null, on device `device`.
struct Args {
  const float* x = nullptr;
  const float* weight = nullptr;
  const float* bias = nullptr;
  const float* state = nullptr;
  const int64_t* start = nullptr;
  int64_t B = 0, T = 0, D = 0, W = 0;
  int device = 0;
};

/// y [B, T, D] = silu(conv).
void forward(const Args& a, float* y);

/// From dy [B, T, D]: dx [B, T, D], dweight [D, 1, W], dstate [B, W-1, D] and dbias [D]
/// (the last two null: not wanted), all overwritten.
void backward(const Args& a, const float* dy, float* dx, float* dweight, float* dstate, float* dbias);

}  // namespace lat::short_conv_cuda
