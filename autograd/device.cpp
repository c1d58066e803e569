// Device memory: one switch per backend (no self-registration).
#include "autograd/device_memory.h"

#include <cstdlib>
#include <cstring>

#include "autograd/host_allocation_limit.h"
#include "lat/error.h"

#ifdef LAT_WITH_CUDA
#include "autograd/cuda/cuda_memory.h"
#endif

namespace lat {

bool cuda_built() {
#ifdef LAT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef LAT_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

namespace detail {

void* device_alloc(size_t nbytes, Device device) {
  switch (device.type) {
    case DeviceType::cpu: {
      check_host_allocation(nbytes);
      size_t rounded = (nbytes + 63) / 64 * 64;
      void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
      if (p == nullptr)
        throw HostMemoryError("Storage: out of host memory allocating " + std::to_string(nbytes) + " bytes");
      return p;
    }
    case DeviceType::cuda:
#ifdef LAT_WITH_CUDA
    {
      // Checked here so that a machine without a GPU (or driver) gets a message naming the
      // device rather than the CUDA runtime's error from the first call. The count is fixed
      // for the process (CUDA_VISIBLE_DEVICES is read once by the runtime).
      static const int visible = cuda::device_count();
      LAT_CHECK(device.index >= 0 && device.index < visible,
                "Storage: device " << device.str() << " requested, but " << visible
                                   << " CUDA device(s) are visible to this process");
      return cuda::allocate(nbytes, device.index);
    }
#else
      LAT_CHECK(false, "Storage: device " << device.str() << " requested but lat was built without CUDA");
#endif
  }
  return nullptr;
}

void device_free(void* p, Device device) {
  switch (device.type) {
    case DeviceType::cpu: std::free(p); return;
    case DeviceType::cuda:
#ifdef LAT_WITH_CUDA
      cuda::release(p, device.index);
#endif
      return;
  }
}

void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
#ifdef LAT_WITH_CUDA
  cuda::copy(dst, dst_device, src, src_device, nbytes);
#else
  LAT_CHECK(false, "copy: " << src_device.str() << " -> " << dst_device.str()
                            << " needs CUDA, but lat was built without it");
#endif
}

}  // namespace detail
}  // namespace lat
