// The arguments of one fused causal attention call (attention_op.h): one plain struct of
// pointers, sizes and strides for the CPU kernels (attention_op_cpu.h) and the CUDA
// kernels (attention_op_cuda.h).
#pragma once
#include <algorithm>
#include <cstdint>

namespace lat::attention {

/// One attention call, for the CPU kernels (S = float or double) and the CUDA kernels
/// (S = float, on device `device`). q rows are [B, Tq, H, D], k rows [B, *, Hkv, D], v rows
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
  int device = 0;        // CUDA device index (CUDA kernels)

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

}  // namespace lat::attention
