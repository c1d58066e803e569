// The caching allocator and copies of the CUDA backend (see cuda_memory.h).
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/cuda_memory.h"
#include "autograd/cuda/stream.h"

namespace lat::cuda {
namespace {

// Blocks are rounded to 512 bytes below 1 MiB and to 2 MiB above, so that the repeated
// shapes of a training step hit the cache; a cached block up to 1/8 larger than the
// request is reused.
size_t round_size(size_t nbytes) {
  if (nbytes < (1u << 20)) return (nbytes + 511) / 512 * 512;
  return (nbytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
}

struct Cache {
  std::mutex mutex;
  std::multimap<size_t, void*> free_blocks;      // size -> block
  std::unordered_map<void*, size_t> block_sizes;  // every block we own
  size_t in_use = 0, cached = 0;
};

Cache& cache_for(int index) {
  // Never destroyed: tensors held by static objects may be freed after main returns.
  static std::mutex caches_mutex;
  static std::map<int, Cache>* caches = new std::map<int, Cache>();
  std::lock_guard<std::mutex> lock(caches_mutex);
  return (*caches)[index];
}

bool poison_new_blocks() {
  static const bool poison = [] {
    const char* env = std::getenv("LAT_POISON");
    return env != nullptr && env[0] == '1';
  }();
  return poison;
}

// Frees every cached block of `cache` (its mutex held by the caller).
void free_cached(Cache& cache) {
  for (auto& [size, block] : cache.free_blocks) {
    cudaFree(block);
    cache.block_sizes.erase(block);
  }
  cache.free_blocks.clear();
  cache.cached = 0;
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

void* allocate(size_t nbytes, int index) {
  Cache& cache = cache_for(index);
  const size_t size = round_size(nbytes == 0 ? 1 : nbytes);
  DeviceGuard guard(index);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.free_blocks.lower_bound(size);
    if (it != cache.free_blocks.end() && it->first <= size + size / 8) {
      p = it->second;
      cache.cached -= it->first;
      cache.in_use += it->first;
      cache.free_blocks.erase(it);
    } else {
      cudaError_t err = cudaMalloc(&p, size);
      if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // give the cached blocks back to the driver and retry once
        free_cached(cache);
        err = cudaMalloc(&p, size);
      }
      LAT_CHECK(err == cudaSuccess, "cuda allocate: cudaMalloc of " << size << " bytes on cuda:" << index
                                                                    << " failed: " << cudaGetErrorString(err));
      cache.block_sizes[p] = size;
      cache.in_use += size;
    }
  }
  if (poison_new_blocks()) LAT_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, size, current_stream(index)));
  return p;
}

void release(void* p, int index) {
  if (p == nullptr) return;
  Cache& cache = cache_for(index);
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.block_sizes.find(p);
  if (it == cache.block_sizes.end()) return;
  cache.free_blocks.emplace(it->second, p);
  cache.in_use -= it->second;
  cache.cached += it->second;
}

void empty_cache() {
  for (int index = 0; index < device_count(); ++index) {
    Cache& cache = cache_for(index);
    std::lock_guard<std::mutex> lock(cache.mutex);
    free_cached(cache);
  }
}

MemoryStats memory_stats(int index) {
  Cache& cache = cache_for(index);
  std::lock_guard<std::mutex> lock(cache.mutex);
  return {cache.in_use, cache.cached};
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  // Unified addressing lets cudaMemcpyDefault pick the direction. The copy is queued on the
  // stream of the device that receives the data (or sends it, for a device-to-host copy),
  // after the kernels that produced it.
  if (src_device.is_cuda() && dst_device.is_cuda() && src_device.index != dst_device.index)
    synchronize_stream(src_device.index);  // the source's kernels may run on another stream
  const int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
  DeviceGuard guard(index);
  cudaStream_t stream = current_stream(index);
  LAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
  // Host memory is pageable and may be reused by the caller at once, and a source block on
  // another device may be reused by that device's stream: wait for the copy.
  if (dst_device.is_cpu() || src_device.is_cpu() || src_device.index != dst_device.index)
    LAT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace lat::cuda
