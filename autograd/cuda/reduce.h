// CUDA kernels of the reductions (plain-struct launch API). A reduction over one axis views
// the contiguous input as [outer, n, inner] (n: the reduced axis), as the CPU loops of
// autograd/cpu/reduce_cpu.h do. Sums accumulate in double. f32 and f64.
#pragma once
#include <cstdint>

#include "lat/dtype.h"

namespace lat::cuda {

struct AxisArgs {
  DType dtype = DType::f32;
  int64_t outer = 1, n = 1, inner = 1;
  double scale = 1.0;
  int device = 0;
};

/// y[o, i] = scale * sum_j x[o, j, i]; x: [outer, n, inner], y: [outer, inner].
void sum_axis(const AxisArgs& a, const void* x, void* y);

/// y[o, j, i] = scale * g[o, i]: the backward of sum_axis.
void expand_axis(const AxisArgs& a, const void* g, void* y);

/// y[o, i] = max_j x[o, j, i], arg[o, i] = the first j reaching it (a NaN wins). n > 0.
void max_axis(const AxisArgs& a, const void* x, void* y, int64_t* arg);

/// dx[o, j, i] = g[o, i] where j = arg[o, i], else 0: the backward of max_axis.
void max_axis_backward(const AxisArgs& a, const void* g, const int64_t* arg, void* dx);

/// sum of x[i]^2 over n elements of dtype f32 or f64, in double (synchronizes: the result
/// is read back to the host). For gradient-norm clipping.
double sum_of_squares(const void* x, DType dtype, int64_t n, int device);

}  // namespace lat::cuda
