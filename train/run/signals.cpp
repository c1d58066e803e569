// SIGINT/SIGTERM -> a stop request. The handler writes one lock-free atomic: the only
// async-signal-safe thing it needs to do.
#include "train/run/signals.h"

#include <atomic>

namespace lat {
namespace {

std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void record_stop_signal(int signal) { g_stop_signal.store(signal); }

}  // namespace

StopSignalScope::StopSignalScope() {
  g_stop_signal.store(0);
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  // One-shot: a second signal takes the default action. SA_RESTART: an interrupted write of
  // metrics or a checkpoint resumes instead of failing with EINTR.
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
}

StopSignalScope::~StopSignalScope() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

int stop_signal() { return g_stop_signal.load(); }

}  // namespace lat
