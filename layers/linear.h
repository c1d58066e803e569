// Linear: y = x W^T (+ b), the projection of every layer. Weight [out, in] as in
// torch.nn.Linear (DESIGN.md: linear weights are [out, in]).
#pragma once
#include <cstdint>
#include <vector>

#include "layers/module.h"

namespace lat {

/// Parameters `weight` [out_features, in_features] (drawn from N(0, init_std^2), GPT-2
/// style) and, when `bias`, `bias` [out_features] (zeros).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, double init_std = 0.02, bool bias = false);

  /// x: [..., in_features] f32 -> [..., out_features]. One GEMM over all leading
  /// dimensions. Throws lat::Error when the last dimension is not in_features.
  Tensor forward(const Tensor& x) const;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  const Tensor& weight() const { return weight_; }
  /// Undefined when the layer has no bias.
  const Tensor& bias() const { return bias_; }

 private:
  int64_t in_features_, out_features_;
  Tensor weight_, bias_;
};

/// The outputs of Linear layers that all read the same x, out[i] = layers[i]->forward(x), as
/// one tape node (shared_input_linear): x is read, and in bf16 rounded, once for all the
/// products, and the backward accumulates dx in one buffer instead of adding one gradient per
/// layer. The weights and biases stay the layers' own parameters, so names, shapes,
/// initialization and checkpoints are those of separate layers; on the CPU the outputs and
/// every gradient are those of layers[i]->forward(x) called in list order, bit for bit.
/// x: [..., in_features], f32 or f64. Throws lat::Error for an empty list, layers of
/// different in_features, or x not [..., in_features].
std::vector<Tensor> fused_linear_forward(const Tensor& x, const std::vector<const Linear*>& layers);

}  // namespace lat
