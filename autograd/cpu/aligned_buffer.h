// The CPU kernels' workspace allocator: uninitialized, 64-byte aligned float arrays from a
// process-wide cache of freed blocks.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lat::cpu {

/// An uninitialized, 64-byte aligned float array for kernel workspaces and saved
/// activations (no autograd, no poisoning: kernels write every element they read).
/// Blocks come from a process-wide cache of freed blocks of the same size (up to 2 GiB
/// kept): the chunk kernels need a dozen buffers of the same sizes at every step, and
/// fresh pages from the OS cost more (faults and zeroing) than the kernels' own work.
/// Large blocks ask for transparent huge pages. Thread-safe. Throws lat::Error when the
/// allocation fails.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  /// n floats (n >= 0).
  explicit AlignedBuffer(int64_t n);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  float* data_ = nullptr;
  int64_t size_ = 0;
  size_t bytes_ = 0;  // the block's size in the cache
};

}  // namespace lat::cpu
