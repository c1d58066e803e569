// Batched matrix products on CUDA through cuBLAS (plain-struct launch API, no tensors).
#pragma once
#include <cstdint>
#include <string>

#include "lat/dtype.h"
#include "lat/precision.h"

namespace lat::cuda {

/// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b in [0, batch), row-major, on
/// device `device`, with the conventions of lat::cpu::GemmBatch (autograd/cpu/gemm.h):
/// op(A) is M x K (A stored M x K with row stride lda, or K x M when trans_a), op(B) is
/// K x N, stride_* in elements between batch items (0 shares one matrix). dtype f32
/// (TF32 tensor cores only when lat::cuda::allow_tf32()) or f64. precision bf16 (f32 only,
/// on a device where bf16_supported(device)): A and B are rounded to bf16 into scratch
/// copies and multiplied on bf16 tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F)
/// into the f32 C. Throws lat::Error on a cuBLAS failure or sizes beyond cuBLAS's 32-bit
/// limits.
struct GemmArgs {
  DType dtype = DType::f32;
  int device = 0;
  int64_t batch = 1, M = 0, N = 0, K = 0;
  const void* A = nullptr;
  int64_t lda = 0, stride_a = 0;
  bool trans_a = false;
  const void* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  bool trans_b = false;
  void* C = nullptr;
  int64_t ldc = 0, stride_c = 0;
  double alpha = 1.0, beta = 0.0;
  Precision precision = Precision::fp32;
};
void gemm_batched(const GemmArgs& g);

/// The file name cuBLAS is loaded by, libcublas.so.<major> of the toolkit lat was built with.
std::string cublas_soname();

/// Loads cuBLAS now if it is not loaded yet (the first gemm_batched does it otherwise; the
/// library is dlopen-ed, not linked, so processes that never multiply on a GPU do not map
/// it). Needs no device. Throws lat::Error naming the library when it cannot be loaded or
/// lacks an entry point lat uses.
void load_cublas();

/// Whether device `index` has bf16 tensor cores (compute capability 8.0 or above).
bool bf16_supported(int index);

}  // namespace lat::cuda
