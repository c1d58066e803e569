// Batched GEMM through cuBLAS (see blas.h). cuBLAS is column-major: a row-major M x N
// matrix C is the column-major N x M matrix C^T, so C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T, i.e. cuBLAS's gemm with the operands swapped and the same
// transpose flags, m = N, n = M.
#include <cublas_v2.h>

#include <limits>
#include <map>

#include "autograd/cuda/blas.h"
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/stream.h"
#include "lat/cuda.h"

/// Wraps a cuBLAS call: a failure throws lat::Error with the call, file, line and status.
#define LAT_CUBLAS_CHECK(call)                                                                \
  do {                                                                                        \
    cublasStatus_t lat_cublas_status_ = (call);                                               \
    LAT_CHECK(lat_cublas_status_ == CUBLAS_STATUS_SUCCESS,                                    \
              "cuBLAS call " #call " failed: " << cublasGetStatusName(lat_cublas_status_) << " (" \
                                              << cublasGetStatusString(lat_cublas_status_) << ")"); \
  } while (0)

namespace lat::cuda {
namespace {

// One handle per (thread, device): cuBLAS handles must not be shared by concurrent host
// threads. Handles are never destroyed (see stream.cu for why).
cublasHandle_t handle_for(int device) {
  thread_local std::map<int, cublasHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasHandle_t handle = nullptr;
  LAT_CUBLAS_CHECK(cublasCreate(&handle));
  handles.emplace(device, handle);
  return handle;
}

int checked_int(int64_t x, const char* what) {
  LAT_CHECK(x >= 0 && x <= std::numeric_limits<int>::max(),
            "cuda gemm: " << what << " = " << x << " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(x);
}

}  // namespace

void gemm_batched(const GemmArgs& g) {
  if (g.batch == 0 || g.M == 0 || g.N == 0) return;
  DeviceGuard guard(g.device);
  cublasHandle_t handle = handle_for(g.device);
  LAT_CUBLAS_CHECK(cublasSetStream(handle, current_stream(g.device)));
  const int m = checked_int(g.N, "N"), n = checked_int(g.M, "M"), k = checked_int(g.K, "K");
  const int lda = checked_int(std::max<int64_t>(g.lda, 1), "lda");
  const int ldb = checked_int(std::max<int64_t>(g.ldb, 1), "ldb");
  const int ldc = checked_int(std::max<int64_t>(g.ldc, 1), "ldc");
  const int batch = checked_int(g.batch, "batch");
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (g.dtype == DType::f32) {
    const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
    const cublasComputeType_t compute = allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    LAT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, op_b, op_a, m, n, k, &alpha, g.B, CUDA_R_32F, ldb,
                                                g.stride_b, g.A, CUDA_R_32F, lda, g.stride_a, &beta, g.C,
                                                CUDA_R_32F, ldc, g.stride_c, batch, compute, CUBLAS_GEMM_DEFAULT));
  } else {
    LAT_CHECK(g.dtype == DType::f64, "cuda gemm: dtype: expected f32 or f64, got " << dtype_name(g.dtype));
    const double alpha = g.alpha, beta = g.beta;
    LAT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, op_b, op_a, m, n, k, &alpha, g.B, CUDA_R_64F, ldb,
                                                g.stride_b, g.A, CUDA_R_64F, lda, g.stride_a, &beta, g.C,
                                                CUDA_R_64F, ldc, g.stride_c, batch, CUBLAS_COMPUTE_64F,
                                                CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace lat::cuda
