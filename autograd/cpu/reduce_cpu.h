// CPU loops of the reductions. A reduction over one axis views the contiguous input as
// [outer, n, inner] (n: the reduced axis) and writes [outer, inner]. Sums accumulate in
// double, so f32 sums of long rows do not lose precision.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "autograd/cpu/elementwise_cpu.h"

namespace lat::cpu {

/// Sum of x[0..n), accumulated in double.
template <class T>
double sum_all(const T* x, int64_t n) {
  double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) acc += x[i];
  return acc;
}

/// y[o, i] = scale * sum_j x[o, j, i]; x: [outer, n, inner], y: [outer, inner].
template <class T>
void sum_axis(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, double scale) {
  const int64_t total = outer * n * inner;
  if (inner == 1 && outer < 4 * omp_get_max_threads()) {  // few long rows: parallel inside each
    for (int64_t o = 0; o < outer; ++o) y[o] = static_cast<T>(sum_all(x + o * n, n) * scale);
    return;
  }
  if (inner == 1) {  // many contiguous rows: one row per task
#pragma omp parallel for if (total > kParallelMin)
    for (int64_t o = 0; o < outer; ++o) {
      double acc = 0.0;
      const T* row = x + o * n;
      for (int64_t j = 0; j < n; ++j) acc += row[j];
      y[o] = static_cast<T>(acc * scale);
    }
    return;
  }
  const int64_t m = outer * inner;
  const int threads = omp_get_max_threads();
  if (total > kParallelMin && m < 64 * threads) {
    // Few outputs but a long axis ([N, D] -> [D] for a bias gradient): split the reduced
    // axis across threads, each summing into its own partial row, then combine.
    std::vector<double> partial(static_cast<size_t>(threads) * m, 0.0);
#pragma omp parallel
    {
      double* p = partial.data() + static_cast<size_t>(omp_get_thread_num()) * m;
#pragma omp for
      for (int64_t j = 0; j < n; ++j)
        for (int64_t o = 0; o < outer; ++o) {
          const T* src = x + (o * n + j) * inner;
          double* dst = p + o * inner;
          for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
        }
    }
    for (int64_t k = 0; k < m; ++k) {
      double acc = 0.0;
      for (int t = 0; t < threads; ++t) acc += partial[static_cast<size_t>(t) * m + k];
      y[k] = static_cast<T>(acc * scale);
    }
    return;
  }
  // Many outputs: each (outer, block of inner) is one task summing rows of the block.
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(2) if (total > kParallelMin)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t i0 = blk * kBlock, len = std::min(kBlock, inner - i0);
      double acc[kBlock] = {};
      for (int64_t j = 0; j < n; ++j) {
        const T* src = x + (o * n + j) * inner + i0;
        for (int64_t i = 0; i < len; ++i) acc[i] += src[i];
      }
      for (int64_t i = 0; i < len; ++i) y[o * inner + i0 + i] = static_cast<T>(acc[i] * scale);
    }
}

/// y[o, j, i] = scale * g[o, i]: the backward of sum_axis (broadcast along the axis).
template <class T>
void expand_axis(const T* g, T* y, int64_t outer, int64_t n, int64_t inner, double scale) {
  const T s = static_cast<T>(scale);
#pragma omp parallel for collapse(2) if (outer * n * inner > kParallelMin)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      const T* src = g + o * inner;
      T* dst = y + (o * n + j) * inner;
      for (int64_t i = 0; i < inner; ++i) dst[i] = src[i] * s;
    }
}

/// y[o, i] = max_j x[o, j, i] and arg[o, i] = the first j reaching it (a NaN wins, so it
/// propagates). n must be positive.
template <class T>
void max_axis(const T* x, T* y, int64_t* arg, int64_t outer, int64_t n, int64_t inner) {
#pragma omp parallel for collapse(2) if (outer * n * inner > kParallelMin)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T* src = x + o * n * inner + i;
      T best = src[0];
      int64_t best_j = 0;
      for (int64_t j = 1; j < n && best == best; ++j) {
        const T v = src[j * inner];
        if (v > best || v != v) {
          best = v;
          best_j = j;
        }
      }
      y[o * inner + i] = best;
      arg[o * inner + i] = best_j;
    }
}

/// dx = 0 except dx[o, arg[o, i], i] = g[o, i]: the backward of max_axis.
template <class T>
void max_axis_backward(const T* g, const int64_t* arg, T* dx, int64_t outer, int64_t n, int64_t inner) {
  const int64_t total = outer * n * inner;
#pragma omp parallel for if (total > kParallelMin)
  for (int64_t k = 0; k < total; ++k) dx[k] = T(0);
#pragma omp parallel for collapse(2) if (total > kParallelMin)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) dx[(o * n + arg[o * inner + i]) * inner + i] = g[o * inner + i];
}

}  // namespace lat::cpu
