// Runs a computation at several OpenMP thread counts, for the tests that a result does not
// depend on the thread count (bit for bit: the training losses are reproducible across
// thread counts only if every op's are).
#pragma once
#include <vector>

#include "lat/ops.h"

namespace lat::testing {

/// f() run with 1, 2 and 3 OpenMP threads, in that order (3: an odd split, and more
/// threads than cores on a 2-core machine); the thread count is restored afterwards.
template <class F>
auto at_thread_counts(F f) -> std::vector<decltype(f())> {
  const int before = get_num_threads();
  std::vector<decltype(f())> out;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    out.push_back(f());
  }
  set_num_threads(before);
  return out;
}

}  // namespace lat::testing
