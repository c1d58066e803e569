// CUDA device memory behind lat::Storage: a caching allocator over cudaMalloc (no managed
// memory) and copies between host and device. The public controls (memory_stats,
// empty_cache) are declared in include/lat/cuda.h.
#pragma once
#include <cstddef>

#include "lat/cuda.h"
#include "lat/dtype.h"

namespace lat::cuda {

/// Visible CUDA devices (0 when the driver reports none or is absent).
int device_count();
/// Returns a block of at least nbytes on device `index`, reusing a cached block when one of
/// a close size is free. With LAT_POISON=1 in the environment the block is filled with
/// 0xFF bytes (NaN as f32 and f64), so a kernel that leaves an output element unwritten
/// fails the tests. Throws lat::Error when cudaMalloc fails even after emptying the cache.
void* allocate(size_t nbytes, int index);
/// Returns a block to the cache (never to the driver while the process runs). Work already
/// queued on the device's stream may still use it; see stream.h for why that is safe.
void release(void* p, int index);
/// Copies nbytes between host and device or between devices. Returns once the data is in
/// place at `dst` when dst is host memory; device-to-device copies are queued in order.
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace lat::cuda
