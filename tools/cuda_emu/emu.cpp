// Definitions of the emulated CUDA runtime and cuBLAS (see emu.h).
#include "cublas_v2.h"

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
const char* cublasGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_EMULATED"; }
const char* cublasGetStatusString(cublasStatus_t) { return "emulated"; }

namespace {
// Column-major C = alpha op(A) op(B) + beta C per batch item (beta = 0 ignores C's contents).
template <class T>
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha, const T* A, int lda, long long sa,
          const T* B, int ldb, long long sb, T beta, T* C, int ldc, long long sc, int batch) {
  for (long long b = 0; b < batch; ++b)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        T acc = 0;
        for (int l = 0; l < k; ++l) {
          const T a = ta == CUBLAS_OP_N ? A[b * sa + i + static_cast<long long>(l) * lda]
                                        : A[b * sa + l + static_cast<long long>(i) * lda];
          const T x = tb == CUBLAS_OP_N ? B[b * sb + l + static_cast<long long>(j) * ldb]
                                        : B[b * sb + j + static_cast<long long>(l) * ldb];
          acc += a * x;
        }
        T& c = C[b * sc + i + static_cast<long long>(j) * ldc];
        c = alpha * acc + (beta == T(0) ? T(0) : beta * c);
      }
}
}  // namespace

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType type, int lda,
                                          long long sa, const void* B, cudaDataType, int ldb, long long sb,
                                          const void* beta, void* C, cudaDataType, int ldc, long long sc, int batch,
                                          cublasComputeType_t, cublasGemmAlgo_t) {
  if (type == CUDA_R_32F) {
    gemm<float>(ta, tb, m, n, k, *static_cast<const float*>(alpha), static_cast<const float*>(A), lda, sa,
                static_cast<const float*>(B), ldb, sb, *static_cast<const float*>(beta), static_cast<float*>(C), ldc,
                sc, batch);
  } else {
    gemm<double>(ta, tb, m, n, k, *static_cast<const double*>(alpha), static_cast<const double*>(A), lda, sa,
                 static_cast<const double*>(B), ldb, sb, *static_cast<const double*>(beta), static_cast<double*>(C),
                 ldc, sc, batch);
  }
  return CUBLAS_STATUS_SUCCESS;
}
