// The public controls of include/lat/cuda.h, in every build (no-ops without CUDA).
#include "lat/cuda.h"

#include <atomic>

#ifdef LAT_WITH_CUDA
#include "autograd/cuda/cuda_memory.h"
#include "autograd/cuda/stream.h"
#endif

namespace lat::cuda {
namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

#ifdef LAT_WITH_CUDA
void synchronize(int index) {
  if (index < device_count()) synchronize_stream(index);
}
#else
void synchronize(int) {}
MemoryStats memory_stats(int) { return {}; }
void empty_cache() {}
#endif

}  // namespace lat::cuda
