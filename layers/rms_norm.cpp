// RMSNorm module over the fused lat::rms_norm op.
#include "layers/rms_norm.h"

#include "lat/ops.h"

namespace lat {

RMSNorm::RMSNorm(int64_t dim, double eps, NormWeight weight_kind) : eps_(eps), weight_kind_(weight_kind) {
  LAT_CHECK(dim > 0, "RMSNorm: dim: expected a positive size, got " << dim);
  LAT_CHECK(eps > 0, "RMSNorm: eps: expected a positive value, got " << eps);
  weight_ = register_parameter("weight", weight_kind == NormWeight::plain ? Tensor::ones({dim}) : Tensor::zeros({dim}));
}

Tensor RMSNorm::scale() const { return weight_kind_ == NormWeight::plain ? weight_ : weight_ + 1.0; }

Tensor RMSNorm::forward(const Tensor& x) const {
  LAT_CHECK(x.dim() >= 1 && x.size(-1) == dim(),
            "RMSNorm::forward: x: expected shape [..., " << dim() << "], got " << shape_str(x.shape()));
  return rms_norm(x, scale(), eps_);
}

AddRmsNorm RMSNorm::forward_sum(const Tensor& x, const Tensor& y) const { return add_rms_norm(x, y, scale(), eps_); }

}  // namespace lat
