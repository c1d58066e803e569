// Integer flag values of the benchmarks, checked for form, overflow and range so that a typo
// is one error line instead of a crash or a silently different run.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <cstdio>
#include <string>

#include "lat/lat.h"

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

/// Takes the flags of every benchmark that times single calls: when argv[i] is --threads N
/// (sets lat's OpenMP thread count) or --repeats N (into `repeats`, 1..1000), consumes it and
/// its value and returns true. Throws std::invalid_argument for a missing or bad value.
inline bool take_threads_or_repeats(int argc, char** argv, int& i, int& repeats) {
  const std::string arg = argv[i];
  if (arg != "--threads" && arg != "--repeats") return false;
  if (i + 1 >= argc) throw std::invalid_argument(arg + ": expected a value");
  const int64_t value = parse_int_flag(argv[++i], arg.c_str(), 1, arg == "--threads" ? kMaxThreads : 1000);
  if (arg == "--threads")
    lat::set_num_threads(static_cast<int>(value));
  else
    repeats = static_cast<int>(value);
  return true;
}

/// For a flag the benchmark does not know: prints `usage` to stdout and returns exit code 0
/// for --help or -h, else one error line naming `arg` with the usage, returning 2.
inline int help_or_usage_error(const std::string& arg, const char* usage) {
  if (arg == "--help" || arg == "-h") {
    std::printf("%s\n", usage);
    return 0;
  }
  std::fprintf(stderr, "error: %s: unknown flag or missing value (%s)\n", arg.c_str(), usage);
  return 2;
}

/// The whole command line of a benchmark whose only flags are --threads and --repeats: returns
/// nothing when the benchmark should run, else the exit code to return (0 after printing
/// `usage` for --help; 2 after one error line for anything else).
inline std::optional<int> parse_threads_and_repeats_only(int argc, char** argv, int& repeats, const char* usage) {
  try {
    for (int i = 1; i < argc; ++i)
      if (!take_threads_or_repeats(argc, argv, i, repeats)) return help_or_usage_error(argv[i], usage);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace lat::bench
