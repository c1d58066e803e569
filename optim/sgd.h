// SGD with momentum, PyTorch semantics (torch.optim.SGD, dampening 0, no Nesterov).
#pragma once
#include "optim/optimizer.h"

namespace lat {

struct SgdOptions {
  double momentum = 0.9;      ///< 0 = plain SGD (no state)
  double weight_decay = 0.0;  ///< L2 added to the gradient, matmul weights only (applies_weight_decay)
};

/// Per step t, for each parameter p with gradient g:
///   d = g + weight_decay * p            (decay group only)
///   buf = d at its first step, else buf = momentum * buf + d    (state "momentum_buffer")
///   p -= lr * buf                       (p -= lr * d when momentum is 0)
class Sgd : public Optimizer {
 public:
  /// Throws lat::Error when momentum is outside [0, 1) or weight_decay < 0.
  Sgd(std::vector<NamedParameter> params, SgdOptions options);

  std::string type() const override { return "sgd"; }
  std::vector<std::string> buffer_names() const override { return {"momentum_buffer"}; }
  std::string describe_groups() const override;
  const SgdOptions& options() const { return options_; }

 protected:
  void update(const std::vector<ParamUpdate>& updates, double grad_scale) override;

 private:
  SgdOptions options_;
  std::vector<bool> decay_;
};

}  // namespace lat
