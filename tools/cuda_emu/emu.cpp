// Definitions of the emulated CUDA runtime (see emu.h; cuBLAS is cublas_emu.cpp).
#include "cuda_runtime.h"
#include "cuda_bf16.h"

thread_local emu_uint3 threadIdx, blockIdx;
thread_local dim3 blockDim, gridDim;

namespace emu {
namespace {
constexpr size_t kMaxShared = 232448;  // H100/H200: 227 KiB per block with opt-in
float g_shared[kMaxShared / sizeof(float)];
size_t g_allowed_shared = 48 * 1024;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "cuda_emu: launch refused: %s\n", what);
  std::abort();
}
}  // namespace

thread_local BlockContext context;

float* dynamic_shared() { return g_shared; }

void check_launch(dim3 g, dim3 b, size_t shared_bytes) {
  const unsigned n = b.x * b.y * b.z;
  if (n == 0 || n > 1024) fail("block size");
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.y > 65535 || g.z > 65535) fail("grid size");
  if (shared_bytes > kMaxShared) fail("dynamic shared memory above 227 KiB");
  if (shared_bytes > 48 * 1024 && shared_bytes > g_allowed_shared) fail("dynamic shared memory not opted into");
  std::fill(std::begin(g_shared), std::end(g_shared), NAN);
}
}  // namespace emu

cudaError_t emu_allow_shared(size_t bytes) {
  if (bytes > emu::kMaxShared) return cudaErrorInvalidValue;
  emu::g_allowed_shared = std::max(emu::g_allowed_shared, bytes);
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(emu::kMaxShared); return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t) {
  std::memset(dst, value, n);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  static int stream;
  *s = &stream;
  return cudaSuccess;
}

