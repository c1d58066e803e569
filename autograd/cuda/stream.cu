// Streams and device guards (see stream.h).
#include <mutex>
#include <vector>

#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/stream.h"

namespace lat::cuda {

cudaStream_t current_stream(int index) {
  // Streams live until the process ends: destroying them from static destructors would
  // race with the driver's own teardown.
  static std::mutex mutex;
  static std::vector<cudaStream_t>* streams = new std::vector<cudaStream_t>();
  std::lock_guard<std::mutex> lock(mutex);
  if (index >= 0 && index < static_cast<int>(streams->size()) && (*streams)[index] != nullptr)
    return (*streams)[index];
  int count = 0;
  LAT_CUDA_CHECK(cudaGetDeviceCount(&count));
  LAT_CHECK(index >= 0 && index < count, "cuda: device cuda:" << index << " does not exist (" << count
                                                               << " visible devices)");
  if (static_cast<int>(streams->size()) < count) streams->resize(count, nullptr);
  DeviceGuard guard(index);
  cudaStream_t stream = nullptr;
  LAT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  (*streams)[index] = stream;
  return stream;
}

DeviceGuard::DeviceGuard(int index) {
  LAT_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != index) {
    LAT_CUDA_CHECK(cudaSetDevice(index));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) cudaSetDevice(previous_);
}

void synchronize_stream(int index) {
  DeviceGuard guard(index);
  LAT_CUDA_CHECK(cudaStreamSynchronize(current_stream(index)));
}

}  // namespace lat::cuda
