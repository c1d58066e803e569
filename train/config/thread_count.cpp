// The thread count's choice (thread_count.h).
#include "train/config/thread_count.h"

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "train/config/config_types.h"

namespace lat {

std::optional<int> parse_omp_num_threads(const std::optional<std::string>& text) {
  if (!text || text->empty()) return std::nullopt;
  // libgomp reads the first entry of the list and allows blanks around it.
  std::string first = text->substr(0, text->find(','));
  const size_t begin = first.find_first_not_of(" \t"), last = first.find_last_not_of(" \t");
  first = begin == std::string::npos ? "" : first.substr(begin, last - begin + 1);
  int value = 0;
  const auto [end, error] = std::from_chars(first.data(), first.data() + first.size(), value);
  if (error != std::errc() || end != first.data() + first.size() || value < 1 || value > kMaxThreads)
    throw ConfigError("OMP_NUM_THREADS: expected an int in [1, " + std::to_string(kMaxThreads) +
                      "] (or a comma list of them), got '" + *text + "'");
  return value;
}

std::optional<int> omp_num_threads_from_env() {
  const char* value = std::getenv("OMP_NUM_THREADS");
  return parse_omp_num_threads(value ? std::optional<std::string>(value) : std::nullopt);
}

int choose_threads(const ThreadSources& sources) {
  if (sources.flag > 0) return sources.flag;
  if (sources.configured > 0) return sources.configured;
  if (sources.omp_num_threads) return *sources.omp_num_threads;
  return std::max(1, sources.fallback);
}

// OMP_NUM_THREADS is read only when it decides: an explicit count makes a bad value moot.
int training_threads(int64_t configured, int fallback) {
  if (configured > 0) return static_cast<int>(std::min<int64_t>(configured, kMaxThreads));
  return choose_threads({.flag = 0,
                         .configured = static_cast<int>(std::min<int64_t>(configured, kMaxThreads)),
                         .omp_num_threads = omp_num_threads_from_env(),
                         .fallback = fallback});
}

int inference_threads(int flag) {
  if (flag > 0) return flag;
  return choose_threads({.flag = flag,
                         .configured = 0,
                         .omp_num_threads = omp_num_threads_from_env(),
                         .fallback = omp_get_num_procs()});
}

}  // namespace lat
