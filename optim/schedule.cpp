// Learning-rate schedule values (formulas in schedule.h).
#include "optim/schedule.h"

#include <cmath>
#include <numbers>

#include "lat/error.h"

namespace lat {

void LrSchedule::validate() const {
  LAT_CHECK(kind == "cosine" || kind == "linear" || kind == "constant",
            "LrSchedule: train.schedule: expected cosine, linear or constant, got '" << kind << "'");
  LAT_CHECK(lr > 0.0, "LrSchedule: train.lr: expected > 0, got " << lr);
  LAT_CHECK(min_lr >= 0.0 && min_lr <= lr,
            "LrSchedule: train.min_lr: expected a value in [0, train.lr = " << lr << "], got " << min_lr);
  LAT_CHECK(warmup >= 0, "LrSchedule: train.warmup: expected >= 0, got " << warmup);
  LAT_CHECK(max_steps >= 1, "LrSchedule: train.max_steps: expected >= 1, got " << max_steps);
}

double LrSchedule::at(int64_t step) const {
  validate();
  LAT_CHECK(step >= 1, "LrSchedule::at: step: expected >= 1 (the first optimizer step is 1), got " << step);
  if (step <= warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup);
  if (kind == "constant") return lr;
  if (step >= max_steps) return min_lr;
  double progress = static_cast<double>(step - warmup) / static_cast<double>(max_steps - warmup);
  if (kind == "linear") return lr - (lr - min_lr) * progress;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace lat
