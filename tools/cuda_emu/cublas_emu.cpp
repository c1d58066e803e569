// The emulator's libcublas.so.13 (run.sh builds it and puts it first on LD_LIBRARY_PATH,
// where lat's dlopen finds it): the calls of cublas_v2.h on host memory, the product a plain
// column-major reference gemm.
#include "cublas_v2.h"
#include "cuda_bf16.h"

extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  static int handle;
  *h = &handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t) { return "emulated cuBLAS"; }
}  // extern "C"

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

extern "C" {
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
}  // extern "C"
