// Fused causal softmax attention: one tape node whose forward and backward are tiled with an
// online softmax (FlashAttention, Dao et al. 2022, alg. 1-2; the two-pass backward of
// FlashAttention-2, Dao 2023, sec. 3.1), keeping only the per-row logsumexp: memory is
// linear in T, no T x T matrix is ever built.
//
// Letters: B batch, Tq query tokens, Tk key tokens, H query heads, Hkv key/value heads
// (grouped-query attention, Ainslie et al. 2023: query head h reads kv head h / (H / Hkv)),
// D head dim of q and k, Dv head dim of v.
#pragma once
#include <cstdint>
#include <optional>

#include "lat/tensor.h"

namespace lat {

/// o[b, i, h] = sum_j softmax_j(scale * q[b, i, h] . k[b, j, hk]) v[b, j, hk] over the keys j
/// that query i sees: with p = i + q_offset its position among the keys, j <= p and, when
/// window_size > 0 (sliding window), j > p - window_size.
///   q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv] (f32, or f64 for references
///   and gradient checks; all the same dtype, on the CPU) -> o: [B, Tq, H, Dv].
///   scale defaults to D^-0.5. q_offset defaults to Tk - Tq (the queries are the last Tq
///   tokens: Tq = Tk for training, Tq = 1 when decoding over a cache).
/// With cu_seqlens (i64 [N + 1], packed sequences of a B == 1 batch, layers/cu_seqlens.h;
/// Tq = Tk, q_offset 0) each query sees only the keys of its own sequence, as N separate
/// calls would: j in [c_n, i] (and within the window).
/// Differentiable in q, k and v (one tape node). Throws lat::Error when the ranks or sizes
/// do not match, H is not a multiple of Hkv, window_size < 0, q_offset is outside
/// [0, Tk - Tq] (then some query would see no key), or cu_seqlens is invalid.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale = {},
                        int64_t window_size = 0, std::optional<int64_t> q_offset = {}, const Tensor& cu_seqlens = {});

/// Decoding form over a KV cache buffer: k_cache [B, capacity, Hkv, D] and v_cache
/// [B, capacity, Hkv, Dv] (f32) of which rows [0, length) hold the keys and values, the
/// last Tq of them belonging to the queries q [B, Tq, H, D] (q_offset = length - Tq).
/// Reads the cache in place (no copy); not recorded on the tape. Same errors as above,
/// plus length outside [Tq, capacity].
Tensor causal_attention_cached(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                               std::optional<double> scale = {}, int64_t window_size = 0);

}  // namespace lat
