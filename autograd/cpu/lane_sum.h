// A sum in double whose adds do not chain through one register, in an order fixed by the
// length alone.
#pragma once
#include <cstdint>

namespace lat::cpu {

/// sum_j term(j) for j in [0, n), in double: kLanes interleaved partial sums (lane l takes
/// j = l mod kLanes), added in lane order at the end. The lanes are one vector (GCC's vector
/// extension, which clang shares): a single running sum would chain every add through its
/// latency, and lanes kept in an array went through memory before their final sum, which
/// held up each short row's result. The order is fixed, so the bits do not depend on the
/// thread count either.
constexpr int64_t kLanes = 8;
template <class Term>
double lane_sum(int64_t n, const Term& term) {
  using Lanes = double __attribute__((vector_size(kLanes * sizeof(double))));
  Lanes acc = {};
  const int64_t whole = n / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
    Lanes t;
    for (int64_t l = 0; l < kLanes; ++l) t[l] = term(j + l);
    acc += t;
  }
  for (int64_t l = 0; l < kLanes; ++l)
    if (whole + l < n) acc[l] += term(whole + l);
  double s = 0.0;
  for (int64_t l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

}  // namespace lat::cpu
