// The residual addition of a pre-norm block fused with the RMSNorm that reads its sum: each
// block adds its mixer's and its MLP's output to the residual stream, and the next norm
// reads the sum at once.
#pragma once

#include "lat/tensor.h"

namespace lat {

/// The residual stream after an addition: sum = x + y, and normed = rms_norm(sum, weight, eps).
struct AddRmsNorm {
  Tensor sum, normed;
};

/// sum = x + y and normed = rms_norm(sum, weight, eps) (lat::rms_norm) as one tape node, in
/// one pass over each row on the CPU, with the same bits as add followed by rms_norm. Its
/// backward gives x and y the same gradient, d(sum) plus rms_norm's dx for d(normed), in one
/// pass (the tape would add them in a separate one), and weight rms_norm's dweight. On CUDA
/// it is the composition of add and rms_norm. x, y: [..., D], same shape, dtype (f32 or f64)
/// and device; weight [D]. Throws lat::Error for other shapes, dtypes or devices, or eps < 0.
AddRmsNorm add_rms_norm(const Tensor& x, const Tensor& y, const Tensor& weight, double eps = 1e-6);

}  // namespace lat
