// The chunkwise kernel of the decayed linear-attention recurrence
// S_t = exp(g_t) S_{t-1} + k_t v_t^T, r_t = scale S_t^T q_t (ALGORITHMS.md 2.3), shared by
// chunk_simple_gla and chunk_linear_attn (g absent: no decay; with the normalizer, v gets
// a constant-1 column so the state is [K, V + 1], ALGORITHMS.md 2.2). The API entry
// points (checks, tape node) are chunk_simple_gla.cpp and chunk_linear_attn.cpp; the
// CPU kernel is chunk_simple_gla_cpu.cpp. Letters as in common.h; Vs is the state width.
#pragma once
#include <cstdint>
#include <memory>

namespace lat::linear_attention {

/// Arguments of one call, API layout (STYLE habit 5).
struct ChunkParams {
  const float* q = nullptr;   // [B, T, H, K]
  const float* k = nullptr;   // [B, T, H, K]
  const float* v = nullptr;   // [B, T, H, V]
  const float* g = nullptr;   // [B, T, H] log-decay <= 0, or null: no decay
  const float* h0 = nullptr;  // [B, H, K, Vs] initial state, or null: zeros
  int64_t B = 0, T = 0, H = 0, K = 0, V = 0;
  int64_t C = 64;             // chunk size
  float scale = 1.0f;
  bool ones_column = false;   // append a constant-1 value column (state [K, V + 1])

  int64_t Vs() const { return ones_column ? V + 1 : V; }
  int64_t NT() const { return (T + C - 1) / C; }
};

/// What forward keeps for backward (opaque; defined by the backend).
struct ChunkSaved;

/// Forward: r [B, T, H, Vs] (the readout scale S_t^T q_t, including the normalizer
/// column when ones_column), ht [B, H, K, Vs] (final state, skipped when null). Returns
/// the payload for backward when `save`, else null.
std::shared_ptr<const ChunkSaved> chunk_decay_forward_cpu(const ChunkParams& p, float* r, float* ht, bool save);

/// Input gradients of one call, API layout. dg is skipped when null (or p.g is null).
struct ChunkGrads {
  float* dq = nullptr;   // [B, T, H, K]
  float* dk = nullptr;   // [B, T, H, K]
  float* dv = nullptr;   // [B, T, H, V] (the constant column's gradient is dropped)
  float* dg = nullptr;   // [B, T, H]
  float* dh0 = nullptr;  // [B, H, K, Vs]
};

/// Backward from dr [B, T, H, Vs] and dht [B, H, K, Vs] (null: zero), using forward's
/// payload and reading q, k, v, g again through p (the caller keeps them alive and
/// unchanged). Writes every element of every non-null gradient in `grads`.
void chunk_decay_backward_cpu(const ChunkParams& p, const ChunkSaved& saved, const float* dr, const float* dht,
                              const ChunkGrads& grads);

}  // namespace lat::linear_attention
