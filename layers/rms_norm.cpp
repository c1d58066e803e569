// RMSNorm module over the fused lat::rms_norm op.
#include "layers/rms_norm.h"

#include "lat/ops.h"

namespace lat {

RMSNorm::RMSNorm(int64_t dim, double eps) : eps_(eps) {
  LAT_CHECK(dim > 0, "RMSNorm: dim: expected a positive size, got " << dim);
  LAT_CHECK(eps > 0, "RMSNorm: eps: expected a positive value, got " << eps);
  weight_ = register_parameter("weight", Tensor::ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) const {
  LAT_CHECK(x.dim() >= 1 && x.size(-1) == dim(),
            "RMSNorm::forward: x: expected shape [..., " << dim() << "], got " << shape_str(x.shape()));
  return rms_norm(x, weight_, eps_);
}

}  // namespace lat
