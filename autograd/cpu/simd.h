// 64-byte SIMD vectors through the compiler's vector extension: one AVX-512 register with
// -march=native, split into narrower ones by the compiler elsewhere, so the kernels that use
// them stay portable C++.
#pragma once
#include <cstdint>

namespace lat::cpu {

/// V: a vector of 64 bytes of S (16 floats, 8 doubles); L: its lane count.
template <class S>
struct Simd {
  typedef S V __attribute__((vector_size(64)));
  static constexpr int64_t L = 64 / static_cast<int64_t>(sizeof(S));
};

}  // namespace lat::cpu
