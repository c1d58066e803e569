// What train() (trainer.h) takes besides the config, and what it returns: where logs go, and
// how the run ended.
#pragma once
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

namespace lat {

/// Where progress and log messages go.
struct TrainOptions {
  std::FILE* log = stderr;
  /// Rewrite one progress line in place; default: when `log` is a terminal.
  std::optional<bool> live_progress;
};

/// How a run ended.
struct TrainSummary {
  int64_t start_step = 0;      // the checkpoint step it resumed from (0: a fresh run)
  int64_t step = 0;            // completed optimizer steps at the end
  std::string end_reason;      // "max_steps", "stop_at", "SIGINT", "SIGTERM", or "nothing to do"
  int64_t skipped_steps = 0;   // steps skipped in this process for a non-finite gradient norm
  double val_loss = std::numeric_limits<double>::quiet_NaN();  // whole val split at max_steps; NaN otherwise
  std::string checkpoint;      // the last checkpoint written, empty when none
  double all_reduce_seconds = 0.0;  // time in the gradient all-reduce over several ranks (0 with one)
};

}  // namespace lat
