// CUDA kernels of the fused causal attention (layers/fused/attention_op.h): plain structs of
// pointers, sizes and strides, f32. Same tiling and formulas as the CPU kernels
// (attention_op_cpu.h): FlashAttention's online softmax forward (Dao et al. 2022, alg. 1)
// and FlashAttention-2's backward split into a dq pass and a dk/dv pass (Dao 2023, sec. 3.1).
#pragma once
#include <cstdint>

namespace lat::attention_cuda {

/// Largest head dims D and Dv of the CUDA kernels (two 64-wide register tiles).
inline constexpr int64_t kMaxHeadDim = 128;

/// One call on device `device`. q rows [B, Tq, H, D], k rows [B, *, Hkv, D], v rows
/// [B, *, Hkv, Dv], contiguous within a batch item, *_batch_stride elements apart;
/// query i sees key j when j <= i + q_offset and (window == 0 or j > i + q_offset - window).
struct Args {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t B = 0, Tq = 0, Tk = 0, H = 0, Hkv = 0, D = 0, Dv = 0;
  int64_t q_batch_stride = 0, k_batch_stride = 0, v_batch_stride = 0;
  int64_t q_offset = 0, window = 0;
  float scale = 1.0f;
  int device = 0;
};

/// o [B, Tq, H, Dv]; lse [B, H, Tq] (natural-log logsumexp of the scaled scores), or null.
void forward(const Args& a, float* o, float* lse);

/// dq [B, Tq, H, D], dk [B, Tk, Hkv, D], dv [B, Tk, Hkv, Dv] (contiguous; the batch strides
/// must be the contiguous ones) from the forward's o and lse and the upstream do_.
void backward(const Args& a, const float* o, const float* lse, const float* do_, float* dq, float* dk, float* dv);

}  // namespace lat::attention_cuda
