// A sum in double whose adds do not chain through one register, in an order fixed by the
// length alone.
#pragma once
#include <cstdint>

namespace lat::cpu {

/// sum_j term(j) for j in [0, n), in double: kLanes interleaved partial sums (lane l takes
/// j = l mod kLanes), added in lane order at the end. The compiler keeps the lanes in one
/// vector register, where a single running sum would chain every add through its latency;
/// the order is fixed, so the bits do not depend on the thread count either.
constexpr int64_t kLanes = 8;
template <class Term>
double lane_sum(int64_t n, const Term& term) {
  double acc[kLanes] = {};
  const int64_t whole = n / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += term(j + l);
  for (int64_t j = whole; j < n; ++j) acc[j - whole] += term(j);
  double s = 0.0;
  for (int64_t l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

}  // namespace lat::cpu
