// SwiGLU MLP from core ops.
#include "layers/swiglu.h"

#include <cmath>
#include <vector>

#include "lat/ops.h"

namespace lat {

int64_t swiglu_hidden_size(int64_t d_model, double mlp_ratio) {
  LAT_CHECK(d_model > 0, "swiglu_hidden_size: d_model: expected a positive size, got " << d_model);
  LAT_CHECK(mlp_ratio > 0, "swiglu_hidden_size: mlp_ratio: expected a positive value, got " << mlp_ratio);
  // The small tolerance keeps exact products such as 2/3 * 3 * 128 = 256 from rounding up
  // to the next multiple through floating-point error.
  double hidden = 2.0 * mlp_ratio * static_cast<double>(d_model) / 3.0;
  return 32 * static_cast<int64_t>(std::ceil(hidden / 32.0 - 1e-9));
}

int64_t swiglu_hidden_size(int64_t d_model, double mlp_ratio, int64_t intermediate_size) {
  LAT_CHECK(intermediate_size >= 0,
            "swiglu_hidden_size: intermediate_size: expected >= 0 (0 = from mlp_ratio), got " << intermediate_size);
  return intermediate_size > 0 ? intermediate_size : swiglu_hidden_size(d_model, mlp_ratio);
}

SwiGLU::SwiGLU(int64_t d_model, int64_t hidden, Generator& gen, double init_std, double out_init_std) {
  LAT_CHECK(d_model > 0 && hidden > 0,
            "SwiGLU: d_model, hidden: expected positive sizes, got " << d_model << ", " << hidden);
  gate_proj_ = &register_module("gate_proj", std::make_unique<Linear>(d_model, hidden, gen, init_std));
  up_proj_ = &register_module("up_proj", std::make_unique<Linear>(d_model, hidden, gen, init_std));
  down_proj_ = &register_module("down_proj", std::make_unique<Linear>(hidden, d_model, gen, out_init_std));
}

Tensor SwiGLU::forward(const Tensor& x) const {
  const std::vector<Tensor> gate_up = fused_linear_forward(x, {gate_proj_, up_proj_});
  return down_proj_->forward(swiglu(gate_up[0], gate_up[1]));
}

}  // namespace lat
