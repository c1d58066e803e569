// Controls of the CUDA backend. Every function exists in every build: without CUDA (or
// without a device) the queries report nothing and the actions do nothing.
#pragma once
#include <cstddef>

namespace lat::cuda {

/// Lets f32 matrix products on CUDA (cuBLAS) use TF32 tensor cores: about 10 bits of
/// mantissa in the products, several times faster. Off by default, so CUDA results match
/// the CPU within f32 rounding.
void set_allow_tf32(bool allow);
bool allow_tf32();

/// Blocks until all work queued on device `index` has finished; rethrows the first
/// asynchronous error as lat::Error. For timing and before reading device memory by hand.
void synchronize(int index = 0);

/// Bytes of device `index` held by lat's caching allocator: in use by tensors, and cached
/// (freed by tensors, kept for reuse).
struct MemoryStats {
  size_t in_use = 0;
  size_t cached = 0;
};
MemoryStats memory_stats(int index = 0);

/// Returns every cached (unused) block of every device to the driver.
void empty_cache();

}  // namespace lat::cuda
