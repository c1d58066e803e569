// Progress line rendering. The live form uses "\r" and the ANSI "erase to end of line".
#include "train/run/progress.h"

#include <unistd.h>

#include <cmath>

namespace lat {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = std::llround(seconds);
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%llds", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  return buf;
}

std::string format_progress(const ProgressInfo& info) {
  char speed[32];
  if (info.tokens_per_s >= 1e3)
    std::snprintf(speed, sizeof speed, "%.1fk", info.tokens_per_s / 1e3);
  else
    std::snprintf(speed, sizeof speed, "%.0f", info.tokens_per_s);
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.4f | lr %.2e | grad %.3g | %s tok/s | ETA %s",
                static_cast<long long>(info.step), static_cast<long long>(info.max_steps), info.loss, info.lr,
                info.grad_norm, speed, format_duration(info.eta_s).c_str());
  return buf;
}

ProgressLine::ProgressLine(std::FILE* stream) : ProgressLine(stream, ::isatty(::fileno(stream)) == 1) {}

ProgressLine::ProgressLine(std::FILE* stream, bool live) : stream_(stream), live_(live) {}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::update(const ProgressInfo& info, bool log_step) {
  if (!live_) {
    if (log_step) std::fprintf(stream_, "%s\n", format_progress(info).c_str());
    std::fflush(stream_);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!log_step && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  current_ = format_progress(info);
  std::fprintf(stream_, "\r%s\033[K", current_.c_str());
  std::fflush(stream_);
}

void ProgressLine::message(const std::string& text) {
  if (live_ && !current_.empty()) {
    std::fprintf(stream_, "\r\033[K%s\n%s", text.c_str(), current_.c_str());
  } else {
    std::fprintf(stream_, "%s\n", text.c_str());
  }
  std::fflush(stream_);
}

void ProgressLine::finish() {
  if (live_ && !current_.empty()) std::fprintf(stream_, "\n");
  current_.clear();
  std::fflush(stream_);
}

}  // namespace lat
