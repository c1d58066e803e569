// The kernels of Kimi Delta Attention (chunk_kda, fused_recurrent_kda, recurrent_step_kda):
// the gated delta rule with a per-key-channel decay. State S [K, V]:
//   S_t = (I - beta_t k_t k_t^T) Diag(a_t) S_{t-1} + beta_t k_t v_t^T,   o_t = scale S_t^T q_t,
// a_t = exp(g_t), g [B, T, H, K] log-decay <= 0 per key channel; q and k L2-normalized
// first (qk_l2norm.h) when asked for. Chunk form: ALGORITHMS.md 2.7 (the derivation of the
// backward sits beside the kernel, chunk_kda_cpu.cpp).
//
// As delta_kernels.h: one KdaParams per call in the API layout, output pointers the kernel
// overwrites; kda.cpp allocates, checks and records the tape node, per_sequence.h runs the
// spans. Letters as in common.h.
#pragma once
#include <cstdint>
#include <memory>

#include "lat/precision.h"

namespace lat::linear_attention {

/// One call of KDA (f32; the caller has checked every argument).
struct KdaParams {
  const float* q = nullptr;     // [B, T, H, K]
  const float* k = nullptr;     // [B, T, H, K]
  const float* v = nullptr;     // [B, T, H, V]
  const float* gk = nullptr;    // [B, T, H, K] log-decay <= 0 per key channel
  const float* beta = nullptr;  // [B, T, H], values in [0, 1]
  const float* h0 = nullptr;    // [B, H, K, V] initial state, or null: zeros
  // Always null: the span loops of per_sequence.h offset a family's `g` as [B, T, H]; KDA's
  // gate is gk, offset by Kda::offset_rows instead.
  const float* g = nullptr;
  int64_t B = 0, T = 0, H = 0, K = 0, V = 0;
  int64_t C = 64;  // chunk size of the chunk kernel (CUDA: 1..64)
  int device = 0;  // CUDA device index of the pointers (CUDA kernels)
  float scale = 1.0f;
  bool use_qk_l2norm_in_kernel = false;
  // bf16: the chunk kernel's tile products take bf16 inputs (fp32 accumulation).
  Precision precision = Precision::fp32;

  int64_t NT() const { return (T + C - 1) / C; }
  /// Index of token t of (b, h) in the [B, T, H] layout (row of q, k, v and gk).
  int64_t row(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * H + h; }
};

/// Input gradients of one call, API layout, every non-null one overwritten.
struct KdaGrads {
  float* dq = nullptr;     // [B, T, H, K]
  float* dk = nullptr;     // [B, T, H, K]
  float* dv = nullptr;     // [B, T, H, V]
  float* dgk = nullptr;    // [B, T, H, K]
  float* dbeta = nullptr;  // [B, T, H]
  float* dh0 = nullptr;    // [B, H, K, V], or null (not wanted)
  float* dg = nullptr;     // always null (see KdaParams::g)
  int64_t K = 0;           // channels per [B, T, H] row of dgk (for the span offsets)
};

/// What a forward keeps for its backward (each kernel derives its own).
struct KdaSaved {
  virtual ~KdaSaved() = default;
};

// Every forward writes o [B, T, H, V] and, when ht is not null, the final state
// [B, H, K, V]; it returns what its backward needs when `save`, else null. Every backward
// takes d_o [B, T, H, V], dht [B, H, K, V] (null: zero) and its forward's `saved`, reads
// the inputs again through p, and writes `grads`.

/// Chunkwise (chunk_kda_cpu.cpp): any chunk size.
std::shared_ptr<const KdaSaved> chunk_kda_forward_cpu(const KdaParams& p, float* o, float* ht, bool save);
void chunk_kda_backward_cpu(const KdaParams& p, const KdaSaved& saved, const float* d_o, const float* dht,
                            const KdaGrads& grads);

/// Token by token (recurrent_kda_cpu.cpp); p.C is not used.
std::shared_ptr<const KdaSaved> fused_recurrent_kda_forward_cpu(const KdaParams& p, float* o, float* ht, bool save);
void fused_recurrent_kda_backward_cpu(const KdaParams& p, const KdaSaved& saved, const float* d_o, const float* dht,
                                      const KdaGrads& grads);

/// Chunkwise and token by token on CUDA (chunk_kda_cuda.cu), on device p.device: chunk size
/// 1..64, K <= 256 (a lat::Error above). The token-by-token backward is the chunk backward
/// (chunk size 64): the same gradients.
std::shared_ptr<const KdaSaved> chunk_kda_forward_cuda(const KdaParams& p, float* o, float* ht, bool save);
void chunk_kda_backward_cuda(const KdaParams& p, const KdaSaved& saved, const float* d_o, const float* dht,
                             const KdaGrads& grads);
std::shared_ptr<const KdaSaved> fused_recurrent_kda_forward_cuda(const KdaParams& p, float* o, float* ht, bool save);
void fused_recurrent_kda_backward_cuda(const KdaParams& p, const KdaSaved& saved, const float* d_o, const float* dht,
                                       const KdaGrads& grads);

/// One decoding step for every (b, h), T = 1 (q, k, gk [B, H, K], v [B, H, V], beta
/// [B, H]; p.h0 and p.C are not used): state [B, H, K, V] updated in place, o [B, H, V].
/// CPU: recurrent_kda_cpu.cpp; CUDA: recurrent_cuda.cu (on device p.device, K <= 256).
void recurrent_step_kda_cpu(const KdaParams& p, float* state, float* o);
void recurrent_step_kda_cuda(const KdaParams& p, float* state, float* o);

}  // namespace lat::linear_attention
