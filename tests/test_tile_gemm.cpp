// tile_gemm (the single-threaded product of the chunk kernels) against a float64 loop:
// every transpose combination, alpha and beta, row strides wider than the rows, and sizes
// on and off its 8-row, 16- and 32-column register tiles and 16 x 16 transpose blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "layers/linear_attention/tile_gemm.h"

namespace lat::linear_attention {
namespace {

struct Shape3 {
  int64_t M, N, K;
};

TEST(TileGemm, MatchesFloat64Loop) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  for (Shape3 s : {Shape3{64, 64, 64},
                   {64, 128, 64},
                   {48, 80, 33},
                   {7, 33, 5},
                   {1, 1, 1},
                   {13, 16, 17},
                   {9, 50, 256},
                   {256, 8, 64}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f, -0.5f}) {
          SCOPED_TRACE(::testing::Message()
                       << s.M << "x" << s.N << "x" << s.K << " ta " << ta << " tb " << tb << " beta " << beta);
          // Row strides 3 wider than the rows, so a kernel that assumes packed rows fails.
          const int64_t lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 3, ldc = s.N + 3;
          std::vector<float> a((ta ? s.K : s.M) * lda), b((tb ? s.N : s.K) * ldb), c(s.M * ldc);
          for (float& x : a) x = normal(gen);
          for (float& x : b) x = normal(gen);
          for (float& x : c) x = normal(gen);
          const std::vector<float> c0 = c;
          const float alpha = 0.75f;
          tile_gemm(s.M, s.N, s.K, {a.data(), lda, ta}, {b.data(), ldb, tb}, c.data(), ldc, alpha, beta);
          double err = 0.0, ref_norm = 0.0;
          for (int64_t i = 0; i < s.M; ++i) {
            for (int64_t j = 0; j < s.N; ++j) {
              double sum = 0.0;
              for (int64_t k = 0; k < s.K; ++k)
                sum += double(ta ? a[k * lda + i] : a[i * lda + k]) * double(tb ? b[j * ldb + k] : b[k * ldb + j]);
              const double ref = alpha * sum + beta * double(c0[i * ldc + j]);
              err += (c[i * ldc + j] - ref) * (c[i * ldc + j] - ref);
              ref_norm += ref * ref;
            }
            // Columns past N belong to the caller: untouched.
            for (int64_t j = s.N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]);
          }
          EXPECT_LT(std::sqrt(err / ref_norm), 1e-6);
        }
}

}  // namespace
}  // namespace lat::linear_attention
