#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/cuda_memory.h"

namespace lat::cuda {
namespace {

// Blocks are rounded to 512 bytes below 1 MiB and to 2 MiB above, so that the
// repeated shapes of a training step hit the cache.
size_t round_size(size_t nbytes) {
  if (nbytes < (1u << 20)) return (nbytes + 511) / 512 * 512;
  return (nbytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
}

struct Cache {
  std::mutex mutex;
  std::multimap<size_t, void*> free_blocks;          // size -> block
  std::unordered_map<void*, size_t> block_sizes;      // every block we own
};

Cache& cache_for(int index) {
  static std::map<int, Cache> caches;
  static std::mutex caches_mutex;
  std::lock_guard<std::mutex> lock(caches_mutex);
  return caches[index];
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
  size_t size = round_size(nbytes == 0 ? 1 : nbytes);
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.free_blocks.find(size);
  if (it != cache.free_blocks.end()) {
    void* p = it->second;
    cache.free_blocks.erase(it);
    return p;
  }
  LAT_CUDA_CHECK(cudaSetDevice(index));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation) {
    // Give cached blocks back to the driver and retry once.
    cudaGetLastError();
    for (auto& [s, block] : cache.free_blocks) {
      cudaFree(block);
      cache.block_sizes.erase(block);
    }
    cache.free_blocks.clear();
    err = cudaMalloc(&p, size);
  }
  LAT_CHECK(err == cudaSuccess, "cuda allocate: cudaMalloc of " << size << " bytes on cuda:" << index
                                                                << " failed: " << cudaGetErrorString(err));
  cache.block_sizes[p] = size;
  return p;
}

void release(void* p, int index) {
  if (p == nullptr) return;
  Cache& cache = cache_for(index);
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.block_sizes.find(p);
  if (it == cache.block_sizes.end()) return;
  cache.free_blocks.emplace(it->second, p);
}

void empty_cache() {
  for (int index = 0; index < device_count(); ++index) {
    Cache& cache = cache_for(index);
    std::lock_guard<std::mutex> lock(cache.mutex);
    for (auto& [size, block] : cache.free_blocks) {
      cudaFree(block);
      cache.block_sizes.erase(block);
    }
    cache.free_blocks.clear();
  }
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  cudaMemcpyKind kind = cudaMemcpyDefault;  // unified addressing picks the direction
  if (dst_device.is_cuda()) LAT_CUDA_CHECK(cudaSetDevice(dst_device.index));
  else if (src_device.is_cuda()) LAT_CUDA_CHECK(cudaSetDevice(src_device.index));
  LAT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, kind));
}

}  // namespace lat::cuda
