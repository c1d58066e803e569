// AlignedBuffer's block cache (see aligned_buffer.h).
#include "autograd/cpu/aligned_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "lat/error.h"

namespace lat::cpu {
namespace {

// Freed blocks by size, reused for the same size.
struct BlockCache {
  std::mutex mutex;
  std::multimap<size_t, void*> free_blocks;
  size_t cached_bytes = 0;
};

constexpr size_t kMaxCachedBytes = size_t(2) << 30;
constexpr size_t kHugePage = size_t(2) << 20;

BlockCache& block_cache() {
  // Never destroyed: buffers held by static objects may be freed after main returns.
  static BlockCache* cache = new BlockCache;
  return *cache;
}

void* acquire_block(size_t bytes) {
  BlockCache& cache = block_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.free_blocks.find(bytes);
    if (it != cache.free_blocks.end()) {
      void* p = it->second;
      cache.free_blocks.erase(it);
      cache.cached_bytes -= bytes;
      return p;
    }
  }
  bool huge = bytes >= kHugePage;
  void* p = std::aligned_alloc(huge ? kHugePage : 64, bytes);
  LAT_CHECK(p != nullptr, "AlignedBuffer: out of memory allocating a workspace of " << bytes << " bytes");
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

void release_block(void* p, size_t bytes) {
  BlockCache& cache = block_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (cache.cached_bytes + bytes <= kMaxCachedBytes) {
      cache.free_blocks.emplace(bytes, p);
      cache.cached_bytes += bytes;
      return;
    }
  }
  std::free(p);
}

}  // namespace

AlignedBuffer::AlignedBuffer(int64_t n) : size_(n) {
  size_t granule = static_cast<size_t>(n) * sizeof(float) >= kHugePage ? kHugePage : 64;
  bytes_ = std::max<size_t>(granule, (static_cast<size_t>(n) * sizeof(float) + granule - 1) / granule * granule);
  data_ = static_cast<float*>(acquire_block(bytes_));
}

AlignedBuffer::~AlignedBuffer() {
  if (data_) release_block(data_, bytes_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
      bytes_(std::exchange(other.bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) release_block(data_, bytes_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace lat::cpu
