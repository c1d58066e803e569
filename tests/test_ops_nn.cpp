// Fused NN ops (rms_norm, softmax, log_softmax, cross_entropy): forward values against
// float64 loop references, finite-difference gradients of every input, float32
// accuracy, stability for logits of magnitude 1e4, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lat/grad_check.h"
#include "lat/ops.h"
#include "lat/tape.h"
#include "tests/expect_error.h"
#include "tests/threads_testing.h"

namespace {

using lat::DType;
using lat::Shape;
using lat::Tensor;
using lat::testing::expect_error;

Tensor random(const Shape& shape, uint64_t seed, bool requires_grad = false, double std = 1.0) {
  lat::Generator gen(seed);
  Tensor t = Tensor::randn(shape, gen, DType::f64, 0.0, std);
  t.set_requires_grad(requires_grad);
  return t;
}

constexpr double kGradTol = 1e-7;

// ---- float64 references, row by row over the last axis ------------------------------
Tensor reference_rms_norm(const Tensor& x, const Tensor& w, double eps) {
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), y(xv.size());
  const int64_t d = x.size(-1);
  for (size_t r = 0; r < xv.size() / d; ++r) {
    double ss = 0.0;
    for (int64_t j = 0; j < d; ++j) ss += xv[r * d + j] * xv[r * d + j];
    double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = xv[r * d + j] * inv * wv[j];
  }
  return Tensor::from_vector(y, x.shape());
}

/// log-softmax of each row, computed in long double.
std::vector<double> reference_log_softmax(const Tensor& x) {
  std::vector<double> xv = x.to_vector<double>(), y(xv.size());
  const int64_t d = x.size(-1);
  for (size_t r = 0; r < xv.size() / d; ++r) {
    long double m = xv[r * d];
    for (int64_t j = 1; j < d; ++j) m = std::max<long double>(m, xv[r * d + j]);
    long double s = 0.0L;
    for (int64_t j = 0; j < d; ++j) s += std::exp(static_cast<long double>(xv[r * d + j]) - m);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = static_cast<double>(xv[r * d + j] - m - std::log(s));
  }
  return y;
}

double reference_cross_entropy(const Tensor& logits, const std::vector<int64_t>& targets, int64_t ignore_index) {
  std::vector<double> ls = reference_log_softmax(logits);
  const int64_t v = logits.size(1);
  double total = 0.0;
  int64_t count = 0;
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == ignore_index) continue;
    total -= ls[r * v + targets[r]];
    ++count;
  }
  return count ? total / count : 0.0;
}

// ---- rms_norm -------------------------------------------------------------------------
TEST(RmsNorm, ForwardMatchesReference) {
  Tensor x = random({3, 5, 7}, 1);
  Tensor w = random({7}, 2);
  Tensor ref = reference_rms_norm(x, w, 1e-6);
  EXPECT_LT(lat::relative_error(lat::rms_norm(x, w, 1e-6), ref), 1e-14);
  EXPECT_LT(lat::relative_error(lat::rms_norm(x.to(DType::f32), w.to(DType::f32), 1e-6), ref), 1e-6);
  // Known answer: x = [3, 4], w = 1, eps = 0: rms = sqrt(12.5).
  Tensor k = lat::rms_norm(Tensor::from_vector(std::vector<double>{3, 4}, {2}), Tensor::ones({2}, DType::f64), 0.0);
  EXPECT_NEAR(k.at({0}), 3.0 / std::sqrt(12.5), 1e-15);
  EXPECT_NEAR(k.at({1}), 4.0 / std::sqrt(12.5), 1e-15);
}

TEST(RmsNorm, GradCheckXAndWeight) {
  Tensor x = random({2, 3, 6}, 3, true);
  Tensor w = random({6}, 4, true);
  auto r = lat::grad_check([](const std::vector<Tensor>& v) { return lat::rms_norm(v[0], v[1], 1e-5); }, {x, w});
  ASSERT_EQ(r.rel_error.size(), 2u);
  EXPECT_LT(r.max_rel_error, kGradTol);
  // Each input alone (the kernel skips the gradient that is not needed).
  w.set_requires_grad(false);
  EXPECT_LT(lat::grad_check([](const std::vector<Tensor>& v) { return lat::rms_norm(v[0], v[1]); }, {x, w})
                .max_rel_error,
            kGradTol);
  x.set_requires_grad(false);
  w.set_requires_grad(true);
  EXPECT_LT(lat::grad_check([](const std::vector<Tensor>& v) { return lat::rms_norm(v[0], v[1]); }, {x, w})
                .max_rel_error,
            kGradTol);
}

TEST(RmsNorm, Float32GradientsMatchFloat64OnLargeInput) {
  // Many rows: the per-thread partial sums of dweight are exercised.
  Tensor x64 = random({300, 96}, 5, true);
  Tensor w64 = random({96}, 6, true);
  Tensor g = random({300, 96}, 7);
  Tensor x32 = x64.detach().to(DType::f32).set_requires_grad(true);
  Tensor w32 = w64.detach().to(DType::f32).set_requires_grad(true);
  lat::backward(lat::rms_norm(x64, w64), g);
  lat::backward(lat::rms_norm(x32, w32), g.to(DType::f32));
  EXPECT_LT(lat::relative_error(x32.grad(), x64.grad()), 1e-6);
  EXPECT_LT(lat::relative_error(w32.grad(), w64.grad()), 1e-6);
}

// ---- softmax and log_softmax -------------------------------------------------------------
TEST(Softmax, ForwardMatchesReferenceAndIsShiftInvariant) {
  Tensor x = random({4, 3, 9}, 8, false, 3.0);
  std::vector<double> ls = reference_log_softmax(x);
  std::vector<double> expected(ls.size());
  for (size_t i = 0; i < ls.size(); ++i) expected[i] = std::exp(ls[i]);
  Tensor ref = Tensor::from_vector(expected, x.shape());
  EXPECT_LT(lat::relative_error(lat::softmax(x), ref), 1e-14);
  EXPECT_LT(lat::relative_error(lat::softmax(lat::add(x, 1e4)), ref), 1e-10);
  EXPECT_LT(lat::relative_error(lat::softmax(x.to(DType::f32)), ref), 1e-6);
  // Logits of magnitude 1e4 in f32: finite, and the dominant entry takes all the mass.
  Tensor big = Tensor::from_vector(std::vector<float>{1e4f, -1e4f, 0.0f, 9990.0f}, {1, 4});
  std::vector<float> y = lat::softmax(big).to_vector<float>();
  EXPECT_NEAR(y[0], 1.0f / (1.0f + std::exp(-10.0f)), 1e-6f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_NEAR(y[3], std::exp(-10.0f) / (1.0f + std::exp(-10.0f)), 1e-9f);
}

TEST(Softmax, GradCheck) {
  Tensor x = random({3, 2, 5}, 9, true);
  auto r = lat::grad_check([](const std::vector<Tensor>& v) { return lat::softmax(v[0]); }, {x});
  EXPECT_LT(r.max_rel_error, kGradTol);
}

TEST(LogSoftmax, ForwardMatchesReferenceIncludingHugeLogits) {
  Tensor x = random({5, 11}, 10, false, 2.0);
  Tensor ref = Tensor::from_vector(reference_log_softmax(x), x.shape());
  EXPECT_LT(lat::relative_error(lat::log_softmax(x), ref), 1e-14);
  EXPECT_LT(lat::relative_error(lat::log_softmax(x.to(DType::f32)), ref), 1e-6);
  Tensor big = lat::mul(x, 5e3);  // entries up to ~3e4
  Tensor big_ref = Tensor::from_vector(reference_log_softmax(big), big.shape());
  Tensor y = lat::log_softmax(big.to(DType::f32));
  for (float v : y.to_vector<float>()) EXPECT_TRUE(std::isfinite(v));
  EXPECT_LT(lat::relative_error(y, big_ref), 1e-6);
}

TEST(LogSoftmax, GradCheck) {
  Tensor x = random({4, 6}, 11, true);
  auto r = lat::grad_check([](const std::vector<Tensor>& v) { return lat::log_softmax(v[0]); }, {x});
  EXPECT_LT(r.max_rel_error, kGradTol);
}

// ---- cross_entropy -------------------------------------------------------------------------
TEST(CrossEntropy, ForwardMatchesReferenceWithIgnoreIndex) {
  Tensor logits = random({6, 7}, 12, false, 2.0);
  std::vector<int64_t> t{3, -100, 0, 6, -100, 2};
  Tensor targets = Tensor::from_vector(t, {6});
  double ref = reference_cross_entropy(logits, t, -100);
  Tensor loss = lat::cross_entropy(logits, targets);
  EXPECT_EQ(loss.shape(), Shape{});
  EXPECT_NEAR(loss.item(), ref, 1e-14 * std::abs(ref));
  EXPECT_NEAR(lat::cross_entropy(logits.to(DType::f32), targets).item(), ref, 1e-6 * std::abs(ref));
  // A custom ignore_index: 6 is skipped, -100 is now an error.
  std::vector<int64_t> t2{3, 6, 0, 6, 1, 2};
  EXPECT_NEAR(lat::cross_entropy(logits, Tensor::from_vector(t2, {6}), 6).item(), reference_cross_entropy(logits, t2, 6),
              1e-14);
  // Uniform logits: the loss is log(vocab).
  EXPECT_NEAR(lat::cross_entropy(Tensor::zeros({2, 5}, DType::f64), Tensor::from_vector(std::vector<int64_t>{1, 4}, {2}))
                  .item(),
              std::log(5.0), 1e-15);
}

TEST(CrossEntropy, GradCheckWithIgnoreIndex) {
  Tensor logits = random({5, 4}, 13, true);
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{1, -100, 3, 0, -100}, {5});
  auto r = lat::grad_check([&](const std::vector<Tensor>& v) { return lat::cross_entropy(v[0], targets); }, {logits});
  EXPECT_LT(r.max_rel_error, kGradTol);
  // Ignored rows get exactly zero gradient.
  lat::backward(lat::cross_entropy(logits, targets));
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_EQ(logits.grad().at({1, j}), 0.0);
    EXPECT_EQ(logits.grad().at({4, j}), 0.0);
  }
}

TEST(CrossEntropy, BackwardIsSoftmaxMinusOnehotOverCount) {
  Tensor logits = random({3, 5}, 14, true);
  std::vector<int64_t> t{4, -100, 2};
  lat::backward(lat::mul(lat::cross_entropy(logits, Tensor::from_vector(t, {3})), 3.0));
  std::vector<double> ls = reference_log_softmax(logits);
  for (int64_t r : {0, 2})
    for (int64_t j = 0; j < 5; ++j) {
      double expected = 3.0 * (std::exp(ls[r * 5 + j]) - (j == t[r] ? 1.0 : 0.0)) / 2.0;
      EXPECT_NEAR(logits.grad().at({r, j}), expected, 1e-15);
    }
}

TEST(CrossEntropy, AllIgnoredGivesZeroLossAndZeroGradient) {
  Tensor logits = random({3, 4}, 15, true);
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{-100, -100, -100}, {3});
  Tensor loss = lat::cross_entropy(logits, targets);
  EXPECT_EQ(loss.item(), 0.0);
  lat::backward(loss);
  for (double g : logits.grad().to_vector<double>()) EXPECT_EQ(g, 0.0);
}

TEST(CrossEntropy, StableForLogitsOfMagnitude1e4) {
  // Row 0: logits 1e4, 1e4 - 1, 1e4 - 2, target 1; row 1: -1e4, 1e4, 0, target 0.
  std::vector<float> v{1e4f, 1e4f - 1.0f, 1e4f - 2.0f, -1e4f, 1e4f, 0.0f};
  Tensor logits = Tensor::from_vector(v, {2, 3}, true);
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{1, 0}, {2});
  Tensor loss = lat::cross_entropy(logits, targets);
  const double row0 = std::log(1.0 + std::exp(-1.0) + std::exp(-2.0)) + 1.0;
  const double row1 = 2e4 + std::log(1.0 + std::exp(-2e4) + std::exp(-1e4));
  ASSERT_TRUE(std::isfinite(loss.item()));
  EXPECT_NEAR(loss.item(), (row0 + row1) / 2.0, 1e-6 * (row0 + row1));
  lat::backward(loss);
  std::vector<float> g = logits.grad().to_vector<float>();
  for (float x : g) EXPECT_TRUE(std::isfinite(x));
  const double z = 1.0 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(g[0], 0.5 * (1.0 / z), 1e-6);
  EXPECT_NEAR(g[1], 0.5 * (std::exp(-1.0) / z - 1.0), 1e-6);
  EXPECT_NEAR(g[2], 0.5 * (std::exp(-2.0) / z), 1e-6);
  EXPECT_NEAR(g[3], -0.5, 1e-6);
  EXPECT_NEAR(g[4], 0.5, 1e-6);
  EXPECT_NEAR(g[5], 0.0, 1e-6);
}

TEST(CrossEntropy, Float32MatchesFloat64OnLargeBatch) {
  // Big enough for the OpenMP path: [256, 130].
  Tensor logits = random({256, 130}, 16, false, 4.0);
  std::vector<int64_t> t(256);
  for (int64_t i = 0; i < 256; ++i) t[i] = i % 7 == 0 ? -100 : (i * 37) % 130;
  Tensor targets = Tensor::from_vector(t, {256});
  Tensor l64 = logits.detach().set_requires_grad(true);
  Tensor l32 = logits.to(DType::f32).set_requires_grad(true);
  // backward() clears the whole tape, so each loss is differentiated before the next forward.
  Tensor loss64 = lat::cross_entropy(l64, targets);
  lat::backward(loss64);
  Tensor loss32 = lat::cross_entropy(l32, targets);
  lat::backward(loss32);
  EXPECT_NEAR(loss64.item(), reference_cross_entropy(logits, t, -100), 1e-12);
  EXPECT_NEAR(loss32.item(), loss64.item(), 1e-6 * loss64.item());
  EXPECT_LT(lat::relative_error(l32.grad(), l64.grad()), 1e-6);
}

// The f32 kernels take exp from fast_exp, within 2.5e-7 relatively (test_fast_exp). Logits in
// [-4, 4] (f32 values; the f64 op on the same values is the reference): each x - max, at most
// 8, is rounded to f32 (8 * 2^-24 relatively of exp), so the log-sum-exp and the mean loss are
// within 8 * 2^-24 + 2.5e-7 absolutely, and the f32 loss within 2^-24 of itself more. Each
// gradient element is p / count, minus 1 / count at the target, with p = exp(x - lse) and
// x - lse at most 8 + log(vocab) in size before its f32 rounding: p within
// (8 + log vocab) * 2^-24 + 2.5e-7 relatively, and one more 2^-24 for each f32 rounding: of
// 1 / count, of the product and of the subtraction.
TEST(CrossEntropy, Float32IsWithinTheBoundOfItsExpOnLargeVocab) {
  const int64_t rows = 300, vocab = 1000;  // vocab past the 256-entry chunks of the row sums
  lat::Generator gen(31);
  const std::vector<float> u = Tensor::uniform({rows * vocab}, gen, -4.0, 4.0).to_vector();
  std::vector<int64_t> t(rows);
  for (int64_t i = 0; i < rows; ++i) t[i] = (i * 389) % vocab;
  const Tensor targets = Tensor::from_vector(t, {rows});
  Tensor l64 = Tensor::from_vector(std::vector<double>(u.begin(), u.end()), {rows, vocab}, true);
  Tensor l32 = l64.detach().to(DType::f32).set_requires_grad(true);
  const Tensor loss64 = lat::cross_entropy(l64, targets);
  lat::backward(loss64);
  const Tensor loss32 = lat::cross_entropy(l32, targets);
  lat::backward(loss32);
  const double ulp = std::ldexp(1.0, -24);
  EXPECT_NEAR(loss32.item(), loss64.item(), 8 * ulp + 2.5e-7 + ulp * loss64.item());
  const std::vector<double> g64 = l64.grad().to_vector<double>();
  const std::vector<float> g32 = l32.grad().to_vector();
  const double p_error = (8 + std::log(static_cast<double>(vocab))) * ulp + 2.5e-7 + 2 * ulp;
  double worst = 0.0;  // the largest error over its bound
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < vocab; ++j) {
      const size_t i = static_cast<size_t>(r * vocab + j);
      const bool target = j == t[r];
      const double p = g64[i] * rows + (target ? 1.0 : 0.0);
      const double bound = (p_error * p + (target ? ulp : 0.0)) / rows;
      worst = std::max(worst, std::abs(g32[i] - g64[i]) / bound);
    }
  }
  EXPECT_LE(worst, 1.0);
}

// ---- thread counts -----------------------------------------------------------------------------
// The sums across rows (rms_norm's dweight, the cross-entropy total) in f64, where any change
// of the summation order shows in the last bits: the same bits at every thread count.
TEST(NnOps, SumsAcrossRowsAreTheSameBitsAtEveryThreadCount) {
  const int64_t rows = 1000, dim = 96;  // past the size where the row loops go parallel
  const Tensor x = random({rows, dim}, 17), w = random({dim}, 18), g = random({rows, dim}, 19);
  const auto dweights = lat::testing::at_thread_counts([&] {
    Tensor wl = w.detach().set_requires_grad(true);
    lat::backward(lat::rms_norm(x, wl), g);
    return wl.grad().to_vector<double>();
  });
  EXPECT_EQ(dweights[1], dweights[0]) << "2 threads vs 1";
  EXPECT_EQ(dweights[2], dweights[0]) << "3 threads vs 1";

  const Tensor logits = random({rows, dim}, 20, false, 3.0);
  std::vector<int64_t> t(rows);
  for (int64_t i = 0; i < rows; ++i) t[i] = i % 11 == 0 ? -100 : (i * 31) % dim;
  const Tensor targets = Tensor::from_vector(t, {rows});
  const auto losses = lat::testing::at_thread_counts([&] { return lat::cross_entropy(logits, targets).item(); });
  EXPECT_EQ(losses[1], losses[0]) << "2 threads vs 1";
  EXPECT_EQ(losses[2], losses[0]) << "3 threads vs 1";
  EXPECT_NEAR(losses[0], reference_cross_entropy(logits, t, -100), 1e-12);
}

// ---- errors ------------------------------------------------------------------------------------
TEST(NnOps, Errors) {
  Tensor x = Tensor::zeros({2, 4});
  expect_error([&] { lat::rms_norm(x, Tensor::ones({3})); }, {"rms_norm", "weight", "[4]", "[3]"});
  expect_error([&] { lat::rms_norm(x, Tensor::ones({4}, DType::f64)); }, {"rms_norm", "weight", "f64"});
  expect_error([&] { lat::rms_norm(Tensor::zeros({2, 4}, DType::i64), Tensor::ones({4})); }, {"rms_norm", "x", "i64"});
  expect_error([&] { lat::softmax(Tensor::scalar(1.0)); }, {"softmax", "x", "[]"});
  expect_error([&] { lat::log_softmax(Tensor::zeros({3}, DType::i64)); }, {"log_softmax", "x", "i64"});
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{0, 4}, {2});
  expect_error([&] { lat::cross_entropy(x, targets); },
               {"cross_entropy", "targets", "target 4", "position 1", "[0, 4)"});
  expect_error([&] { lat::cross_entropy(x, Tensor::from_vector(std::vector<int64_t>{-1, 0}, {2})); },
               {"cross_entropy", "target -1", "position 0"});
  expect_error([&] { lat::cross_entropy(x, Tensor::from_vector(std::vector<int64_t>{0, 0, 0}, {3})); },
               {"cross_entropy", "targets", "[2]", "[3]"});
  expect_error([&] { lat::cross_entropy(x, Tensor::zeros({2})); }, {"cross_entropy", "targets", "i64", "f32"});
  expect_error([&] { lat::cross_entropy(Tensor::zeros({2, 2, 4}), targets); }, {"cross_entropy", "logits", "[2, 2, 4]"});
}

}  // namespace
