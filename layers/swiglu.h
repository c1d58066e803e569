// SwiGLU MLP (Shazeer 2020, "GLU Variants Improve Transformer"): the feed-forward half of
// every block, down_proj(silu(gate_proj x) * up_proj x).
#pragma once
#include <cstdint>

#include "layers/linear.h"

namespace lat {

/// Hidden width 2/3 * mlp_ratio * d_model rounded up to a multiple of 32 (DESIGN.md,
/// model.mlp_ratio), so that the parameter count matches a plain MLP of mlp_ratio * d_model.
int64_t swiglu_hidden_size(int64_t d_model, double mlp_ratio);
/// The hidden width of the model's MLPs: intermediate_size when > 0 (model.intermediate_size,
/// Hugging Face's name), else swiglu_hidden_size(d_model, mlp_ratio). Throws lat::Error as
/// swiglu_hidden_size, or for a negative intermediate_size.
int64_t swiglu_hidden_size(int64_t d_model, double mlp_ratio, int64_t intermediate_size);

/// Children gate_proj [hidden, d_model], up_proj [hidden, d_model], down_proj
/// [d_model, hidden], no biases (flash-linear-attention's GatedMLP names). down_proj is
/// drawn with out_init_std (GPT-2 scales output projections by 1/sqrt(2 n_layers)).
class SwiGLU : public Module {
 public:
  /// hidden: the width itself (swiglu_hidden_size gives the model's). Throws lat::Error for
  /// a non-positive d_model or hidden.
  SwiGLU(int64_t d_model, int64_t hidden, Generator& gen, double init_std = 0.02, double out_init_std = 0.02);

  /// x: [..., d_model] -> [..., d_model].
  Tensor forward(const Tensor& x) const;

  int64_t hidden_size() const { return gate_proj_->out_features(); }

 private:
  Linear* gate_proj_;
  Linear* up_proj_;
  Linear* down_proj_;
};

}  // namespace lat
