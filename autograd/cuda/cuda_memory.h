// CUDA device memory behind lat::Storage: a caching allocator over cudaMalloc
// (no managed memory) and synchronous copies.
#pragma once
#include <cstddef>

#include "lat/dtype.h"

namespace lat::cuda {

/// Visible CUDA devices (0 when the driver reports none).
int device_count();
/// Returns a block of at least nbytes on device `index`, reusing a cached block of the
/// same rounded size when one is free. Throws lat::Error when cudaMalloc fails.
void* allocate(size_t nbytes, int index);
/// Returns a block to the cache (never to the driver while the process runs).
void release(void* p, int index);
/// Frees every cached block (e.g. before measuring memory).
void empty_cache();
/// Synchronous copy between host and device or device and device.
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace lat::cuda
