// AdamW: Adam with decoupled weight decay (Loshchilov & Hutter 2019, "Decoupled Weight
// Decay Regularization", Algorithm 2), with PyTorch's (torch.optim.AdamW) conventions.
#pragma once
#include "optim/optimizer.h"

namespace lat {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.1;  ///< decoupled; matmul weights only (applies_weight_decay)
};

/// Per step t (1 for the first), for each parameter p with gradient g:
///   p  = p - lr * weight_decay * p                   (decay group only; decoupled)
///   m  = beta1 * m + (1 - beta1) * g                 (state "exp_avg", zeros at start)
///   v  = beta2 * v + (1 - beta2) * g^2               (state "exp_avg_sq")
///   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
/// eps is added after the bias correction of sqrt(v), as PyTorch does. t is the
/// optimizer's step count: a parameter that got no gradient at some steps still uses the
/// global t (PyTorch keeps a per-parameter t; they agree whenever every parameter has a
/// gradient at every step, as in training).
class AdamW : public Optimizer {
 public:
  /// Throws lat::Error when a beta is outside [0, 1), eps <= 0 or weight_decay < 0.
  AdamW(std::vector<NamedParameter> params, AdamWOptions options);

  std::string type() const override { return "adamw"; }
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::string describe_groups() const override;
  const AdamWOptions& options() const { return options_; }

 protected:
  void update(const std::vector<ParamUpdate>& updates, double grad_scale) override;
  bool supports(const Device& device) const override;

 private:
  AdamWOptions options_;
  std::vector<bool> decay_;
};

}  // namespace lat
