// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * scale over the last axis,
// where scale is the weight itself or, zero-centred, 1 + weight.
#pragma once
#include <cstdint>

#include "layers/fused/add_rms_norm.h"
#include "layers/module.h"

namespace lat {

/// How the weight scales the normalized input: plain (scale = weight, initialized to ones;
/// flash-linear-attention, Llama) or zero_centered (scale = 1 + weight, initialized to zeros;
/// Qwen3-Next and Qwen3.5 store their norms so, and weight decay then pulls towards 1).
enum class NormWeight { plain, zero_centered };

/// Parameter `weight` [dim], initialized so that the scale is 1.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, NormWeight weight_kind = NormWeight::plain);

  /// x: [..., dim] -> same shape; the fused lat::rms_norm tape node (zero-centred: on the
  /// scale 1 + weight). Throws lat::Error when the last dimension is not dim.
  Tensor forward(const Tensor& x) const;

  /// The residual addition fused with this norm: {x + y, forward(x + y)} from one tape node
  /// (add_rms_norm), the same values as the addition then forward(). x, y: [..., dim], same
  /// shape. Throws lat::Error as add_rms_norm.
  AddRmsNorm forward_sum(const Tensor& x, const Tensor& y) const;

  int64_t dim() const { return weight_.size(0); }
  double eps() const { return eps_; }
  NormWeight weight_kind() const { return weight_kind_; }
  const Tensor& weight() const { return weight_; }
  /// The scale the normalized input is multiplied by: weight, or 1 + weight (recorded on the tape).
  Tensor scale() const;

 private:
  double eps_;
  NormWeight weight_kind_;
  Tensor weight_;
};

}  // namespace lat
