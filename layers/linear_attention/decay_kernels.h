// The kernels of the decayed family: chunk_linear_attn and chunk_simple_gla, their
// token-by-token forms fused_recurrent_* and recurrent_step_*, on every backend. All run
//   S_t = a_t S_{t-1} + k_t w_t^T,   r_t = scale S_t^T q_t,
// with a_t = exp(g_t) (simple_gla; g [B, T, H] log-decay <= 0) or 1 (linear attention,
// g absent), and w_t = v_t, or [v_t, 1] with Katharopoulos' normalizer (ALGORITHMS.md 2.2):
// then the state is [K, V + 1] with z as its last column and o_t = r_t[:V] / (r_t[V] +
// kNormEps); without it o_t = r_t. Chunk form: ALGORITHMS.md 2.3 (the derivations sit
// beside the kernels, chunk_simple_gla_cpu.cpp and chunk_simple_gla_cuda.cu).
//
// Every kernel takes one DecayParams, whatever its backend: pointers in the API layout on
// the params' device, output pointers it overwrites. decay.cpp is the one place that
// allocates the outputs and records the tape node; per_sequence.h picks the backend.
//
// Letters as in common.h; Vs, the state width, is V + 1 with the normalizer, else V.
// Grouped heads: q and k have Hk heads, Hk dividing H, and head h reads q/k head
// h / (H / Hk) (Mamba-2's groups, fla's GVA). Only the CPU chunk kernel reads Hk < H;
// decay.cpp gives every other kernel q and k repeated to H heads (Hk == H).
#pragma once
#include <cstdint>
#include <memory>

#include "lat/precision.h"

namespace lat::linear_attention {

/// The normalizer's epsilon: o = r[:V] / (r[V] + kNormEps) (DESIGN.md).
inline constexpr float kNormEps = 1e-6f;

/// One call of the family, on one device (f32; the caller has checked every argument).
struct DecayParams {
  const float* q = nullptr;   // [B, T, Hk, K]
  const float* k = nullptr;   // [B, T, Hk, K]
  const float* v = nullptr;   // [B, T, H, V]
  const float* g = nullptr;   // [B, T, H] log-decay <= 0, or null: a_t = 1
  const float* h0 = nullptr;  // [B, H, K, Vs] initial state, or null: zeros
  int64_t B = 0, T = 0, H = 0, K = 0, V = 0;
  int64_t Hk = 0;             // heads of q and k, a divisor of H
  int64_t C = 64;             // chunk size of the chunk kernels (CUDA: 1..64)
  float scale = 1.0f;
  bool normalize = false;     // Katharopoulos' normalizer (state [K, V + 1])
  int device = 0;             // CUDA device index of the pointers (CUDA kernels)
  // bf16: the CPU chunk kernel's products take bf16 inputs (fp32 accumulation); the other
  // kernels compute in fp32 whatever it is.
  Precision precision = Precision::fp32;

  int64_t Vs() const { return normalize ? V + 1 : V; }
  int64_t NT() const { return (T + C - 1) / C; }
  /// Index of token t of (b, h) in the [B, T, H] layout (row of q, k and v).
  int64_t row(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * H + h; }
};

/// Input gradients of one call, API layout, every non-null one overwritten.
struct DecayGrads {
  float* dq = nullptr;   // [B, T, Hk, K] (summed over the heads of a group)
  float* dk = nullptr;   // [B, T, Hk, K]
  float* dv = nullptr;   // [B, T, H, V] (the normalizer column's gradient is dropped)
  float* dg = nullptr;   // [B, T, H], or null (not wanted; ignored when p.g is null)
  float* dh0 = nullptr;  // [B, H, K, Vs], or null (not wanted)
};

/// What a forward keeps for its backward. Each kernel derives its own; the op holds it
/// without looking inside.
struct DecaySaved {
  virtual ~DecaySaved() = default;
};

// Every forward writes o [B, T, H, V] and, when ht is not null, the final state
// [B, H, K, Vs]; it returns what its backward needs when `save`, else null.
// Every backward takes d_o [B, T, H, V], dht [B, H, K, Vs] (null: zero) and its forward's
// `saved`, reads q, k, v, g and h0 again through p (the caller keeps them alive and
// unchanged), and writes `grads`.

/// Chunkwise, CPU (chunk_simple_gla_cpu.cpp): any chunk size, any Hk dividing H.
std::shared_ptr<const DecaySaved> chunk_decay_forward_cpu(const DecayParams& p, float* o, float* ht, bool save);
void chunk_decay_backward_cpu(const DecayParams& p, const DecaySaved& saved, const float* d_o, const float* dht,
                              const DecayGrads& grads);

/// Chunkwise, CUDA (chunk_simple_gla_cuda.cu): chunk size 1..64 (kMaxCudaChunkSize), on
/// device p.device, queued on its stream.
std::shared_ptr<const DecaySaved> chunk_decay_forward_cuda(const DecayParams& p, float* o, float* ht, bool save);
void chunk_decay_backward_cuda(const DecayParams& p, const DecaySaved& saved, const float* d_o, const float* dht,
                               const DecayGrads& grads);

/// Token by token, CPU (recurrent_decay_cpu.cpp); p.C is not used.
std::shared_ptr<const DecaySaved> fused_recurrent_decay_forward_cpu(const DecayParams& p, float* o, float* ht,
                                                                    bool save);
void fused_recurrent_decay_backward_cpu(const DecayParams& p, const DecaySaved& saved, const float* d_o,
                                        const float* dht, const DecayGrads& grads);

/// One decoding step for every (b, h), T = 1 (q, k [B, H, K], v [B, H, V], g [B, H] or
/// null; p.h0 and p.C are not used): state [B, H, K, Vs] updated in place, o [B, H, V].
/// CPU: recurrent_decay_cpu.cpp; CUDA: recurrent_cuda.cu (on device p.device).
void recurrent_step_decay_cpu(const DecayParams& p, float* state, float* o);
void recurrent_step_decay_cuda(const DecayParams& p, float* state, float* o);

/// The normalizer on the CPU (chunk_linear_attn_cpu.cpp), for `rows` rows of the readout
/// r [rows, V + 1]: o [rows, V] = r[:, :V] / (r[:, V] + kNormEps), and its backward from
/// d_o [rows, V]: dr[:, :V] = d_o / den, dr[:, V] = -(d_o . o) / den, den = r[:, V] + kNormEps.
void normalize_forward_cpu(const float* r, int64_t rows, int64_t V, float* o);
void normalize_backward_cpu(const float* r, const float* d_o, int64_t rows, int64_t V, float* dr);

}  // namespace lat::linear_attention
