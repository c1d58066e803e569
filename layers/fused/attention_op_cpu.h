// CPU kernels of the fused causal attention (layers/fused/attention_op.h): plain structs of
// pointers, sizes and strides in, no framework tensors.
#pragma once
#include <algorithm>
#include <cstdint>

namespace lat::attention_cpu {

/// One attention call. q rows are [B, Tq, H, D], k rows [B, *, Hkv, D], v rows
/// [B, *, Hkv, Dv], o [B, Tq, H, Dv], contiguous within a batch item; *_batch_stride is
/// the distance in elements between batch items (a KV cache is longer than Tk).
/// lse: [B, H, Tq], the per-row logsumexp of the scaled scores (natural log).
template <class S>
struct Args {
  const S* q = nullptr;
  const S* k = nullptr;
  const S* v = nullptr;
  int64_t B = 0, Tq = 0, Tk = 0, H = 0, Hkv = 0, D = 0, Dv = 0;
  int64_t q_batch_stride = 0, k_batch_stride = 0, v_batch_stride = 0;
  int64_t q_offset = 0;  // position of query 0 among the keys
  int64_t window = 0;    // 0 = full causal
  S scale = 1;

  const S* q_row(int64_t b, int64_t i, int64_t h) const { return q + b * q_batch_stride + (i * H + h) * D; }
  const S* k_row(int64_t b, int64_t j, int64_t hk) const { return k + b * k_batch_stride + (j * Hkv + hk) * D; }
  const S* v_row(int64_t b, int64_t j, int64_t hk) const { return v + b * v_batch_stride + (j * Hkv + hk) * Dv; }
  /// Keys seen by query i (at key position p = i + q_offset): j <= p and, with a window,
  /// j > p - window; that is [key_begin(i), key_end(i)).
  int64_t key_begin(int64_t i) const { return window > 0 ? std::max<int64_t>(0, i + q_offset - window + 1) : 0; }
  int64_t key_end(int64_t i) const { return std::min(Tk, i + q_offset + 1); }
  /// Queries that see key j: [query_begin(j), query_end(j)).
  int64_t query_begin(int64_t j) const { return std::max<int64_t>(0, j - q_offset); }
  int64_t query_end(int64_t j) const { return window > 0 ? std::min(Tq, j - q_offset + window) : Tq; }
};

/// Forward: writes o (contiguous [B, Tq, H, Dv]) and lse ([B, H, Tq]; may be nullptr when
/// no backward follows). OpenMP over (batch, head, query tile).
template <class S>
void forward(const Args<S>& a, S* o, S* lse);

/// Backward from do_ [B, Tq, H, Dv], the forward's o and lse: writes dq [B, Tq, H, D],
/// dk [B, Tk, Hkv, D], dv [B, Tk, Hkv, Dv] (contiguous; q, k, v batch strides must be the
/// contiguous ones). dq: OpenMP over (batch, head, query tile); dk, dv: over (batch, kv
/// head, key tile), summing the query heads of the group, so no two threads write one row.
template <class S>
void backward(const Args<S>& a, const S* o, const S* lse, const S* do_, S* dq, S* dk, S* dv);

}  // namespace lat::attention_cpu
