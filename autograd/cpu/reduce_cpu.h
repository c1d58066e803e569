// CPU loops of the reductions. A reduction over one axis views the contiguous input as
// [outer, n, inner] (n: the reduced axis) and writes [outer, inner]. Sums accumulate in
// double, so f32 sums of long rows do not lose precision.
//
// Every sum runs in one order that depends on the shape alone: the reduced axis in blocks
// of kSumBlock entries, each block from its first entry to its last, then the block sums
// in block order. Threads only decide who computes which block or which outputs, so any
// thread count gives the same bits (an OpenMP reduction or per-thread partial sums would
// not: their order follows the thread count).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "autograd/cpu/elementwise_cpu.h"

namespace lat::cpu {

/// Entries of the reduced axis per block of a sum (see the file comment).
constexpr int64_t kSumBlock = 4096;

/// Sum of x[0..n) in double, in the block order of the file comment, on this thread.
template <class T>
double blocked_sum(const T* x, int64_t n) {
  double total = 0.0;
  for (int64_t begin = 0; begin < n; begin += kSumBlock) {
    const int64_t end = std::min(n, begin + kSumBlock);
    double acc = 0.0;
    for (int64_t i = begin; i < end; ++i) acc += x[i];
    total += acc;
  }
  return total;
}

/// blocked_sum(x, n) with the blocks spread over the threads: the same bits.
template <class T>
double sum_all(const T* x, int64_t n) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  if (blocks <= 1 || n <= kParallelMin) return blocked_sum(x, n);
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for
  for (int64_t b = 0; b < blocks; ++b) partial[b] = blocked_sum(x + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

/// y[o, i] = scale * sum_j x[o, j, i]; x: [outer, n, inner], y: [outer, inner]. Each sum in
/// the block order of the file comment, whichever branch computes it.
template <class T>
void sum_axis(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, double scale) {
  const int64_t total = outer * n * inner;
  if (inner == 1 && outer < 4 * omp_get_max_threads()) {  // few long rows: parallel inside each
    for (int64_t o = 0; o < outer; ++o) y[o] = static_cast<T>(sum_all(x + o * n, n) * scale);
    return;
  }
  if (inner == 1) {  // many contiguous rows: one row per task
#pragma omp parallel for if (total > kParallelMin)
    for (int64_t o = 0; o < outer; ++o) y[o] = static_cast<T>(blocked_sum(x + o * n, n) * scale);
    return;
  }
  const int64_t m = outer * inner, blocks = (n + kSumBlock - 1) / kSumBlock;
  if (total > kParallelMin && blocks > 1 && m < 64 * omp_get_max_threads()) {
    // Few outputs but a long axis ([N, D] -> [D] for a bias gradient): one task per block
    // of the axis, summing into its own partial row; the partial rows are added in order.
    std::vector<double> partial(static_cast<size_t>(blocks * m), 0.0);
#pragma omp parallel for
    for (int64_t b = 0; b < blocks; ++b) {
      double* p = partial.data() + b * m;
      for (int64_t j = b * kSumBlock; j < std::min(n, (b + 1) * kSumBlock); ++j)
        for (int64_t o = 0; o < outer; ++o) {
          const T* src = x + (o * n + j) * inner;
          double* dst = p + o * inner;
          for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
        }
    }
    for (int64_t k = 0; k < m; ++k) {
      double acc = 0.0;
      for (int64_t b = 0; b < blocks; ++b) acc += partial[b * m + k];
      y[k] = static_cast<T>(acc * scale);
    }
    return;
  }
  // Many outputs: each (outer, block of inner) is one task summing rows of the block.
  constexpr int64_t kColumns = 256;
  const int64_t column_blocks = (inner + kColumns - 1) / kColumns;
#pragma omp parallel for collapse(2) if (total > kParallelMin)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t cb = 0; cb < column_blocks; ++cb) {
      const int64_t i0 = cb * kColumns, len = std::min(kColumns, inner - i0);
      double acc[kColumns] = {};
      for (int64_t begin = 0; begin < n; begin += kSumBlock) {
        double block[kColumns] = {};
        for (int64_t j = begin; j < std::min(n, begin + kSumBlock); ++j) {
          const T* src = x + (o * n + j) * inner + i0;
          for (int64_t i = 0; i < len; ++i) block[i] += src[i];
        }
        for (int64_t i = 0; i < len; ++i) acc[i] += block[i];
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
