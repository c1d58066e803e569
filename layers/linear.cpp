// Linear forward: flatten the leading dimensions so the product is a single GEMM; several
// Linears on one input share one tape node (shared_input_linear).
#include "layers/linear.h"

#include "lat/ops.h"
#include "layers/fused/shared_input_linear.h"

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

std::vector<Tensor> fused_linear_forward(const Tensor& x, const std::vector<const Linear*>& layers) {
  LAT_CHECK(!layers.empty(), "fused_linear_forward: layers: expected at least one Linear, got none");
  if (layers.size() == 1) return {layers[0]->forward(x)};
  const int64_t in = layers[0]->in_features();
  std::vector<Tensor> weights;
  for (size_t i = 0; i < layers.size(); ++i) {
    LAT_CHECK(layers[i]->in_features() == in, "fused_linear_forward: layers[" << i << "]: expected in_features " << in
                                                                              << " like layers[0], got "
                                                                              << layers[i]->in_features());
    weights.push_back(layers[i]->weight());
  }
  LAT_CHECK(x.dim() >= 1 && x.size(-1) == in,
            "fused_linear_forward: x: expected shape [..., " << in << "], got " << shape_str(x.shape()));
  std::vector<Tensor> outs = shared_input_linear(x.reshape({-1, in}), weights);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i]->bias().defined()) outs[i] = outs[i] + layers[i]->bias();
    Shape shape = x.shape();
    shape.back() = layers[i]->out_features();
    outs[i] = outs[i].reshape(shape);
  }
  return outs;
}

}  // namespace lat
