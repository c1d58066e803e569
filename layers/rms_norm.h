// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * weight over the last axis.
#pragma once
#include <cstdint>

#include "layers/module.h"

namespace lat {

/// Parameter `weight` [dim], initialized to ones.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);

  /// x: [..., dim] -> same shape; one fused tape node (lat::rms_norm). Throws lat::Error
  /// when the last dimension is not dim.
  Tensor forward(const Tensor& x) const;

  int64_t dim() const { return weight_.size(0); }
  double eps() const { return eps_; }
  const Tensor& weight() const { return weight_; }

 private:
  double eps_;
  Tensor weight_;
};

}  // namespace lat
