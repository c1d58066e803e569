// SIGINT/SIGTERM -> a stop request, and the watchdog that bounds how long a stop takes. The
// handler does only async-signal-safe things: one lock-free atomic, sem_post to wake the
// watchdog, and _exit for a second signal.
#include "train/run/signals.h"

#include <semaphore.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <utility>

namespace lat {
namespace {

std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
sem_t g_signal_arrived;  // posted by the handler: wakes the watchdog

/// What the main thread is doing, as the watchdog sees it.
struct Sections {
  std::mutex mutex;
  std::condition_variable changed;
  bool interruptible = false;  // inside an InterruptibleSection and not inside a write
  std::string what, consequence;
  bool scope_ending = false;  // the StopSignalScope ends: the watchdog returns
};
Sections g_sections;

const char* signal_name(int signal) { return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal"; }

extern "C" void record_stop_signal(int signal) {
  int none = 0;
  if (!g_stop_signal.compare_exchange_strong(none, signal)) {
    static const char line[] = "stopped at once by a second stop signal: no checkpoint of the step in progress\n";
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, line, sizeof(line) - 1);
    _exit(128 + signal);
  }
  sem_post(&g_signal_arrived);
}

// Sleeps until a signal arrives (or the scope ends), gives the run kStopGraceSeconds to reach a
// step boundary, then waits until it is inside interruptible compute, not a write, to end it.
void watch_for_stop() {
  while (sem_wait(&g_signal_arrived) != 0 && errno == EINTR) {
  }
  std::unique_lock lock(g_sections.mutex);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kStopGraceSeconds);
  if (g_sections.changed.wait_until(lock, deadline, [] { return g_sections.scope_ending; })) return;
  g_sections.changed.wait(lock, [] { return g_sections.scope_ending || g_sections.interruptible; });
  if (g_sections.scope_ending) return;
  const int signal = g_stop_signal.load();
  // A live progress line on a terminal has no newline yet.
  std::fprintf(stderr, "%sstopped by %s: %s was still running %d s after the signal; %s\n",
               isatty(STDERR_FILENO) ? "\n" : "", signal_name(signal), g_sections.what.c_str(), kStopGraceSeconds,
               g_sections.consequence.c_str());
  std::fflush(stderr);
  _exit(128 + signal);
}

}  // namespace

StopSignalScope::StopSignalScope() {
  g_stop_signal.store(0);
  sem_init(&g_signal_arrived, 0, 0);
  {
    const std::lock_guard lock(g_sections.mutex);
    g_sections.scope_ending = false;
  }
  watchdog_ = std::thread(watch_for_stop);
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: an interrupted write of metrics or a checkpoint resumes instead of failing
  // with EINTR.
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
}

StopSignalScope::~StopSignalScope() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  {
    const std::lock_guard lock(g_sections.mutex);
    g_sections.scope_ending = true;
  }
  g_sections.changed.notify_all();
  sem_post(&g_signal_arrived);
  watchdog_.join();
  sem_destroy(&g_signal_arrived);
}

int stop_signal() { return g_stop_signal.load(); }

InterruptibleSection::InterruptibleSection(std::string what, std::string consequence) {
  {
    const std::lock_guard lock(g_sections.mutex);
    previous_interruptible_ = g_sections.interruptible;
    previous_what_ = std::exchange(g_sections.what, std::move(what));
    previous_consequence_ = std::exchange(g_sections.consequence, std::move(consequence));
    g_sections.interruptible = true;
  }
  g_sections.changed.notify_all();
}

InterruptibleSection::~InterruptibleSection() {
  {
    const std::lock_guard lock(g_sections.mutex);
    g_sections.interruptible = previous_interruptible_;
    g_sections.what = std::move(previous_what_);
    g_sections.consequence = std::move(previous_consequence_);
  }
  g_sections.changed.notify_all();
}

UninterruptibleSection::UninterruptibleSection() {
  {
    const std::lock_guard lock(g_sections.mutex);
    previous_interruptible_ = std::exchange(g_sections.interruptible, false);
  }
  g_sections.changed.notify_all();
}

UninterruptibleSection::~UninterruptibleSection() {
  {
    const std::lock_guard lock(g_sections.mutex);
    g_sections.interruptible = previous_interruptible_;
  }
  g_sections.changed.notify_all();
}

}  // namespace lat
