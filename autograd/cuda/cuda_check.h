// Error checking for every CUDA runtime call and kernel launch: a failure throws lat::Error
// naming the call, the file and line, and CUDA's message.
#pragma once
#include <cuda_runtime.h>

#include "lat/error.h"

/// Wraps a CUDA runtime call: LAT_CUDA_CHECK(cudaMemsetAsync(p, 0, n, stream));
#define LAT_CUDA_CHECK(call)                                                              \
  do {                                                                                    \
    cudaError_t lat_cuda_err_ = (call);                                                   \
    LAT_CHECK(lat_cuda_err_ == cudaSuccess,                                               \
              "CUDA call " #call " failed: " << cudaGetErrorString(lat_cuda_err_));       \
  } while (0)

/// After a <<<...>>> launch: reports configuration errors (grid, shared memory) at the
/// launch site. Faults inside the kernel surface at the next synchronizing call.
#define LAT_CUDA_CHECK_LAUNCH() LAT_CUDA_CHECK(cudaGetLastError())
