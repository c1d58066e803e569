// The live progress line on stderr: on a terminal one line rewritten in place (at most ten
// times a second); otherwise (a log file, a pipe) a plain line every log_every steps.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace lat {

/// What one progress line shows.
struct ProgressInfo {
  int64_t step = 0;
  int64_t max_steps = 0;
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  double tokens_per_s = 0.0;
  double eta_s = 0.0;  // seconds to max_steps at the current speed
};

/// "step 120/2000 | loss 2.3456 | lr 1.00e-03 | grad 0.53 | 21.3k tok/s | ETA 1m32s".
std::string format_progress(const ProgressInfo& info);
/// "1m32s", "2h05m", "45s".
std::string format_duration(double seconds);

/// Writes progress lines and log messages to `stream` (stderr by default).
class ProgressLine {
 public:
  /// `live`: rewrite one line in place (a terminal); default: whether `stream` is a TTY.
  explicit ProgressLine(std::FILE* stream = stderr);
  ProgressLine(std::FILE* stream, bool live);
  ~ProgressLine();

  /// Called after every step; `log_step` marks the steps that a plain (non-live) output prints.
  void update(const ProgressInfo& info, bool log_step);
  /// A message on a line of its own (the live line is cleared first and redrawn after).
  void message(const std::string& text);
  /// Ends the live line (a newline after it), so later output starts on a fresh line.
  void finish();

 private:
  std::FILE* stream_;
  bool live_;
  std::string current_;  // the live line shown, empty when none
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace lat
