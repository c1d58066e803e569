// The number of OpenMP threads a command computes with, chosen one way for `lat train`,
// `lat eval` and `lat generate`: what the command was asked for (eval's and generate's
// --threads; train.threads > 0, from the config file or --set), else OMP_NUM_THREADS (the
// standard OpenMP variable, set by a user or a launcher), else the command's default (all
// cores, divided among the ranks of a host in training). An explicit request beats the
// environment as omp_set_num_threads beats OMP_NUM_THREADS in OpenMP itself, so that a
// `--set train.threads=1` is never undone by a variable exported long ago. Eval and generate
// pass no configured count: a checkpoint's train.threads sized the training machine.
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
  int flag = 0;                        ///< --threads
  int configured = 0;                  ///< train.threads
  std::optional<int> omp_num_threads;  ///< OMP_NUM_THREADS (parse_omp_num_threads)
  int fallback = 1;                    ///< the command's default, >= 1
};

/// The first given of flag, configured, OMP_NUM_THREADS, fallback (a count >= 1).
int choose_threads(const ThreadSources& sources);

/// The threads `lat train` uses: `configured` (train.threads, 0: not given), else
/// OMP_NUM_THREADS, else `fallback` (Distributed::default_threads). Throws ConfigError for a bad
/// OMP_NUM_THREADS.
int training_threads(int64_t configured, int fallback);

/// The threads eval and generate use: `flag` (0: not given), else OMP_NUM_THREADS, else all
/// the cores this process may run on. Throws ConfigError for a bad OMP_NUM_THREADS.
int inference_threads(int flag);

}  // namespace lat
