// Graceful stop on Ctrl-C (SIGINT) and SIGTERM: the handler only records the signal; the
// trainer polls it after each optimizer step, finishes that step, writes a checkpoint and
// exits 0. The handlers are one-shot (SA_RESETHAND): a second Ctrl-C kills the process at
// once, for when a step or the checkpoint write hangs.
#pragma once
#include <csignal>

namespace lat {

/// While alive, SIGINT and SIGTERM request a stop instead of ending the process; the
/// previous handlers come back on destruction. Resets the recorded signal on construction.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

/// The signal number that requested a stop, 0 when none.
int stop_signal();

}  // namespace lat
