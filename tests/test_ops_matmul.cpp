// lat::matmul: forward against a float64 loop reference (every transpose combination,
// broadcast batches, a shared 2-D b), finite-difference gradients, float32 accuracy on
// odd shapes, the oneDNN primitive cache, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>

#include "autograd/cpu/gemm.h"
#include "lat/error.h"
#include "lat/grad_check.h"
#include "lat/ops.h"
#include "lat/tape.h"
#include "tests/expect_error.h"

namespace {

using lat::DType;
using lat::Shape;
using lat::Tensor;
using lat::testing::expect_error;

Tensor random(const Shape& shape, uint64_t seed, DType dtype = DType::f64, bool requires_grad = false) {
  lat::Generator gen(seed);
  Tensor t = Tensor::randn(shape, gen, dtype);
  t.set_requires_grad(requires_grad);
  return t;
}

/// Element of a row-major tensor at `index` (right-aligned to its shape, size-1 dims broadcast).
double at_broadcast(const std::vector<double>& data, const Shape& shape, const std::vector<int64_t>& index) {
  int64_t flat = 0;
  size_t shift = index.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : index[d + shift]);
  return data[flat];
}

/// Naive float64 reference of matmul with NumPy batch broadcasting.
Tensor reference_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const int64_t M = ta ? as.back() : as[as.size() - 2], K = ta ? as[as.size() - 2] : as.back();
  const int64_t N = tb ? bs[bs.size() - 2] : bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  size_t nb = std::max(ab.size(), bb.size());
  Shape batch(nb);
  for (size_t i = 0; i < nb; ++i) {
    size_t from_end = nb - i;
    int64_t x = from_end <= ab.size() ? ab[ab.size() - from_end] : 1;
    int64_t y = from_end <= bb.size() ? bb[bb.size() - from_end] : 1;
    batch[i] = std::max(x, y);
  }
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> out(lat::shape_numel(out_shape));
  int64_t total = lat::shape_numel(batch);
  for (int64_t p = 0; p < total; ++p) {
    std::vector<int64_t> index(nb + 2);
    int64_t rest = p;
    for (size_t d = nb; d-- > 0;) {
      index[d] = rest % batch[d];
      rest /= batch[d];
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          index[nb] = ta ? k : i;
          index[nb + 1] = ta ? i : k;
          double x = at_broadcast(av, as, index);
          index[nb] = tb ? j : k;
          index[nb + 1] = tb ? k : j;
          acc += x * at_broadcast(bv, bs, index);
        }
        out[(p * M + i) * N + j] = acc;
      }
  }
  return Tensor::from_vector(out, out_shape);
}

/// Stored shape of an operand whose logical matrix is rows x cols.
Shape stored(Shape batch, int64_t rows, int64_t cols, bool transposed) {
  batch.push_back(transposed ? cols : rows);
  batch.push_back(transposed ? rows : cols);
  return batch;
}

TEST(Matmul, KnownAnswer) {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor a = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}).to(dtype);
    Tensor b = Tensor::from_vector(std::vector<double>{5, 6, 7, 8}, {2, 2}).to(dtype);
    EXPECT_EQ(lat::matmul(a, b).to_vector<double>(), (std::vector<double>{19, 22, 43, 50}));
    EXPECT_EQ(lat::matmul(a, b, true, false).to_vector<double>(), (std::vector<double>{26, 30, 38, 44}));
    EXPECT_EQ(lat::matmul(a, b, false, true).to_vector<double>(), (std::vector<double>{17, 23, 39, 53}));
    EXPECT_EQ(lat::matmul(a, b, true, true).to_vector<double>(), (std::vector<double>{23, 31, 34, 46}));
  }
}

struct BatchCase {
  Shape a_batch, b_batch;
};

TEST(Matmul, ForwardMatchesReferenceAllTransposesAndBatches) {
  const int64_t M = 3, K = 4, N = 5;
  const std::vector<BatchCase> cases = {{{}, {}},         {{2}, {2}},       {{2, 3}, {}},   {{}, {2}},
                                        {{2, 1}, {1, 3}}, {{1, 2}, {3, 1}}, {{2, 3}, {1}}, {{4}, {1, 1}}};
  uint64_t seed = 1;
  for (const BatchCase& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = random(stored(c.a_batch, M, K, ta), seed++);
        Tensor b = random(stored(c.b_batch, K, N, tb), seed++);
        Tensor ref = reference_matmul(a, b, ta, tb);
        Tensor out64 = lat::matmul(a, b, ta, tb);
        ASSERT_EQ(out64.shape(), ref.shape());
        EXPECT_LT(lat::relative_error(out64, ref), 1e-14) << "ta=" << ta << " tb=" << tb;
        Tensor out32 = lat::matmul(a.to(DType::f32), b.to(DType::f32), ta, tb);
        ASSERT_EQ(out32.dtype(), DType::f32);
        EXPECT_LT(lat::relative_error(out32, ref), 1e-6) << "ta=" << ta << " tb=" << tb;
      }
}

TEST(Matmul, ZeroInnerDimensionGivesZeros) {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor out = lat::matmul(Tensor::zeros({2, 3, 0}, dtype), Tensor::zeros({0, 4}, dtype));
    ASSERT_EQ(out.shape(), (Shape{2, 3, 4}));
    for (double v : out.to_vector<double>()) EXPECT_EQ(v, 0.0);
  }
}

TEST(Matmul, GradCheckAllTransposes2D) {
  uint64_t seed = 10;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = random(stored({}, 3, 4, ta), seed++, DType::f64, true);
      Tensor b = random(stored({}, 4, 5, tb), seed++, DType::f64, true);
      auto r = lat::grad_check([&](const std::vector<Tensor>& x) { return lat::matmul(x[0], x[1], ta, tb); }, {a, b});
      ASSERT_EQ(r.rel_error.size(), 2u);
      EXPECT_LT(r.max_rel_error, 1e-7) << "ta=" << ta << " tb=" << tb;
    }
}

TEST(Matmul, GradCheckBroadcastBatches) {
  const std::vector<BatchCase> cases = {{{2}, {2}}, {{2, 1}, {1, 3}}, {{}, {2}}, {{3}, {1}}, {{2, 2}, {}}};
  uint64_t seed = 20;
  for (const BatchCase& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = random(stored(c.a_batch, 2, 3, ta), seed++, DType::f64, true);
        Tensor b = random(stored(c.b_batch, 3, 2, tb), seed++, DType::f64, true);
        auto r =
            lat::grad_check([&](const std::vector<Tensor>& x) { return lat::matmul(x[0], x[1], ta, tb); }, {a, b});
        ASSERT_EQ(r.rel_error.size(), 2u);
        EXPECT_LT(r.max_rel_error, 1e-7) << "ta=" << ta << " tb=" << tb << " a " << lat::shape_str(a.shape())
                                         << " b " << lat::shape_str(b.shape());
      }
}

TEST(Matmul, GradCheckSharedWeightOnlyOneInputRequiresGrad) {
  // A 2-D b shared by a batched a, with only one side requiring grad at a time.
  for (bool tb : {false, true}) {
    Tensor a = random({2, 3, 4}, 30, DType::f64, true);
    Tensor b = random(stored({}, 4, 5, tb), 31, DType::f64, false);
    auto ra = lat::grad_check([&](const std::vector<Tensor>& x) { return lat::matmul(x[0], x[1], false, tb); }, {a, b});
    ASSERT_EQ(ra.rel_error.size(), 1u);
    EXPECT_LT(ra.max_rel_error, 1e-7);
    a.set_requires_grad(false);
    b.set_requires_grad(true);
    auto rb = lat::grad_check([&](const std::vector<Tensor>& x) { return lat::matmul(x[0], x[1], false, tb); }, {a, b});
    ASSERT_EQ(rb.rel_error.size(), 1u);
    EXPECT_LT(rb.max_rel_error, 1e-7);
  }
}

TEST(Matmul, SharedWeightGradientEqualsSumOverBatch) {
  // db of a shared 2-D b (the flattened single-product path) equals the sum of the
  // per-item gradients a[i]^T g[i].
  Tensor a = random({3, 4, 5}, 40);
  Tensor b = random({5, 6}, 41, DType::f64, true);
  Tensor g = random({3, 4, 6}, 42);
  lat::backward(lat::matmul(a, b), g);
  Tensor expected = Tensor::zeros({5, 6}, DType::f64);
  for (int64_t i = 0; i < 3; ++i) {
    Tensor ai = lat::slice(a, 0, i, i + 1).reshape({4, 5});
    Tensor gi = lat::slice(g, 0, i, i + 1).reshape({4, 6});
    expected = lat::add(expected, reference_matmul(ai, gi, true, false));
  }
  EXPECT_LT(lat::relative_error(b.grad(), expected), 1e-14);
}

TEST(Matmul, Float32MatchesFloat64OnOddShapes) {
  const int64_t M = 67, K = 129, N = 35;
  uint64_t seed = 50;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // f32 inputs, and the same values in f64, so only the product's rounding differs.
      Tensor a = random(stored({3}, M, K, ta), seed++, DType::f32);
      Tensor b = random(stored({}, K, N, tb), seed++, DType::f32);
      Tensor out32 = lat::matmul(a, b, ta, tb);
      Tensor out64 = lat::matmul(a.to(DType::f64), b.to(DType::f64), ta, tb);
      EXPECT_LT(lat::relative_error(out32, out64), 1e-5) << "ta=" << ta << " tb=" << tb;
      Tensor bb = random(stored({3}, K, N, tb), seed++, DType::f32);
      EXPECT_LT(lat::relative_error(lat::matmul(a, bb, ta, tb), lat::matmul(a.to(DType::f64), bb.to(DType::f64), ta, tb)),
                1e-5);
    }
}

TEST(Matmul, Float32GradientsMatchFloat64) {
  Tensor a32 = random({2, 67, 129}, 60, DType::f32, true);
  Tensor b32 = random({129, 35}, 61, DType::f32, true);
  Tensor g = random({2, 67, 35}, 62, DType::f32);
  Tensor a64 = a32.detach().to(DType::f64).set_requires_grad(true);
  Tensor b64 = b32.detach().to(DType::f64).set_requires_grad(true);
  lat::backward(lat::matmul(a32, b32), g);
  lat::backward(lat::matmul(a64, b64), g.to(DType::f64));
  EXPECT_LT(lat::relative_error(a32.grad(), a64.grad()), 1e-5);
  EXPECT_LT(lat::relative_error(b32.grad(), b64.grad()), 1e-5);
}

TEST(Matmul, RepeatedShapesReuseCachedPrimitives) {
  Tensor a = random({4, 33, 17}, 70, DType::f32, true);
  Tensor b = random({17, 9}, 71, DType::f32, true);
  Tensor c = random({4, 17, 9}, 72, DType::f32);
  auto step = [&] {
    lat::backward(lat::sum(lat::add(lat::matmul(a, b), lat::matmul(a, c))));
  };
  step();
  const int64_t cached = lat::cpu::gemm_cache_size();
  for (int i = 0; i < 20; ++i) step();
  EXPECT_EQ(lat::cpu::gemm_cache_size(), cached);
}

// Every product gives the same bits at every thread count (what makes training reproducible
// across thread counts), and is accurate against the float64 loop: shapes where oneDNN's
// sgemm threading would split the sum over K (small M x N, long K), several output tiles, a
// batch, both transposes and accumulation into C. The ctest entry Gemm.sgemm_path runs this
// with oneDNN capped at AVX2, where it takes its sgemm-based implementation.
TEST(Matmul, GemmHasTheSameBitsAtEveryThreadCount) {
  struct Case {
    int64_t batch, M, N, K;
    bool trans_a, trans_b;
    float beta;
  };
  const Case cases[] = {{1, 64, 64, 3000, true, false, 0.0f},  {1, 65, 256, 9000, true, false, 1.0f},
                        {1, 291, 64, 64, false, true, 0.0f},   {3, 40, 50, 2500, false, false, 0.5f},
                        {1, 1100, 1030, 70, false, false, 0.0f}, {1, 7, 1500, 4100, true, true, 0.0f}};
  for (const Case& c : cases) {
    const int64_t a_rows = c.trans_a ? c.K : c.M, a_cols = c.trans_a ? c.M : c.K;
    const int64_t b_rows = c.trans_b ? c.N : c.K, b_cols = c.trans_b ? c.K : c.N;
    const std::vector<double> a64 = random({c.batch, a_rows, a_cols}, 80).to_vector<double>();
    const std::vector<double> b64 = random({c.batch, b_rows, b_cols}, 81).to_vector<double>();
    const std::vector<double> c64 = random({c.batch, c.M, c.N}, 82).to_vector<double>();
    const std::vector<float> a(a64.begin(), a64.end()), b(b64.begin(), b64.end()), c0(c64.begin(), c64.end());
    std::vector<std::vector<float>> results;
    const int before = omp_get_max_threads();
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<float> out = c0;
      lat::cpu::GemmBatch g;
      g.batch = c.batch, g.M = c.M, g.N = c.N, g.K = c.K;
      g.A = a.data(), g.lda = a_cols, g.stride_a = a_rows * a_cols, g.trans_a = c.trans_a;
      g.B = b.data(), g.ldb = b_cols, g.stride_b = b_rows * b_cols, g.trans_b = c.trans_b;
      g.C = out.data(), g.ldc = c.N, g.stride_c = c.M * c.N, g.beta = c.beta;
      lat::cpu::gemm_batched(g);
      results.push_back(out);
    }
    omp_set_num_threads(before);
    const std::string shape = std::to_string(c.batch) + "x" + std::to_string(c.M) + "x" + std::to_string(c.N) + "x" +
                              std::to_string(c.K);
    for (size_t run : {1, 2}) {
      int64_t differing = 0;
      for (size_t i = 0; i < results[0].size(); ++i) differing += std::memcmp(&results[run][i], &results[0][i], 4) != 0;
      EXPECT_EQ(differing, 0) << "elements of C that differ, " << run + 1 << " threads vs 1, product " << shape;
    }
    std::vector<double> expected = c64;
    lat::cpu::gemm_batched_f64(c.batch, c.M, c.N, c.K, a64.data(), a_cols, a_rows * a_cols, c.trans_a, b64.data(),
                               b_cols, b_rows * b_cols, c.trans_b, expected.data(), c.N, c.M * c.N, 1.0, c.beta);
    double worst = 0;
    for (size_t i = 0; i < expected.size(); ++i)
      worst = std::max(worst, std::abs(results[0][i] - expected[i]) / std::sqrt(static_cast<double>(c.K)));
    EXPECT_LT(worst, 1e-5) << "error per sqrt(K) against float64, product " << shape;
  }
}

TEST(Matmul, GemmInsideAParallelRegionIsAnError) {
  std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4, 0.0f);
  lat::cpu::GemmBatch g;
  g.M = g.N = g.K = 2;
  g.A = a.data(), g.lda = 2, g.B = b.data(), g.ldb = 2, g.C = c.data(), g.ldc = 2;
  lat::cpu::gemm_batched(g);  // serial: fine
  EXPECT_EQ(c, std::vector<float>(4, 2.0f));
  int errors = 0, team = 0;
#pragma omp parallel num_threads(2) reduction(+ : errors)
  {
#pragma omp single
    team = omp_get_num_threads();
    // GoogleTest assertions are thread-safe: each thread checks its own error.
    const std::string message = expect_error([&] { lat::cpu::gemm_batched(g); }, {"inside an OpenMP parallel region"});
    errors += !message.empty();
  }
  ASSERT_EQ(team, 2) << "the test needs a team of two threads";
  EXPECT_EQ(errors, 2);
}

TEST(Matmul, ErrorsNameOpArgumentAndShapes) {
  Tensor a = Tensor::zeros({2, 3});
  expect_error([&] { lat::matmul(a, Tensor::zeros({4, 5})); }, {"matmul", "b", "[4, 5]", "[2, 3]"});
  expect_error([&] { lat::matmul(a, Tensor::zeros({3, 5}), true, false); }, {"matmul", "b"});
  expect_error([&] { lat::matmul(a, Tensor::zeros({3, 5}, DType::f64)); }, {"matmul", "b", "f64"});
  expect_error([&] { lat::matmul(Tensor::zeros({3}), Tensor::zeros({3, 5})); }, {"matmul", "a", "[3]"});
  expect_error([&] { lat::matmul(a, Tensor::zeros({3})); }, {"matmul", "b", "[3]"});
  expect_error([&] { lat::matmul(Tensor::zeros({2, 3}, DType::i64), Tensor::zeros({3, 5}, DType::i64)); },
               {"matmul", "a", "i64"});
  expect_error([&] { lat::matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 5})); },
               {"matmul", "[2, 2, 3]", "[3, 3, 5]", "broadcast"});
  expect_error([&] { lat::matmul(Tensor(), a); }, {"matmul", "a", "undefined"});
}

}  // namespace
