// The thread-local compute precision and where bf16 is supported (lat/precision.h).
#include "lat/precision.h"

#include "autograd/cpu/bf16.h"
#ifdef LAT_WITH_CUDA
#include "autograd/cuda/blas.h"
#endif
#include "lat/error.h"

namespace lat {
namespace {

Precision& current() {
  thread_local Precision precision = Precision::fp32;
  return precision;
}

}  // namespace

const char* precision_name(Precision precision) { return precision == Precision::bf16 ? "bf16" : "fp32"; }

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  throw Error("precision: expected fp32 or bf16, got '" + name + "'");
}

Precision compute_precision() { return current(); }

PrecisionGuard::PrecisionGuard(Precision precision) : previous_(current()) { current() = precision; }
PrecisionGuard::~PrecisionGuard() { current() = previous_; }

bool bf16_supported(Device device) {
#ifdef LAT_WITH_CUDA
  if (device.is_cuda()) return cuda::bf16_supported(device.index);
#endif
  return device.is_cpu() && cpu::has_avx512_bf16();
}

bool bf16_compute(Device device) { return current() == Precision::bf16 && bf16_supported(device); }

Precision effective_precision(Precision requested, Device device) {
  return requested == Precision::bf16 && !bf16_supported(device) ? Precision::fp32 : requested;
}

}  // namespace lat
