// Linear forward: flatten the leading dimensions so the product is a single GEMM.
#include "layers/linear.h"

#include "lat/ops.h"

namespace lat {

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, double init_std, bool bias)
    : in_features_(in_features), out_features_(out_features) {
  LAT_CHECK(in_features > 0 && out_features > 0,
            "Linear: expected positive sizes, got in " << in_features << ", out " << out_features);
  weight_ = register_parameter("weight", Tensor::randn({out_features, in_features}, gen, DType::f32, 0.0, init_std));
  if (bias) bias_ = register_parameter("bias", Tensor::zeros({out_features}));
}

Tensor Linear::forward(const Tensor& x) const {
  LAT_CHECK(x.dim() >= 1 && x.size(-1) == in_features_,
            "Linear::forward: x: expected shape [..., " << in_features_ << "], got " << shape_str(x.shape()));
  Shape out_shape = x.shape();
  out_shape.back() = out_features_;
  // weight is [out, in] (torch's layout): y = x weight^T.
  constexpr bool kTransposeX = false, kTransposeWeight = true;
  Tensor y = matmul(x.reshape({-1, in_features_}), weight_, kTransposeX, kTransposeWeight);
  if (bias_.defined()) y = y + bias_;
  return y.reshape(out_shape);
}

}  // namespace lat
