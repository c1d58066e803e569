// CUDA kernels of the fused causal attention (layers/fused/attention_op.h): plain structs of
// pointers, sizes and strides, f32. Same tiling and formulas as the CPU kernels
// (attention_op_cpu.h): FlashAttention's online softmax forward (Dao et al. 2022, alg. 1)
// and FlashAttention-2's backward split into a dq pass and a dk/dv pass (Dao 2023, sec. 3.1).
#pragma once
#include <cstdint>

#include "layers/fused/attention_args.h"

namespace lat::attention_cuda {

/// Largest head dims D and Dv of the CUDA kernels (two 64-wide register tiles).
inline constexpr int64_t kMaxHeadDim = 128;

/// The call's pointers, sizes and visibility (attention_args.h), the same as the CPU
/// kernels'; f32, on device a.device.
using Args = attention::Args<float>;

/// o [B, Tq, H, Dv]; lse [B, H, Tq] (natural-log logsumexp of the scaled scores), or null.
void forward(const Args& a, float* o, float* lse);

/// dq [B, Tq, H, D], dk [B, Tk, Hkv, D], dv [B, Tk, Hkv, Dv] (contiguous; the batch strides
/// must be the contiguous ones) from the forward's o and lse and the upstream do_.
void backward(const Args& a, const float* o, const float* lse, const float* do_, float* dq, float* dk, float* dv);

}  // namespace lat::attention_cuda
