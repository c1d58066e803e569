// Definitions of the emulated CUDA runtime and cuBLAS (see emu.h).
#include "cublas_v2.h"
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

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  static int handle;
  *h = &handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t) { return "emulated cuBLAS"; }

namespace {
float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
float widen(float x) { return x; }
double widen(double x) { return x; }

// Column-major C = alpha op(A) op(B) + beta C per batch item (beta = 0 ignores C's contents),
// A and B of type In, products and sums in Acc (for bf16 inputs each product is exact in f32).
template <class In, class Acc>
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha_p, const void* A_p,
          int lda, long long sa, const void* B_p, int ldb, long long sb, const void* beta_p, void* C_p, int ldc,
          long long sc, int batch) {
  const Acc alpha = *static_cast<const Acc*>(alpha_p), beta = *static_cast<const Acc*>(beta_p);
  const In* A = static_cast<const In*>(A_p);
  const In* B = static_cast<const In*>(B_p);
  Acc* C = static_cast<Acc*>(C_p);
  for (long long b = 0; b < batch; ++b)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        Acc acc = 0;
        for (int l = 0; l < k; ++l) {
          const Acc a = widen(ta == CUBLAS_OP_N ? A[b * sa + i + static_cast<long long>(l) * lda]
                                                : A[b * sa + l + static_cast<long long>(i) * lda]);
          const Acc x = widen(tb == CUBLAS_OP_N ? B[b * sb + l + static_cast<long long>(j) * ldb]
                                                : B[b * sb + j + static_cast<long long>(l) * ldb]);
          acc += a * x;
        }
        Acc& c = C[b * sc + i + static_cast<long long>(j) * ldc];
        c = alpha * acc + (beta == Acc(0) ? Acc(0) : beta * c);
      }
}
}  // namespace

// The type combinations lat uses; others are refused as cuBLAS refuses unsupported ones.
// CUBLAS_COMPUTE_32F_FAST_TF32 is computed in full f32 (the emulator does not round to tf32).
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType type_a, int lda,
                                          long long sa, const void* B, cudaDataType type_b, int ldb, long long sb,
                                          const void* beta, void* C, cudaDataType type_c, int ldc, long long sc,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const bool f32_compute = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (type_a != type_b) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (type_a == CUDA_R_32F && type_c == CUDA_R_32F && f32_compute) {
    gemm<float, float>(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
  } else if (type_a == CUDA_R_16BF && type_c == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F) {
    gemm<__nv_bfloat16, float>(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
  } else if (type_a == CUDA_R_64F && type_c == CUDA_R_64F && compute == CUBLAS_COMPUTE_64F) {
    gemm<double, double>(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
  } else {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}
