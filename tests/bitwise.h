// Bitwise comparison of tensors, for tests that promise the same bits (a fused op against
// the ops it replaces, one schedule against another).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "lat/dtype.h"
#include "lat/tensor.h"

namespace lat::testing {

/// Elements of a and b (same dtype and size, checked) whose bits differ.
inline int64_t differing_bits(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.numel(), b.numel());
  if (a.dtype() != b.dtype() || a.numel() != b.numel()) return a.numel();
  const size_t esize = dtype_size(a.dtype());
  const auto* pa = static_cast<const char*>(a.raw_data());
  const auto* pb = static_cast<const char*>(b.raw_data());
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += std::memcmp(pa + i * esize, pb + i * esize, esize) != 0;
  return n;
}

}  // namespace lat::testing
