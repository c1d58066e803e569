// The cuBLAS calls lat uses (see emu.h): a plain column-major reference gemm, for f32 and f64,
// and for bf16 A and B with f32 C and f32 accumulation (the enum values are cuBLAS's). lat
// resolves them with dlsym from libcublas.so.13, which run.sh builds from cublas_emu.cpp;
// the names are the real library's exported symbols (cublas_v2.h maps the unsuffixed ones).
#pragma once
#include "cuda_runtime.h"

#define CUBLAS_VER_MAJOR 13
using cublasHandle_t = void*;
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cudaDataType { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_64F = 70, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT };

#define cublasCreate cublasCreate_v2
#define cublasSetStream cublasSetStream_v2
extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t*);
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t);
const char* cublasGetStatusName(cublasStatus_t);
const char* cublasGetStatusString(cublasStatus_t);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t transa, cublasOperation_t transb, int m,
                                          int n, int k, const void* alpha, const void* A, cudaDataType type_a, int lda,
                                          long long stride_a, const void* B, cudaDataType type_b, int ldb,
                                          long long stride_b, const void* beta, void* C, cudaDataType, int ldc,
                                          long long stride_c, int batch, cublasComputeType_t, cublasGemmAlgo_t);
}
