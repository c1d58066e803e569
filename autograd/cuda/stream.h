// The current stream of each CUDA device and a device guard.
//
// lat queues every kernel, device copy and cuBLAS call of device i on one stream,
// current_stream(i). Work on one stream runs in order, which is what makes the caching
// allocator safe without events: a block released by a tensor whose last kernel is still
// queued can only be reused by work queued after it.
#pragma once
#include <cuda_runtime.h>

namespace lat::cuda {

/// The stream of device `index` (created on first use; non-blocking with respect to the
/// legacy default stream). Throws lat::Error when the device does not exist.
cudaStream_t current_stream(int index);

/// Makes `index` the current device of this thread for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

/// Blocks until every operation queued on device `index`'s stream has finished; throws
/// lat::Error with the first asynchronous error (e.g. a fault inside a kernel).
void synchronize_stream(int index);

}  // namespace lat::cuda
