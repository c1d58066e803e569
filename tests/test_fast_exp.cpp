// The branch-free float exp and sigmoid of the CPU loops (autograd/cpu/fast_exp.h) against
// std::exp in double: accuracy over the whole normal range and the special values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "autograd/cpu/fast_exp.h"

namespace {

using lat::cpu::fast_exp;
using lat::cpu::fast_sigmoid;

TEST(FastExp, RelativeErrorAtFloatRoundingOverNormalRange) {
  double worst = 0.0;
  for (double x = -86.5; x < 88.72; x += 3.7e-4) {
    const float xf = static_cast<float>(x);
    const double ref = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::abs(fast_exp(xf) - ref) / ref);
  }
  EXPECT_LT(worst, 2.5e-7);  // 2 float ulps
}

TEST(FastExp, SpecialValuesMatchStdExp) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-inf), 0.0f);
  EXPECT_EQ(fast_exp(-1000.0f), 0.0f);
  EXPECT_EQ(fast_exp(inf), inf);
  EXPECT_EQ(fast_exp(88.73f), inf);  // just above ln(FLT_MAX)
  EXPECT_TRUE(std::isfinite(fast_exp(88.72f)));
  EXPECT_NEAR(fast_exp(88.72f) / std::exp(static_cast<double>(88.72f)), 1.0, 2.5e-7);
  EXPECT_TRUE(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
  // Results below 2^-125 flush to zero (documented); just above, they are exact to rounding.
  EXPECT_NEAR(fast_exp(-86.6f) / std::exp(static_cast<double>(-86.6f)), 1.0, 2.5e-7);
}

TEST(FastExp, SigmoidSaturatesWithoutNaN) {
  EXPECT_EQ(fast_sigmoid(-1000.0f), 0.0f);
  EXPECT_EQ(fast_sigmoid(1000.0f), 1.0f);
  EXPECT_EQ(fast_sigmoid(0.0f), 0.5f);
  EXPECT_NEAR(fast_sigmoid(-20.0f), 1.0 / (1.0 + std::exp(20.0)), 1e-15);
  EXPECT_EQ(fast_sigmoid(-1000.0), 0.0);  // double: std::exp path
}

}  // namespace
