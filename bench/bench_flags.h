// Integer flag values of the benchmarks, checked for form, overflow and range so that a typo
// is one error line instead of a crash or a silently different run.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace lat::bench {

/// The most OpenMP threads a benchmark accepts (train.threads' bound).
inline constexpr int64_t kMaxThreads = 1024;

/// `text` as a decimal integer in [min, max]. Throws std::invalid_argument naming `flag`,
/// the range and the text otherwise (empty, trailing characters, out of long long's range).
inline int64_t parse_int_flag(const std::string& text, const char* flag, int64_t min, int64_t max) {
  char* rest = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &rest, 10);
  if (text.empty() || *rest != '\0' || errno == ERANGE || value < min || value > max)
    throw std::invalid_argument(std::string(flag) + ": expected an integer in " + std::to_string(min) + ".." +
                                std::to_string(max) + ", got '" + text + "'");
  return value;
}

}  // namespace lat::bench
