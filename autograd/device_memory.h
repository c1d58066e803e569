// Allocation and copies on any device: the one place that switches on the backend.
#pragma once
#include <cstddef>

#include "lat/dtype.h"

namespace lat::detail {

/// Allocates nbytes on `device` (CPU: 64-byte aligned). Throws lat::Error on failure.
void* device_alloc(size_t nbytes, Device device);
void device_free(void* p, Device device);
/// Copies nbytes between any two devices (synchronous).
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace lat::detail
