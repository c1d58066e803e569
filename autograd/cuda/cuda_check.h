// Error checking for every CUDA runtime call and kernel launch (file, line, message).
#pragma once
#include <cuda_runtime.h>

#include "lat/error.h"

#define LAT_CUDA_CHECK(call)                                                              \
  do {                                                                                    \
    cudaError_t lat_cuda_err_ = (call);                                                   \
    LAT_CHECK(lat_cuda_err_ == cudaSuccess,                                               \
              "CUDA call " #call " failed: " << cudaGetErrorString(lat_cuda_err_));       \
  } while (0)

/// After a <<<...>>> launch: reports configuration errors at the launch site.
#define LAT_CUDA_CHECK_LAUNCH() LAT_CUDA_CHECK(cudaGetLastError())
