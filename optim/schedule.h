// Learning-rate schedule: linear warmup, then cosine, linear or constant decay.
#pragma once
#include <cstdint>
#include <string>

namespace lat {

/// The learning rate of optimizer step `step` (the first step is 1; `step` counts the
/// steps completed once this one is done, as metrics.jsonl does). With W = warmup,
/// M = max_steps, lr_max = lr:
///   step <= W:               lr_max * step / W                 (linear warmup; step W reaches lr_max)
///   W < step <= M, with progress p = (step - W) / (M - W) in (0, 1]:
///     cosine:   min_lr + 0.5 * (lr_max - min_lr) * (1 + cos(pi * p))   (Loshchilov & Hutter 2017, SGDR)
///     linear:   lr_max - (lr_max - min_lr) * p
///     constant: lr_max
///   step > M:  min_lr (cosine, linear) or lr_max (constant)
/// So cosine and linear end exactly at min_lr at step M. When M <= W the run ends inside
/// the warmup ramp.
struct LrSchedule {
  std::string kind = "cosine";  ///< "cosine", "linear" or "constant"
  double lr = 1e-3;             ///< peak learning rate (train.lr)
  double min_lr = 1e-4;         ///< final learning rate (train.min_lr)
  int64_t warmup = 100;         ///< warmup steps (train.warmup)
  int64_t max_steps = 2000;     ///< schedule horizon (train.max_steps)

  /// Throws lat::Error (naming the train.* key) on an unknown kind, lr <= 0, min_lr < 0,
  /// min_lr > lr, warmup < 0 or max_steps < 1.
  void validate() const;
  /// The learning rate at `step` >= 1 (validates first).
  double at(int64_t step) const;
};

}  // namespace lat
