// The compute precision of matrix products: fp32, or bf16 mixed precision (bf16 inputs, fp32
// accumulation and results). Parameters, gradients, optimizer state, recurrent states,
// decay sums, norms, softmax and losses stay fp32 whatever it is: only the inputs of the
// products are rounded, to bf16's 8-bit significand (unit roundoff u = 2^-8, the bound on
// the relative rounding error).
#pragma once
#include <cstdint>
#include <string>

#include "lat/dtype.h"

namespace lat {

enum class Precision : uint8_t { fp32, bf16 };

/// "fp32" or "bf16" (train.precision's values).
const char* precision_name(Precision precision);

/// "fp32" -> fp32, "bf16" -> bf16. Throws lat::Error naming `name` otherwise.
Precision parse_precision(const std::string& name);

/// The precision this thread's products compute in: fp32 unless a PrecisionGuard set
/// another. Ops read it when they run and their tape nodes keep it for backward, so a
/// backward pass computes in the precision of its forward pass.
Precision compute_precision();

/// RAII: sets this thread's compute precision for its lifetime (nests, like NoGradGuard).
/// bf16 applies only where bf16_supported(device) holds; elsewhere products stay fp32.
class PrecisionGuard {
 public:
  explicit PrecisionGuard(Precision precision);
  ~PrecisionGuard();
  PrecisionGuard(const PrecisionGuard&) = delete;
  PrecisionGuard& operator=(const PrecisionGuard&) = delete;

 private:
  Precision previous_;
};

/// Whether `device` computes bf16 products natively. CPU: oneDNN's effective instruction
/// set includes AVX512-BF16 (avx512_core_bf16 or above); the environment variable
/// DNNL_MAX_CPU_ISA (or ONEDNN_MAX_CPU_ISA), e.g. =AVX512_CORE, caps that set for the
/// whole process, so it also shows the fallback on a CPU that has the instructions. CUDA:
/// compute capability 8.0 or above (bf16 tensor cores).
bool bf16_supported(Device device);

/// True when this thread's products on `device` compute in bf16: compute_precision() is
/// bf16 and bf16_supported(device).
bool bf16_compute(Device device);

/// The precision a run that asks for `requested` computes in on `device`: `requested`, or
/// fp32 when it is bf16 and !bf16_supported(device).
Precision effective_precision(Precision requested, Device device);

}  // namespace lat
