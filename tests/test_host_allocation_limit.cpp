// Host allocations that cannot fit are refused when asked for, not when their pages are touched.
#include "autograd/host_allocation_limit.h"

#include <gtest/gtest.h>

#include "expect_error.h"
#include "lat/tensor.h"

namespace lat {
namespace {

using testing::expect_error;

TEST(HostAllocationLimit, TensorLargerThanTheMachineIsAnErrorNamingItsSize) {
  const int64_t floats = static_cast<int64_t>(host_physical_memory() / sizeof(float)) + 1024;
  expect_error<HostMemoryError>([&] { Tensor::empty({floats}); },
                      {"Storage: out of host memory: a tensor of " + std::to_string(floats * 4) + " bytes",
                       "larger than this machine's memory"});
}

TEST(HostAllocationLimit, CountsAllocationsInItsScopeAndRefusesThePastLimitOne) {
  std::vector<Tensor> kept;
  {
    const HostAllocationLimit limit(3 * 4096, "test model: the parameters");
    kept.push_back(Tensor::empty({1024}));  // 4096 bytes
    kept.push_back(Tensor::empty({1024}));
    EXPECT_EQ(limit.allocated_bytes(), 2u * 4096);
    kept.clear();  // frees do not give budget back: the limit bounds what the scope allocates
    kept.push_back(Tensor::empty({1024}));
    expect_error<AllocationLimitError>([&] { Tensor::empty({1}); },
                                       {"test model: the parameters need more than", "next tensor"});
    EXPECT_EQ(limit.allocated_bytes(), 3u * 4096);
  }
  // Out of the scope nothing is counted.
  EXPECT_NO_THROW(Tensor::empty({1 << 20}));
}

TEST(HostAllocationLimit, AnInnerScopeReplacesTheOuterOneUntilItEnds) {
  const HostAllocationLimit outer(4096, "outer");
  {
    const HostAllocationLimit inner(8 * 4096, "inner");
    EXPECT_NO_THROW(Tensor::empty({4 * 1024}));
    EXPECT_EQ(inner.allocated_bytes(), 4u * 4096);
  }
  EXPECT_EQ(outer.allocated_bytes(), 0u);
  expect_error<AllocationLimitError>([&] { Tensor::empty({2 * 1024}); }, {"outer need more than"});
}

}  // namespace
}  // namespace lat
