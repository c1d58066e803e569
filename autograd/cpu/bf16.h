// bfloat16 on the CPU: the rounding of float32 to bf16 (the top 16 bits: sign, 8-bit
// exponent, 7 stored significand bits) that the bf16 matrix products apply to their inputs.
#pragma once
#include <cstdint>
#include <memory>

namespace lat::cpu {

/// Whether oneDNN's effective instruction set on this CPU includes AVX512-BF16
/// (avx512_core_bf16 or above; DNNL_MAX_CPU_ISA caps it). Cached after the first call.
bool has_avx512_bf16();

/// x rounded to the nearest bf16, ties to even, as its 16 bits; a NaN stays a (quiet) NaN.
uint16_t float_to_bf16(float x);

/// The float32 holding bf16 `bits` exactly.
inline float bf16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  __builtin_memcpy(&x, &u, sizeof(x));
  return x;
}

/// dst[i] = float_to_bf16(src[i]) for i in [0, n). With AVX512-BF16 (has_avx512_bf16()) one
/// instruction rounds 32 floats; it rounds the same way but treats float32 subnormals
/// (|x| < 2^-126) as zero. Single-threaded.
void float_to_bf16(const float* src, uint16_t* dst, int64_t n);

/// n floats rounded as float_to_bf16 into a new array, shared by the products (and the tape
/// nodes that keep it for the backward products) that read the same operand.
using Bf16Copy = std::shared_ptr<const uint16_t[]>;
Bf16Copy bf16_copy(const float* src, int64_t n);

/// A rows x cols float matrix with row stride `ld` into `dst`, rows packed (row stride cols),
/// rounded as float_to_bf16.
void float_to_bf16_rows(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst);

}  // namespace lat::cpu
