// The float64 oracle of the fused causal attention (layers/fused/attention_op.h), built from
// core ops (matmul, additive causal mask, softmax), shared by the attention tests.
#pragma once
#include <cstdint>
#include <vector>

#include "lat/lat.h"

namespace lat::testing {

/// Naive reference: o = softmax(scale q k^T + mask) v per (batch, head), query i at key
/// position i + q_offset; kv heads repeated for grouped-query attention. Any float dtype.
/// q [B, Tq, H, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] -> [B, Tq, H, Dv]; differentiable.
inline Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, int64_t window,
                              int64_t q_offset) {
  constexpr double kMasked = -1e30;  // additive mask: exp underflows to exactly 0 in float64
  const int64_t Tq = q.size(1), H = q.size(2), Tk = k.size(1), group = H / k.size(2);
  std::vector<Tensor> k_heads, v_heads;
  for (int64_t h = 0; h < H; ++h) {
    k_heads.push_back(slice(k, 2, h / group, h / group + 1));
    v_heads.push_back(slice(v, 2, h / group, h / group + 1));
  }
  Tensor qh = permute(q, {0, 2, 1, 3});                   // [B, H, Tq, D]
  Tensor kh = permute(concat(k_heads, 2), {0, 2, 1, 3});  // [B, H, Tk, D]
  Tensor vh = permute(concat(v_heads, 2), {0, 2, 1, 3});  // [B, H, Tk, Dv]
  std::vector<double> mask(static_cast<size_t>(Tq * Tk));
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j) {
      const int64_t p = i + q_offset;
      const bool visible = j <= p && (window == 0 || j > p - window);
      mask[i * Tk + j] = visible ? 0.0 : kMasked;
    }
  Tensor m = Tensor::from_vector(mask, {Tq, Tk}).to(q.dtype());
  Tensor p = softmax(matmul(qh, kh, false, true) * scale + m);
  return permute(matmul(p, vh), {0, 2, 1, 3});  // [B, Tq, H, Dv]
}

}  // namespace lat::testing
