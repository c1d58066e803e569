// The trainer's optimizer: AdamW or SGD built from train.* keys, gradient clipping, and
// the transfer of its state to and from a checkpoint.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lat/tensor.h"
#include "layers/module.h"
#include "train/files/checkpoint.h"

namespace lat {

class Optimizer;
struct TrainConfig;

/// What clipping found: the global gradient norm before clipping (may be inf or NaN) and
/// whether it was finite (false: the step must be skipped).
struct GradNorm {
  double norm = 0.0;
  bool finite = true;
};

/// AdamW (train.optimizer adamw: betas, eps, weight_decay) or SGD with momentum (sgd:
/// momentum, weight_decay) over `params`; weight decay on matmul weights only
/// (optim/weight_decay.h).
class TrainOptimizer {
 public:
  /// Throws lat::Error on an unknown train.optimizer or invalid hyper-parameters.
  TrainOptimizer(const TrainConfig& train, const std::vector<NamedTensor>& params);
  ~TrainOptimizer();
  TrainOptimizer(const TrainOptimizer&) = delete;
  TrainOptimizer& operator=(const TrainOptimizer&) = delete;

  /// Global-norm clipping to max_norm (0 = off, the norm is still measured). The scale is
  /// applied by the next step() as it reads the gradients (the same bits as scaling them in
  /// place, one pass fewer); the gradients themselves are never changed.
  GradNorm clip_grad_norm(double max_norm);
  /// One update with learning rate `lr` (with the scale of the last clip_grad_norm), then
  /// the gradients are dropped.
  void step(double lr);
  /// Drops the gradients and the pending clip scale (a skipped step).
  void zero_grad();
  /// Completed updates.
  int64_t step_count() const;
  /// "adamw" or "sgd".
  std::string type() const;
  /// The weight-decay groups, one line each.
  std::string describe_groups() const;
  /// Scales the learning rate of parameter `name` (config lr_mult). Throws lat::Error on an
  /// unknown name.
  void set_lr_mult(const std::string& name, double mult);

  /// The state as handles to the live buffers, not copies (write them out before the next step).
  CheckpointOptimizer snapshot() const;
  /// Restores a snapshot bit for bit. Throws lat::Error on another optimizer type, an
  /// unknown parameter or buffer, or a shape mismatch.
  void restore(const CheckpointOptimizer& snapshot);

  /// ckpt.optimizer = snapshot().
  void save_to(Checkpoint& ckpt) const;
  /// restore() from ckpt.optimizer; throws lat::Error naming `source` when it holds no
  /// optimizer state, state of another optimizer type, or state restore() refuses (a tensor of
  /// another shape or dtype than its parameter, an unknown name), and ConfigError naming the
  /// parameter (and buffer) when a parameter of this optimizer has no state although the
  /// checkpoint's writer, whose train config is `writer`, kept state for every parameter
  /// (keeps_state, after at least one update): restoring the others would silently restart
  /// that one from fresh state.
  void load_from(const Checkpoint& ckpt, const TrainConfig& writer, const std::string& source);

  /// Whether an optimizer built from `train` holds state for every parameter from its first
  /// update on: AdamW (its moments), SGD with momentum (its buffer); plain SGD keeps none.
  static bool keeps_state(const TrainConfig& train);

 private:
  std::unique_ptr<Optimizer> optimizer_;
  double grad_scale_ = 1.0;  // from clip_grad_norm, for the next step
};

}  // namespace lat
