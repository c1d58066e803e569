// Branch-free exp and sigmoid for float CPU loops. std::exp does not vectorize without
// -ffast-math, and in the activations (SiLU, sigmoid) and the softmax it was the largest
// single cost of a training step; these inline into the loops and vectorize.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace lat::cpu {

/// exp(x) for float: Cephes' expf reduction x = n ln2 + r, |r| <= ln2/2, with its minimax
/// polynomial for exp(r); relative error about 1e-7 (the float rounding level) for results
/// from 2^-125 (x > -86.6) up to FLT_MAX. Smaller results flush to 0 (-inf gives 0), x above
/// ln(FLT_MAX) = 88.72 gives +inf, NaN gives NaN: the same as std::exp except for the
/// denormal range.
inline float fast_exp(float x) {
  const float xc = std::min(std::max(x, -87.0f), 88.7228f);  // n in [-126, 128] below
  // Round xc / ln2 to the nearest integer with the 1.5 * 2^23 trick: the low mantissa bits
  // of t then hold n.
  constexpr float kShift = 12582912.0f;
  const float t = xc * 1.44269504088896341f + kShift;
  const int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShift);
  const float nf = t - kShift;
  // ln2 split in two (Cody-Waite) so that r = xc - n ln2 keeps its low bits.
  float r = xc - nf * 0.693359375f;
  r = r + nf * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n = 2 * 2^(n-1): 2^(n-1) is a normal float for n in [-125, 128]; n = -126 gives the
  // bit pattern of +0 (the flush to zero).
  const float e = 2.0f * p * std::bit_cast<float>((n + 126) << 23);
  return x > 88.7228f ? std::numeric_limits<float>::infinity() : e;
}

/// The double version is std::exp (float64 runs are references, not hot paths).
inline double fast_exp(double x) { return std::exp(x); }

/// sigmoid(x) = 1 / (1 + exp(-x)), without a branch: for very negative x, exp(-x) is inf
/// and the result 0, never NaN.
template <class T>
inline T fast_sigmoid(T x) {
  return T(1) / (T(1) + fast_exp(-x));
}

}  // namespace lat::cpu
