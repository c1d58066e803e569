// The AdamW update on CUDA (optim/adamw.h has the formulas): one fused elementwise kernel
// per parameter, the step's scalars combined on the host in double.
#pragma once
#include <cstdint>

#include "lat/dtype.h"

namespace lat::optim_cuda {

/// The scalars of one step: decay_factor = 1 - lr*wd, step_size = lr / (1 - beta1^t),
/// inv_bc2_sqrt = 1 / sqrt(1 - beta2^t).
struct AdamWStep {
  double decay_factor = 1.0, beta1 = 0.9, beta2 = 0.99, step_size = 0.0, inv_bc2_sqrt = 1.0, eps = 1e-8;
};

/// In place on device `device`: m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2,
/// p = p * decay_factor - step_size * m / (sqrt(v) * inv_bc2_sqrt + eps). n elements of
/// dtype f32 or f64 (the scalars are rounded to it, as on the CPU).
void adamw_update(DType dtype, void* p, const void* g, void* m, void* v, int64_t n, const AdamWStep& s, int device);

}  // namespace lat::optim_cuda
