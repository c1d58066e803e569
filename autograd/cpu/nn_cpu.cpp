// Row-wise OpenMP kernels of RMSNorm, softmax, log-softmax and cross-entropy. The
// formulas (and their derivations) are documented in nn_cpu.h beside each declaration.
#include "autograd/cpu/nn_cpu.h"

#include <algorithm>
#include <cmath>

#include "autograd/cpu/fast_exp.h"
#include "autograd/cpu/lane_sum.h"

namespace lat::cpu {
namespace {

// Below this many elements a single thread is faster than forking.
constexpr int64_t kParallelElements = 1 << 14;

template <class T>
T row_max(const T* x, int64_t dim) {
  T m = x[0];
  for (int64_t j = 1; j < dim; ++j) m = std::max(m, x[j]);
  return m;
}

/// log(sum(exp(x - m))) + m for one row. The exps are fast_exp's, written in chunks to a
/// buffer where they vectorize (std::exp is a libm call per element), and each chunk is summed
/// by lane_sum rather than through one chained add. In f32 each exp(x - m) <= 1 is within
/// 2.5e-7 of exp relatively (test_fast_exp), or flushed to 0 below 2^-125; the sum, whose
/// largest term is 1, is then within 2.5e-7 relatively (plus its rounding in double), and the
/// log-sum-exp within 2.5e-7 absolutely.
template <class T>
double row_log_sum_exp(const T* x, int64_t dim) {
  const T m = row_max(x, dim);
  constexpr int64_t kChunk = 256;
  T e[kChunk];
  double s = 0.0;
  for (int64_t begin = 0; begin < dim; begin += kChunk) {
    const int64_t n = std::min(kChunk, dim - begin);
    for (int64_t j = 0; j < n; ++j) e[j] = fast_exp(x[begin + j] - m);
    s += lane_sum(n, [&](int64_t j) { return static_cast<double>(e[j]); });
  }
  return static_cast<double>(m) + std::log(s);
}

/// One row of rms_norm_forward over the values x(j), j < dim: y = x * rstd * weight; returns
/// rstd. x is a function so that add_rms_norm_forward can pass the sum it also stores,
/// without reading back the row it has just written.
template <class T, class Row>
double rms_norm_row(const Row& x, const T* weight, int64_t dim, double eps, T* y) {
  const double ss = lane_sum(dim, [&](int64_t j) {
    const double xj = x(j);
    return xj * xj;
  });
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
  const T rs = static_cast<T>(inv);
  for (int64_t j = 0; j < dim; ++j) y[j] = x(j) * rs * weight[j];
  return inv;
}

/// rms_norm_backward; with `dresidual` (not null) its rows are added to dx's, dx = dresidual + dx_norm.
template <class T>
void rms_norm_backward_rows(const T* x, const T* weight, const double* rstd, const T* g, const T* dresidual,
                            int64_t rows, int64_t dim, T* dx, T* dweight) {
  const bool parallel = rows * dim > kParallelElements;
  if (dx) {
#pragma omp parallel for if (parallel)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * dim;
      const T* gr = g + r * dim;
      const double rs = rstd[r];
      const double dot =
          lane_sum(dim, [&](int64_t j) { return static_cast<double>(gr[j]) * weight[j] * xr[j]; });
      const T a = static_cast<T>(rs), b = static_cast<T>(rs * rs * rs * dot / static_cast<double>(dim));
      T* dxr = dx + r * dim;
      if (dresidual == nullptr) {
        for (int64_t j = 0; j < dim; ++j) dxr[j] = a * gr[j] * weight[j] - b * xr[j];
      } else {
        // The sum in the order the tape adds a residual's gradients: the later use's first.
        const T* dres = dresidual + r * dim;
        for (int64_t j = 0; j < dim; ++j) {
          const T d = a * gr[j] * weight[j] - b * xr[j];
          dxr[j] = dres[j] + d;
        }
      }
    }
  }
  if (dweight) {
    // Threads split the columns, and each column sums its rows in row order: the order,
    // and so the bits, do not depend on the thread count. Each block passes over all rows:
    // 32 columns (four vectors of double accumulators) need half the passes of 16, and ran
    // in half the time.
    constexpr int64_t kColumns = 32;
    const int64_t column_blocks = (dim + kColumns - 1) / kColumns;
#pragma omp parallel for if (parallel)
    for (int64_t cb = 0; cb < column_blocks; ++cb) {
      const int64_t j0 = cb * kColumns, len = std::min(kColumns, dim - j0);
      double acc[kColumns] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * dim + j0;
        const T* gr = g + r * dim + j0;
        const double rs = rstd[r];
        for (int64_t j = 0; j < len; ++j) acc[j] += static_cast<double>(gr[j]) * xr[j] * rs;
      }
      for (int64_t j = 0; j < len; ++j) dweight[j0 + j] = static_cast<T>(acc[j]);
    }
  }
}

}  // namespace

template <class T>
void rms_norm_forward(const T* x, const T* weight, int64_t rows, int64_t dim, double eps, T* y, double* rstd) {
#pragma omp parallel for if (rows * dim > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    rstd[r] = rms_norm_row([xr](int64_t j) { return xr[j]; }, weight, dim, eps, y + r * dim);
  }
}

template <class T>
void rms_norm_backward(const T* x, const T* weight, const double* rstd, const T* g, int64_t rows, int64_t dim, T* dx,
                       T* dweight) {
  rms_norm_backward_rows(x, weight, rstd, g, static_cast<const T*>(nullptr), rows, dim, dx, dweight);
}

template <class T>
void add_rms_norm_forward(const T* x, const T* y, const T* weight, int64_t rows, int64_t dim, double eps, T* sum,
                          T* normed, double* rstd) {
#pragma omp parallel for if (rows * dim > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const T* yr = y + r * dim;
    T* sr = sum + r * dim;
    for (int64_t j = 0; j < dim; ++j) sr[j] = xr[j] + yr[j];
    rstd[r] = rms_norm_row([xr, yr](int64_t j) { return xr[j] + yr[j]; }, weight, dim, eps, normed + r * dim);
  }
}

template <class T>
void add_rms_norm_backward(const T* sum, const T* weight, const double* rstd, const T* dsum, const T* dnormed,
                           int64_t rows, int64_t dim, T* dx, T* dweight) {
  rms_norm_backward_rows(sum, weight, rstd, dnormed, dsum, rows, dim, dx, dweight);
}

template <class T>
void softmax_forward(const T* x, int64_t rows, int64_t dim, T* y) {
#pragma omp parallel for if (rows * dim > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    T* yr = y + r * dim;
    const T m = row_max(xr, dim);
    double s = 0.0;
    for (int64_t j = 0; j < dim; ++j) {
      yr[j] = std::exp(xr[j] - m);
      s += yr[j];
    }
    const T inv = static_cast<T>(1.0 / s);
    for (int64_t j = 0; j < dim; ++j) yr[j] *= inv;
  }
}

template <class T>
void softmax_backward(const T* y, const T* g, int64_t rows, int64_t dim, T* dx) {
#pragma omp parallel for if (rows * dim > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * dim;
    const T* gr = g + r * dim;
    T* dxr = dx + r * dim;
    double dot = 0.0;
    for (int64_t j = 0; j < dim; ++j) dot += static_cast<double>(gr[j]) * yr[j];
    const T d = static_cast<T>(dot);
    for (int64_t j = 0; j < dim; ++j) dxr[j] = yr[j] * (gr[j] - d);
  }
}

template <class T>
void log_softmax_forward(const T* x, int64_t rows, int64_t dim, T* y) {
#pragma omp parallel for if (rows * dim > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    T* yr = y + r * dim;
    const double lse = row_log_sum_exp(xr, dim);
    for (int64_t j = 0; j < dim; ++j) yr[j] = static_cast<T>(xr[j] - lse);
  }
}

template <class T>
void log_softmax_backward(const T* y, const T* g, int64_t rows, int64_t dim, T* dx) {
#pragma omp parallel for if (rows * dim > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * dim;
    const T* gr = g + r * dim;
    T* dxr = dx + r * dim;
    double s = 0.0;
    for (int64_t j = 0; j < dim; ++j) s += gr[j];
    const T gs = static_cast<T>(s);
    for (int64_t j = 0; j < dim; ++j) dxr[j] = gr[j] - std::exp(yr[j]) * gs;
  }
}

template <class T>
double cross_entropy_forward(const T* logits, const int64_t* targets, int64_t rows, int64_t dim,
                             int64_t ignore_index, double* lse, int64_t* count) {
#pragma omp parallel for if (rows * dim > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) lse[r] = row_log_sum_exp(logits + r * dim, dim);
  // Summed in row order on one thread (an OpenMP reduction's order follows the thread count).
  double total = 0.0;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index) continue;
    total += lse[r] - static_cast<double>(logits[r * dim + targets[r]]);
    ++n;
  }
  *count = n;
  return total;
}

template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, const double* lse, int64_t rows, int64_t dim,
                            int64_t ignore_index, double scale, T* dlogits) {
#pragma omp parallel for if (rows * dim > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    T* dr = dlogits + r * dim;
    if (targets[r] == ignore_index) {
      std::fill(dr, dr + dim, T(0));
      continue;
    }
    const T* xr = logits + r * dim;
    const T s = static_cast<T>(scale);
    // exp(x - lse) <= 1: the shift by the row's log-sum-exp keeps it finite for any x.
    // fast_exp: within 2.5e-7 relatively of exp in f32 (row_log_sum_exp), std::exp in f64.
    for (int64_t j = 0; j < dim; ++j) dr[j] = s * fast_exp(static_cast<T>(xr[j] - lse[r]));
    dr[targets[r]] -= s;
  }
}

#define LAT_NN_CPU_INSTANTIATE(T)                                                                                     \
  template void rms_norm_forward<T>(const T*, const T*, int64_t, int64_t, double, T*, double*);                       \
  template void rms_norm_backward<T>(const T*, const T*, const double*, const T*, int64_t, int64_t, T*, T*);          \
  template void add_rms_norm_forward<T>(const T*, const T*, const T*, int64_t, int64_t, double, T*, T*, double*);     \
  template void add_rms_norm_backward<T>(const T*, const T*, const double*, const T*, const T*, int64_t, int64_t, T*, \
                                         T*);                                                                         \
  template void softmax_forward<T>(const T*, int64_t, int64_t, T*);                                                   \
  template void softmax_backward<T>(const T*, const T*, int64_t, int64_t, T*);                                        \
  template void log_softmax_forward<T>(const T*, int64_t, int64_t, T*);                                               \
  template void log_softmax_backward<T>(const T*, const T*, int64_t, int64_t, T*);                                    \
  template double cross_entropy_forward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, double*, int64_t*);   \
  template void cross_entropy_backward<T>(const T*, const int64_t*, const double*, int64_t, int64_t, int64_t, double, \
                                          T*);

LAT_NN_CPU_INSTANTIATE(float)
LAT_NN_CPU_INSTANTIATE(double)

}  // namespace lat::cpu
