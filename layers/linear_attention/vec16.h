// 16-float vectors (cpu::Simd<float>) for the chunk kernels' loops. Float reductions do not
// vectorize on their own (the sequential order is the language's), so the sums that the
// kernels repeat per row are written here in vector accumulators.
#pragma once
#include <cstdint>
#include <cstring>

#include "autograd/cpu/simd.h"

namespace lat::linear_attention {

using Vec16 = cpu::Simd<float>::V;
inline constexpr int64_t kLanes = cpu::Simd<float>::L;

inline Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof(Vec16));
  return v;
}

inline void store16(float* p, Vec16 v) { std::memcpy(p, &v, sizeof(Vec16)); }

/// The sum of v's lanes, halving the vector three times (no chain of 15 dependent adds).
inline float lane_sum(Vec16 v) {
  typedef float Vec8 __attribute__((vector_size(32)));
  typedef float Vec4 __attribute__((vector_size(16)));
  const Vec8 h = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                 __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const Vec4 q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  return (q[0] + q[2]) + (q[1] + q[3]);
}

/// a . b over n floats in four vector accumulators (not the sequential order of the sum).
inline float dot(const float* a, const float* b, int64_t n) {
  Vec16 acc[4] = {};
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes)
    for (int u = 0; u < 4; ++u) acc[u] += load16(a + i + u * kLanes) * load16(b + i + u * kLanes);
  for (; i + kLanes <= n; i += kLanes) acc[0] += load16(a + i) * load16(b + i);
  float s = lane_sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace lat::linear_attention
