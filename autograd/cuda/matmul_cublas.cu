// Batched GEMM through cuBLAS (see blas.h). cuBLAS is column-major: a row-major M x N
// matrix C is the column-major N x M matrix C^T, so C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T, i.e. cuBLAS's gemm with the operands swapped and the same
// transpose flags, m = N, n = M.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <dlfcn.h>

#include <limits>
#include <map>
#include <string>

#include "autograd/cuda/blas.h"
#include "autograd/dynamic_library.h"
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/cuda_memory.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"
#include "lat/cuda.h"

/// Wraps a cuBLAS call: a failure throws lat::Error with the call, file, line and status.
#define LAT_CUBLAS_CHECK(call)                                                                \
  do {                                                                                        \
    cublasStatus_t lat_cublas_status_ = (call);                                               \
    LAT_CHECK(lat_cublas_status_ == CUBLAS_STATUS_SUCCESS,                                    \
              "cuBLAS call " #call " failed: " << cublas().status_name(lat_cublas_status_) << " (" \
                                              << cublas().status_string(lat_cublas_status_) << ")"); \
  } while (0)

namespace lat::cuda {
namespace {

// The cuBLAS entry points lat uses, resolved from libcublas.so.<major> on the first product:
// linking it would load cuBLAS and cuBLASLt (half a gigabyte) into every process of a CUDA
// build, CPU-only runs included, and relocating them costs ~150 MiB of resident memory.
// cublasGemmStridedBatchedEx is spelled out: cublas_api.h overloads it for C++.
struct CublasApi {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long, const void*,
                                            cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&::cublasGetStatusName) status_name = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
};

/// dlopen of cuBLAS by its soname (the loader's search: LD_LIBRARY_PATH, the executable's
/// runpath, ld.so.cache), else from the directory the CUDA runtime was loaded from, where the
/// toolkit keeps it.
void* open_cublas() {
  const std::string soname = cublas_soname();
  if (void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  const std::string first_error = dlerror();
  Dl_info runtime{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &runtime) != 0 && runtime.dli_fname != nullptr) {
    const std::string path = runtime.dli_fname;
    const std::string beside = path.substr(0, path.find_last_of('/') + 1) + soname;
    if (void* lib = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  }
  LAT_CHECK(false, "cuda: cannot load " << soname << " (" << first_error
                                        << "): install the CUDA toolkit's cuBLAS or add its directory to "
                                           "LD_LIBRARY_PATH");
  return nullptr;
}

const CublasApi& cublas() {
  static const CublasApi loaded = [] {
    void* lib = open_cublas();
    const std::string name = "cuda: " + cublas_soname();
    CublasApi api;
    resolve_symbol(lib, "cublasCreate_v2", name, api.create);
    resolve_symbol(lib, "cublasSetStream_v2", name, api.set_stream);
    resolve_symbol(lib, "cublasGemmStridedBatchedEx", name, api.gemm_strided_batched_ex);
    resolve_symbol(lib, "cublasGetStatusName", name, api.status_name);
    resolve_symbol(lib, "cublasGetStatusString", name, api.status_string);
    return api;
  }();
  return loaded;
}

// One handle per (thread, device): cuBLAS handles must not be shared by concurrent host
// threads. Handles are never destroyed (see stream.cu for why).
cublasHandle_t handle_for(int device) {
  thread_local std::map<int, cublasHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasHandle_t handle = nullptr;
  LAT_CUBLAS_CHECK(cublas().create(&handle));
  handles.emplace(device, handle);
  return handle;
}

int checked_int(int64_t x, const char* what) {
  LAT_CHECK(x >= 0 && x <= std::numeric_limits<int>::max(),
            "cuda gemm: " << what << " = " << x << " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(x);
}

// dst[i] (items x rows x cols, packed) = src[b * stride + r * ld + c] rounded to the nearest
// bf16 (ties to even), as the CPU's float_to_bf16.
__global__ void round_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                              int64_t total, __nv_bfloat16* dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % cols, r = (i / cols) % rows, b = i / (rows * cols);
    dst[i] = __float2bfloat16_rn(src[b * stride + r * ld + c]);
  }
}

/// A bf16 copy of one operand in the caching allocator's memory, packed: row stride = its
/// stored columns, batch stride = one matrix (0 when the operand is shared). Released when
/// it goes out of scope; work queued on the stream may still read it (stream.h).
struct Bf16Copy {
  void* data = nullptr;
  int64_t ld = 0, stride = 0;
  int device = 0;
  Bf16Copy(const void* src, int64_t batch, int64_t rows, int64_t cols, int64_t ld_src, int64_t stride_src, int dev,
           cudaStream_t stream)
      : ld(cols), stride(stride_src == 0 ? 0 : rows * cols), device(dev) {
    const int64_t total = (stride_src == 0 ? 1 : batch) * rows * cols;
    data = allocate(static_cast<size_t>(total) * sizeof(__nv_bfloat16), dev);
    round_to_bf16<<<grid_for(total), kBlock, 0, stream>>>(static_cast<const float*>(src), rows, cols, ld_src,
                                                          stride_src, total, static_cast<__nv_bfloat16*>(data));
    LAT_CUDA_CHECK_LAUNCH();
  }
  ~Bf16Copy() { release(data, device); }
  Bf16Copy(const Bf16Copy&) = delete;
  Bf16Copy& operator=(const Bf16Copy&) = delete;
};

}  // namespace

std::string cublas_soname() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

void load_cublas() { cublas(); }

bool bf16_supported(int index) {
  thread_local std::map<int, bool> supported;
  auto it = supported.find(index);
  if (it != supported.end()) return it->second;
  int major = 0;
  LAT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
  return supported.emplace(index, major >= 8).first->second;
}

void gemm_batched(const GemmArgs& g) {
  if (g.batch == 0 || g.M == 0 || g.N == 0) return;
  DeviceGuard guard(g.device);
  cublasHandle_t handle = handle_for(g.device);
  LAT_CUBLAS_CHECK(cublas().set_stream(handle, current_stream(g.device)));
  const int m = checked_int(g.N, "N"), n = checked_int(g.M, "M"), k = checked_int(g.K, "K");
  const int lda = checked_int(std::max<int64_t>(g.lda, 1), "lda");
  const int ldb = checked_int(std::max<int64_t>(g.ldb, 1), "ldb");
  const int ldc = checked_int(std::max<int64_t>(g.ldc, 1), "ldc");
  const int batch = checked_int(g.batch, "batch");
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (g.dtype == DType::f32 && g.precision == Precision::bf16) {
    const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
    cudaStream_t stream = current_stream(g.device);
    const Bf16Copy a(g.A, g.batch, g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.lda, g.stride_a, g.device, stream);
    const Bf16Copy b(g.B, g.batch, g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, g.ldb, g.stride_b, g.device, stream);
    LAT_CUBLAS_CHECK(cublas().gemm_strided_batched_ex(
        handle, op_b, op_a, m, n, k, &alpha, b.data, CUDA_R_16BF, checked_int(std::max<int64_t>(b.ld, 1), "ldb"),
        b.stride, a.data, CUDA_R_16BF, checked_int(std::max<int64_t>(a.ld, 1), "lda"), a.stride, &beta, g.C,
        CUDA_R_32F, ldc, g.stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else if (g.dtype == DType::f32) {
    const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
    const cublasComputeType_t compute = allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    LAT_CUBLAS_CHECK(cublas().gemm_strided_batched_ex(handle, op_b, op_a, m, n, k, &alpha, g.B, CUDA_R_32F, ldb,
                                                g.stride_b, g.A, CUDA_R_32F, lda, g.stride_a, &beta, g.C,
                                                CUDA_R_32F, ldc, g.stride_c, batch, compute, CUBLAS_GEMM_DEFAULT));
  } else {
    LAT_CHECK(g.dtype == DType::f64, "cuda gemm: dtype: expected f32 or f64, got " << dtype_name(g.dtype));
    const double alpha = g.alpha, beta = g.beta;
    LAT_CUBLAS_CHECK(cublas().gemm_strided_batched_ex(handle, op_b, op_a, m, n, k, &alpha, g.B, CUDA_R_64F, ldb,
                                                g.stride_b, g.A, CUDA_R_64F, lda, g.stride_a, &beta, g.C,
                                                CUDA_R_64F, ldc, g.stride_c, batch, CUBLAS_COMPUTE_64F,
                                                CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace lat::cuda
