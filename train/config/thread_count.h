// The number of OpenMP threads a command computes with, chosen one way for `lat train`,
// `lat eval` and `lat generate`: an explicit --threads flag, else OMP_NUM_THREADS (the
// standard OpenMP variable, set by a user or a launcher for this process), else the
// configured count (train.threads > 0), else the command's default (all cores, divided
// among the ranks of a host in training). Eval and generate pass no configured count: a
// checkpoint's train.threads sized the training machine, not this one.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace lat {

/// The most threads a flag, OMP_NUM_THREADS or train.threads may ask for.
constexpr int kMaxThreads = 1024;

/// The thread count OMP_NUM_THREADS asks for: `text` is its value (nullopt or empty: unset,
/// as libgomp reads it); a comma list gives one count per nesting level, of which the first
/// is the one lat uses. Throws ConfigError naming OMP_NUM_THREADS when the first entry is
/// not an int in [1, kMaxThreads].
std::optional<int> parse_omp_num_threads(const std::optional<std::string>& text);

/// parse_omp_num_threads of this process's OMP_NUM_THREADS.
std::optional<int> omp_num_threads_from_env();

/// The sources of a thread count, each 0 (or nullopt) when not given.
struct ThreadSources {
  int flag = 0;                          ///< --threads
  std::optional<int> omp_num_threads;    ///< OMP_NUM_THREADS (parse_omp_num_threads)
  int configured = 0;                    ///< train.threads
  int fallback = 1;                      ///< the command's default, >= 1
};

/// The first given of flag, OMP_NUM_THREADS, configured, fallback (a count >= 1).
int choose_threads(const ThreadSources& sources);

/// The threads `lat train` uses: OMP_NUM_THREADS, else `configured` (train.threads, 0: not
/// given), else `fallback` (Distributed::default_threads). Throws ConfigError for a bad
/// OMP_NUM_THREADS.
int training_threads(int64_t configured, int fallback);

/// The threads eval and generate use: `flag` (0: not given), else OMP_NUM_THREADS, else all
/// the cores this process may run on. Throws ConfigError for a bad OMP_NUM_THREADS.
int inference_threads(int flag);

}  // namespace lat
