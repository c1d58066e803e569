// The kernels of the delta-rule family: chunk_delta_rule and chunk_gated_delta_rule, their
// token-by-token forms fused_recurrent_* and recurrent_step_*, on every backend. All run
// (Gated DeltaNet, Yang et al. 2025; DeltaNet, Yang et al. 2024), state S [K, V]:
//   S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = scale S_t^T q_t,
// with a_t = exp(g_t) (gated; g [B, T, H] log-decay <= 0) or 1 (the delta rule, g absent),
// q and k L2-normalized first (y = x / sqrt(sum x^2 + 1e-6), fla's in-kernel l2norm) when
// asked for. Chunk form with the UT/WY transform: ALGORITHMS.md 2.4 (the derivations sit
// beside the kernels, chunk_gated_delta_rule_cpu.cpp and chunk_gated_delta_rule_cuda.cu).
//
// Every kernel takes one DeltaParams, whatever its backend: pointers in the API layout on
// the params' device, output pointers it overwrites. delta.cpp is the one place that
// allocates the outputs and records the tape node; per_sequence.h picks the backend.
//
// Letters as in common.h.
#pragma once
#include <cstdint>
#include <memory>

#include "lat/precision.h"

namespace lat::linear_attention {

/// One call of the family, on one device (f32; the caller has checked every argument).
struct DeltaParams {
  const float* q = nullptr;     // [B, T, H, K]
  const float* k = nullptr;     // [B, T, H, K]
  const float* v = nullptr;     // [B, T, H, V]
  const float* g = nullptr;     // [B, T, H] log-decay <= 0, or null: the delta rule (a_t = 1)
  const float* beta = nullptr;  // [B, T, H], values in [0, 1]
  const float* h0 = nullptr;    // [B, H, K, V] initial state, or null: zeros
  int64_t B = 0, T = 0, H = 0, K = 0, V = 0;
  int64_t C = 64;                        // chunk size of the chunk kernels (CUDA: 1..64)
  float scale = 1.0f;
  bool use_qk_l2norm_in_kernel = false;  // L2-normalize q and k first (fla's flag)
  int device = 0;                        // CUDA device index of the pointers (CUDA kernels)
  // bf16: the CPU chunk kernel's tile products take bf16 inputs (fp32 accumulation); the
  // other kernels compute in fp32 whatever it is.
  Precision precision = Precision::fp32;

  int64_t NT() const { return (T + C - 1) / C; }
  /// Index of token t of (b, h) in the [B, T, H] layout (row of q, k and v).
  int64_t row(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * H + h; }
};

/// Input gradients of one call, API layout, every non-null one overwritten.
struct DeltaGrads {
  float* dq = nullptr;     // [B, T, H, K] (through the L2 norm when it is in the kernel)
  float* dk = nullptr;     // [B, T, H, K]
  float* dv = nullptr;     // [B, T, H, V]
  float* dg = nullptr;     // [B, T, H], or null (not wanted; ignored when p.g is null)
  float* dbeta = nullptr;  // [B, T, H]
  float* dh0 = nullptr;    // [B, H, K, V], or null (not wanted)
};

/// What a forward keeps for its backward. Each kernel derives its own; the op holds it
/// without looking inside.
struct DeltaSaved {
  virtual ~DeltaSaved() = default;
};

// Every forward writes o [B, T, H, V] and, when ht is not null, the final state
// [B, H, K, V]; it returns what its backward needs when `save`, else null.
// Every backward takes d_o [B, T, H, V], dht [B, H, K, V] (null: zero) and its forward's
// `saved`, reads q, k, v, g, beta and h0 again through p (the caller keeps them alive
// and unchanged), and writes `grads`.

/// Chunkwise, CPU (chunk_gated_delta_rule_cpu.cpp): any chunk size.
std::shared_ptr<const DeltaSaved> chunk_delta_forward_cpu(const DeltaParams& p, float* o, float* ht, bool save);
void chunk_delta_backward_cpu(const DeltaParams& p, const DeltaSaved& saved, const float* d_o, const float* dht,
                              const DeltaGrads& grads);

/// Chunkwise, CUDA (chunk_gated_delta_rule_cuda.cu): chunk size 1..64, K <= 256, on device
/// p.device, queued on its stream.
std::shared_ptr<const DeltaSaved> chunk_delta_forward_cuda(const DeltaParams& p, float* o, float* ht, bool save);
void chunk_delta_backward_cuda(const DeltaParams& p, const DeltaSaved& saved, const float* d_o, const float* dht,
                               const DeltaGrads& grads);

/// Token by token, CPU (recurrent_delta_cpu.cpp); p.C is not used.
std::shared_ptr<const DeltaSaved> fused_recurrent_delta_forward_cpu(const DeltaParams& p, float* o, float* ht,
                                                                    bool save);
void fused_recurrent_delta_backward_cpu(const DeltaParams& p, const DeltaSaved& saved, const float* d_o,
                                        const float* dht, const DeltaGrads& grads);

/// One decoding step for every (b, h), T = 1 (q, k [B, H, K], v [B, H, V], g, beta [B, H],
/// g may be null; p.h0 and p.C are not used): state [B, H, K, V] updated in place,
/// o [B, H, V]. CPU: recurrent_delta_cpu.cpp; CUDA: recurrent_cuda.cu (on device p.device).
void recurrent_step_delta_cpu(const DeltaParams& p, float* state, float* o);
void recurrent_step_delta_cuda(const DeltaParams& p, float* state, float* o);

}  // namespace lat::linear_attention
