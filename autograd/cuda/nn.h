// CUDA kernels of the fused neural-network ops and the embedding (plain-struct launch API):
// RMSNorm, softmax, log-softmax and cross-entropy over rows of the last axis, with the
// formulas of autograd/cpu/nn_cpu.h (sums in double, rstd and log-sum-exp kept in double),
// and the embedding gather / scatter-add. f32 and f64.
#pragma once
#include <cstdint>

#include "lat/dtype.h"

namespace lat::cuda {

/// `rows` rows of `dim` contiguous elements on device `device`.
struct RowsArgs {
  DType dtype = DType::f32;
  int64_t rows = 0, dim = 0;
  int device = 0;
};

/// y = x * rstd * weight, rstd[r] = 1 / sqrt(mean(x_r^2) + eps). weight: [dim].
void rms_norm_forward(const RowsArgs& a, const void* x, const void* weight, double eps, void* y, double* rstd);
/// dx = rstd * g * weight - rstd^3 / dim * x * sum(g * weight * x) (skipped when dx is
/// null); dweight = sum over rows of g * x * rstd (skipped when null; overwritten).
void rms_norm_backward(const RowsArgs& a, const void* x, const void* weight, const double* rstd, const void* g,
                       void* dx, void* dweight);

void softmax_forward(const RowsArgs& a, const void* x, void* y);
/// dx = y * (g - sum(g * y)).
void softmax_backward(const RowsArgs& a, const void* y, const void* g, void* dx);
void log_softmax_forward(const RowsArgs& a, const void* x, void* y);
/// dx = g - exp(y) * sum(g).
void log_softmax_backward(const RowsArgs& a, const void* y, const void* g, void* dx);

/// Cross-entropy of logits [rows, dim] against targets [rows] (already checked to lie in
/// [0, dim) or equal ignore_index): lse[r] = log-sum-exp of row r, and the one-element
/// `loss` = sum over the `count` non-ignored rows of (lse - logit[target]) / count, or 0
/// when count == 0.
void cross_entropy_forward(const RowsArgs& a, const void* logits, const int64_t* targets, int64_t ignore_index,
                           int64_t count, double* lse, void* loss);
/// dlogits = grad_loss[0] * inv_count * (softmax - onehot) on non-ignored rows, 0 on
/// ignored ones. grad_loss is the one-element upstream gradient (on the device).
void cross_entropy_backward(const RowsArgs& a, const void* logits, const int64_t* targets, const double* lse,
                            int64_t ignore_index, const void* grad_loss, double inv_count, void* dlogits);

/// out[i, :] = weight[ids[i], :] for i < count; weight [num, dim] (ids already checked).
void embedding_forward(DType dtype, const void* weight, const int64_t* ids, int64_t count, int64_t dim, void* out,
                       int device);
/// dweight [num, dim] = 0, then dweight[ids[i], :] += g[i, :] (atomic adds: repeated ids
/// sum in an unspecified order).
void embedding_backward(DType dtype, const void* g, const int64_t* ids, int64_t count, int64_t dim, int64_t num,
                        void* dweight, int device);

}  // namespace lat::cuda
