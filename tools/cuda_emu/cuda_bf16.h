// The part of cuda_bf16.h lat uses (see emu.h): the bf16 storage type and its conversions,
// rounding as the real header does (to nearest, ties to even; every NaN becomes 0x7fff).
#pragma once
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  unsigned short __x;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffU) > 0x7f800000U) return {0x7fffU};
  const uint32_t remainder = u << 16;
  auto bits = static_cast<unsigned short>(u >> 16);
  if (remainder > 0x80000000U || (remainder == 0x80000000U && (bits & 1U) != 0)) ++bits;
  return {bits};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = static_cast<uint32_t>(h.__x) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
