// Finite-difference gradient checks (float64), the oracle for every backward pass.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// Per-input relative error ||analytic - numeric|| / ||numeric|| (Frobenius).
struct GradCheckResult {
  std::vector<double> rel_error;  // one per input that requires grad, in input order
  double max_rel_error = 0.0;
};

/// Checks the tape's gradients of f against central differences
/// (f(x + eps) - f(x - eps)) / (2 eps), element by element. The scalar objective is
/// sum(f(inputs) * w) with w drawn once from N(0,1) with `seed`, so every output element
/// contributes. Inputs must be f64; only those with requires_grad are checked.
/// When ||numeric|| < 1e-12 the absolute error is reported instead.
GradCheckResult grad_check(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                           const std::vector<Tensor>& inputs, double eps = 1e-6,
                           uint64_t seed = 0);

/// ||a - b|| / ||b|| over all elements (any float dtypes, same numel); ||a - b|| when
/// ||b|| == 0. The accuracy measure of DESIGN.md.
double relative_error(const Tensor& a, const Tensor& b);

}  // namespace lat
