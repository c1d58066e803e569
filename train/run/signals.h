// Stop on Ctrl-C (SIGINT) and SIGTERM within a bounded time. The handler only records the
// signal; the trainer polls it after each optimizer step, writes a checkpoint and exits 0. A
// step (or eval) can last hours at a large data.block_size, so a watchdog thread ends the
// process when the run is still inside such compute kStopGraceSeconds after the signal: no
// checkpoint of the unfinished step, the last one stays. It never cuts a write marked
// uninterruptible (a checkpoint, a metrics line): it waits for its end. A second signal ends
// the process at once.
#pragma once
#include <csignal>
#include <string>
#include <thread>

namespace lat {

/// Seconds between a stop signal and the watchdog cutting the compute still running.
inline constexpr int kStopGraceSeconds = 3;

/// While alive, SIGINT and SIGTERM request a stop instead of ending the process, and the
/// watchdog runs; a second signal exits at once with 128 + its number (130 for Ctrl-C). The
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
  std::thread watchdog_;
};

/// The signal number that requested a stop, 0 when none.
int stop_signal();

/// Marks compute of unbounded length (a training step, an eval) for its lifetime. When a stop
/// signal's watchdog finds the run inside it kStopGraceSeconds after the signal, it prints
/// "stopped by SIG...: <what> was still running 3 s after the signal; <consequence>" to stderr
/// and ends the process with exit code 128 + the signal.
class InterruptibleSection {
 public:
  InterruptibleSection(std::string what, std::string consequence);
  ~InterruptibleSection();
  InterruptibleSection(const InterruptibleSection&) = delete;
  InterruptibleSection& operator=(const InterruptibleSection&) = delete;

 private:
  bool previous_interruptible_;
  std::string previous_what_, previous_consequence_;
};

/// Marks a write that must never be cut (a checkpoint, a metrics line) for its lifetime, also
/// inside an InterruptibleSection: the watchdog waits for its end.
class UninterruptibleSection {
 public:
  UninterruptibleSection();
  ~UninterruptibleSection();
  UninterruptibleSection(const UninterruptibleSection&) = delete;
  UninterruptibleSection& operator=(const UninterruptibleSection&) = delete;

 private:
  bool previous_interruptible_;
};

}  // namespace lat
