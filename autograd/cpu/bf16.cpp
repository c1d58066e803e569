// float32 -> bf16 rounding (bf16.h): an AVX512-BF16 loop where oneDNN reports the
// instructions, the portable bit rounding elsewhere. The vector loop is compiled for that
// instruction set whatever the build's -march, and only called after the runtime check.
#include "autograd/cpu/bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include <oneapi/dnnl/dnnl.hpp>

namespace lat::cpu {
namespace {

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void float_to_bf16_avx512(const float* src, uint16_t* dst,
                                                                                 int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(dst + i, reinterpret_cast<__m512i>(v));
  }
  // The last 1..31 floats through masks, so that every element takes the same rounding.
  for (; i < n; i += 16) {
    const int64_t left = n - i < 16 ? n - i : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + i));
    _mm256_mask_storeu_epi16(dst + i, mask, reinterpret_cast<__m256i>(v));
  }
}

}  // namespace

bool has_avx512_bf16() {
  // oneDNN's ISA values are bit sets, each holding the bits of the sets it extends.
  static const bool has = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return has;
}

uint16_t float_to_bf16(float x) {
  uint32_t bits;
  __builtin_memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit, then truncate.
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

void float_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  // Products round whole activations (millions of floats) before each call: on one thread
  // that would leave the others idle. Blocks are independent (the rounding is per element).
  constexpr int64_t kBlock = 1 << 15;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool vector = has_avx512_bf16();
#pragma omp parallel for if (blocks > 1 && !omp_in_parallel())
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, count = std::min(kBlock, n - begin);
    if (vector) {
      float_to_bf16_avx512(src + begin, dst + begin, count);
    } else {
      for (int64_t i = begin; i < begin + count; ++i) dst[i] = float_to_bf16(src[i]);
    }
  }
}

Bf16Copy bf16_copy(const float* src, int64_t n) {
  std::shared_ptr<uint16_t[]> bits(new uint16_t[static_cast<size_t>(n)]);
  float_to_bf16(src, bits.get(), n);
  return bits;
}

void float_to_bf16_rows(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst) {
  if (ld == cols) {
    float_to_bf16(src, dst, rows * cols);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) float_to_bf16(src + r * ld, dst + r * cols, cols);
}

}  // namespace lat::cpu
