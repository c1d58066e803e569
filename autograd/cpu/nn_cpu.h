// CPU kernels of the fused neural-network ops (RMSNorm, softmax, log-softmax,
// cross-entropy). Each works on `rows` independent rows of `dim` contiguous elements
// (the last axis), parallel over rows with OpenMP; sums accumulate in double. Sums across
// rows (dweight, the cross-entropy total) run in row order whatever the thread count, so
// every thread count gives the same bits.
// T is float or double. Inputs are validated by the ops in autograd/ops_nn.cpp.
#pragma once
#include <cstdint>

namespace lat::cpu {

/// RMSNorm (Zhang & Sennrich 2019, eq. 4): y = x * rstd * weight with
/// rstd = 1 / sqrt(mean(x^2) + eps) per row. x, y: [rows, dim]; weight: [dim];
/// rstd: [rows] (saved for backward).
template <class T>
void rms_norm_forward(const T* x, const T* weight, int64_t rows, int64_t dim, double eps, T* y, double* rstd);

/// RMSNorm backward. With gw = g * weight and r = rstd of the row:
///   dx = r * gw - r^3 / dim * x * sum(gw * x),   dweight = sum over rows of g * x * r.
/// dx may be null (not needed); dweight may be null. dweight is overwritten.
template <class T>
void rms_norm_backward(const T* x, const T* weight, const double* rstd, const T* g, int64_t rows, int64_t dim, T* dx,
                       T* dweight);

/// The residual addition fused with the RMSNorm that reads it: sum = x + y, then
/// normed = rms_norm(sum) as rms_norm_forward (rstd of sum's rows), in one pass over each
/// row; the same bits as the addition followed by rms_norm_forward.
template <class T>
void add_rms_norm_forward(const T* x, const T* y, const T* weight, int64_t rows, int64_t dim, double eps, T* sum,
                          T* normed, double* rstd);

/// Backward of add_rms_norm_forward: the gradient of sum, dx = dsum + (rms_norm_backward's dx
/// for g = dnormed), which is also that of x and of y; dweight as rms_norm_backward. dsum is
/// the gradient from sum's other use (the residual stream); dweight may be null.
template <class T>
void add_rms_norm_backward(const T* sum, const T* weight, const double* rstd, const T* dsum, const T* dnormed,
                           int64_t rows, int64_t dim, T* dx, T* dweight);

/// y = exp(x - max) / sum(exp(x - max)) per row.
template <class T>
void softmax_forward(const T* x, int64_t rows, int64_t dim, T* y);

/// dx = y * (g - sum(g * y)) per row, from the saved output y.
template <class T>
void softmax_backward(const T* y, const T* g, int64_t rows, int64_t dim, T* dx);

/// y = x - max - log(sum(exp(x - max))) per row.
template <class T>
void log_softmax_forward(const T* x, int64_t rows, int64_t dim, T* y);

/// dx = g - exp(y) * sum(g) per row, from the saved output y.
template <class T>
void log_softmax_backward(const T* y, const T* g, int64_t rows, int64_t dim, T* dx);

/// Cross-entropy forward over logits [rows, dim] with targets [rows] (ids already checked
/// to lie in [0, dim) or equal ignore_index). Writes lse[r] = log-sum-exp of row r
/// (max-subtracted, so logits of magnitude 1e4 stay finite) and returns the sum over the
/// non-ignored rows of lse - logit[target]; `count` receives their number.
template <class T>
double cross_entropy_forward(const T* logits, const int64_t* targets, int64_t rows, int64_t dim,
                             int64_t ignore_index, double* lse, int64_t* count);

/// dlogits = scale * (softmax(logits) - onehot(target)) for non-ignored rows, 0 for
/// ignored rows. scale is the incoming gradient divided by the non-ignored count.
template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, const double* lse, int64_t rows, int64_t dim,
                            int64_t ignore_index, double scale, T* dlogits);

}  // namespace lat::cpu
