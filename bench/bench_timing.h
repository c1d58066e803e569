// Timing helpers shared by the benchmarks that time single calls: at one thread in the
// process's CPU time (leaving out the time other processes hold the core), with more in
// wall time.
#pragma once
#include <time.h>

#include <algorithm>
#include <vector>

#include "lat/lat.h"

namespace lat::bench {

/// Seconds on the clock calls are timed with: process CPU time at one OpenMP thread, else
/// the monotonic wall clock.
inline double now_seconds() {
  timespec t{};
  clock_gettime(lat::get_num_threads() == 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/// The upper median of `v` (v non-empty).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Seconds per call of `f`, over `calls` calls.
template <class F>
double seconds_per_call(F&& f, int calls) {
  const double start = now_seconds();
  for (int i = 0; i < calls; ++i) f();
  return (now_seconds() - start) / calls;
}

}  // namespace lat::bench
