// Reductions: sum and mean over everything and over one axis (negative axes, keepdim), max
// over an axis (gradient to the first maximum), sum_to. Forward values against a naive
// float64 loop, gradients against central finite differences (f64), the parallel paths in
// f32 against f64, and errors that name the op, the argument and the shape.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "lat/lat.h"
#include "tests/expect_error.h"
#include "tests/threads_testing.h"

namespace lat {
namespace {

constexpr double kGradTol = 1e-6;

Tensor uniform64(const Shape& shape, uint64_t seed, double low = -2.0, double high = 2.0, bool requires_grad = true) {
  Generator gen(seed);
  Tensor t = Tensor::uniform(shape, gen, low, high, DType::f64);
  t.set_requires_grad(requires_grad);
  return t;
}

enum class Kind { sum, mean, max };

// Naive reduction of `a` over axis `ax` (non-negative), in double: output in row-major order
// of the shape without the axis.
std::vector<double> reference_reduce(const Tensor& a, int64_t ax, Kind kind) {
  std::vector<double> x = a.to_vector<double>();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < ax; ++d) outer *= a.shape()[d];
  for (int64_t d = ax + 1; d < a.dim(); ++d) inner *= a.shape()[d];
  const int64_t n = a.shape()[ax];
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = kind == Kind::max ? x[o * n * inner + i] : 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const double v = x[(o * n + j) * inner + i];
        acc = kind == Kind::max ? std::max(acc, v) : acc + v;
      }
      out.push_back(kind == Kind::mean ? acc / static_cast<double>(n) : acc);
    }
  return out;
}

Shape reduced(const Shape& s, int64_t ax, bool keepdim) {
  Shape out = s;
  if (keepdim) {
    out[ax] = 1;
  } else {
    out.erase(out.begin() + ax);
  }
  return out;
}

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  return relative_error(Tensor::from_vector(a, {static_cast<int64_t>(a.size())}),
                        Tensor::from_vector(b, {static_cast<int64_t>(b.size())}));
}

Tensor reduce(const Tensor& a, int64_t axis, bool keepdim, Kind kind) {
  switch (kind) {
    case Kind::sum: return sum(a, axis, keepdim);
    case Kind::mean: return mean(a, axis, keepdim);
    case Kind::max: return max(a, axis, keepdim);
  }
  return Tensor();
}

const char* name(Kind kind) { return kind == Kind::sum ? "sum" : kind == Kind::mean ? "mean" : "max"; }

TEST(ReduceAll, SumAndMeanOfAllElements) {
  Tensor a = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(a).shape(), Shape{});
  EXPECT_EQ(sum(a).item(), 21.0);
  EXPECT_EQ(mean(a).item(), 3.5);
  EXPECT_EQ(sum(Tensor::scalar(2.5, DType::f64)).item(), 2.5);
  EXPECT_EQ(sum(Tensor::zeros({0, 3})).item(), 0.0);
  for (const Shape& shape : {Shape{}, Shape{3}, Shape{2, 3, 4}}) {
    Tensor x = uniform64(shape, 1);
    EXPECT_LT(grad_check([](const std::vector<Tensor>& v) { return sum(v[0]); }, {x}).max_rel_error, kGradTol);
    EXPECT_LT(grad_check([](const std::vector<Tensor>& v) { return mean(v[0]); }, {x}).max_rel_error, kGradTol);
  }
}

TEST(ReduceAll, LargeF32SumAccumulatesInDouble) {
  // 1e6 values of 0.1f: a float accumulator drifts by ~1%; the double one is exact to f32.
  Tensor a = Tensor::full({1000, 1000}, 0.1, DType::f32);
  const double expected = 1e6 * static_cast<double>(0.1f);
  EXPECT_NEAR(sum(a).item(), expected, expected * 1e-7);
  EXPECT_NEAR(mean(a).item(), static_cast<double>(0.1f), 1e-8);
}

TEST(ReduceAxis, ForwardMatchesNaiveLoopForEveryAxisAndKeepdim) {
  const Shape shape{2, 3, 4};
  Tensor a = uniform64(shape, 2, -2.0, 2.0, false);
  for (Kind kind : {Kind::sum, Kind::mean, Kind::max})
    for (int64_t axis : {0, 1, 2, -1, -2, -3})
      for (bool keepdim : {false, true}) {
        const int64_t ax = axis < 0 ? axis + 3 : axis;
        Tensor out = reduce(a, axis, keepdim, kind);
        EXPECT_EQ(out.shape(), reduced(shape, ax, keepdim)) << name(kind) << " axis " << axis;
        EXPECT_LT(rel_err(out.to_vector<double>(), reference_reduce(a, ax, kind)), 1e-15)
            << name(kind) << " axis " << axis << " keepdim " << keepdim;
      }
}

TEST(ReduceAxis, GradientsMatchFiniteDifferences) {
  for (Kind kind : {Kind::sum, Kind::mean, Kind::max})
    for (int64_t axis : {0, 1, 2, -1})
      for (bool keepdim : {false, true}) {
        Tensor a = uniform64({2, 3, 4}, 3);
        GradCheckResult r = grad_check(
            [&](const std::vector<Tensor>& v) { return reduce(v[0], axis, keepdim, kind); }, {a});
        EXPECT_LT(r.max_rel_error, kGradTol) << name(kind) << " axis " << axis << " keepdim " << keepdim;
      }
  // A 1-D input reduces to a scalar.
  Tensor v = uniform64({5}, 4);
  for (Kind kind : {Kind::sum, Kind::mean, Kind::max}) {
    GradCheckResult r = grad_check([&](const std::vector<Tensor>& x) { return reduce(x[0], 0, false, kind); }, {v});
    EXPECT_LT(r.max_rel_error, kGradTol) << name(kind);
  }
}

TEST(ReduceAxis, LargeF32PathsMatchF64Reference) {
  // Long axis with few outputs (split across threads), few long rows (inner = 1), many
  // outputs in blocks of the inner dimension.
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{40000, 8}, 0}, {{8, 40000}, 1}, {{20, 50, 300}, 1}, {{300, 200}, 1}, {{3, 20000, 1}, 1}};
  for (const auto& [shape, axis] : cases) {
    Tensor a32 = uniform64(shape, 5, -1.0, 1.0, false).to(DType::f32);
    for (Kind kind : {Kind::sum, Kind::mean, Kind::max}) {
      Tensor out = reduce(a32, axis, false, kind);
      ASSERT_EQ(out.dtype(), DType::f32);
      EXPECT_LT(rel_err(out.to_vector<double>(), reference_reduce(a32, axis, kind)), 1e-6)
          << name(kind) << " " << shape_str(shape) << " axis " << axis;
    }
    Tensor g = Tensor::ones(reduced(shape, axis, false), DType::f32);
    Tensor x = a32.detach().set_requires_grad(true);
    backward(sum(x, axis), g);
    EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(x.numel(), 1.0)) << shape_str(shape);
  }
}

TEST(ReduceMax, GradientGoesToTheFirstMaximum) {
  Tensor a = Tensor::from_vector(std::vector<double>{1, 3, 3, 2, 2, 1}, {2, 3}, true);
  Tensor m = max(a, 1);
  EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{3, 2}));
  backward(sum(m));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0, 1, 0, 1, 0, 0}));
  Tensor b = Tensor::from_vector(std::vector<double>{5, 5, 1, 7}, {2, 2}, true);
  backward(sum(max(b, 0, true)));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 0, 0, 1}));
}

TEST(ReduceMax, NegativeValuesAndNaNPropagates) {
  Tensor a = Tensor::from_vector(std::vector<double>{-5, -2, -9}, {3});
  EXPECT_EQ(max(a, 0).item(), -2.0);
  Tensor b = Tensor::from_vector(std::vector<double>{1, NAN, 3}, {3});
  EXPECT_TRUE(std::isnan(max(b, 0).item()));
}

TEST(ReduceTape, OneNodePerReduction) {
  clear_tape();
  Tensor a = uniform64({2, 3}, 6);
  sum(a);
  sum(a, 0);
  mean(a);
  mean(a, 1, true);
  max(a, -1);
  EXPECT_EQ(tape_size(), 5u);
  clear_tape();
}

// Every branch of the CPU sum (one long row, few long rows, many rows, few outputs over a
// long axis, many outputs) in f64, where any change of the summation order shows in the
// last bits: the same bits at every thread count.
TEST(ReduceThreads, SumsAreTheSameBitsAtEveryThreadCount) {
  struct Case {
    Shape shape;
    int64_t axis;  // -1: all elements
  };
  for (const Case& c : {Case{{100003}, -1}, Case{{3, 50001}, 1}, Case{{5000, 7}, 1}, Case{{1, 20000, 8}, 1},
                        Case{{40, 300, 100}, 1}, Case{{2, 9000, 3}, 1}}) {
    const Tensor x = uniform64(c.shape, 9, -2.0, 2.0, false);
    const auto sums = testing::at_thread_counts(
        [&] { return (c.axis < 0 ? sum(x) : sum(x, c.axis)).to_vector<double>(); });
    EXPECT_EQ(sums[1], sums[0]) << shape_str(c.shape) << ": 2 threads vs 1";
    EXPECT_EQ(sums[2], sums[0]) << shape_str(c.shape) << ": 3 threads vs 1";
    EXPECT_LT(rel_err(sums[0], reference_reduce(x.reshape(c.axis < 0 ? Shape{1, x.numel()} : c.shape),
                                                c.axis < 0 ? 1 : c.axis, Kind::sum)),
              1e-12)
        << shape_str(c.shape);
  }
}

// ---- sum_to ----------------------------------------------------------------------------------
// Naive sum of `t` down to `shape`: each element of t adds into the element of the result
// that broadcasting would have read it from.
std::vector<double> reference_sum_to(const Tensor& t, const Shape& shape) {
  std::vector<double> x = t.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(shape_numel(shape)), 0.0);
  const int64_t nd = t.dim(), lead = nd - static_cast<int64_t>(shape.size());
  for (int64_t flat = 0; flat < t.numel(); ++flat) {
    int64_t rest = flat, off = 0, stride = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t idx = rest % t.shape()[d];
      rest /= t.shape()[d];
      if (d < lead) continue;
      const int64_t size = shape[d - lead];
      if (size != 1) off += idx * stride;
      stride *= size;
    }
    out[off] += x[flat];
  }
  return out;
}

TEST(SumTo, ForwardMatchesNaiveReference) {
  Tensor t = uniform64({2, 3, 4}, 7, -2.0, 2.0, false);
  for (const Shape& shape :
       {Shape{3, 1}, Shape{4}, Shape{}, Shape{1, 3, 4}, Shape{2, 1, 4}, Shape{1, 1, 1}, Shape{3, 4}, Shape{2, 3, 1}}) {
    Tensor out = sum_to(t, shape);
    ASSERT_EQ(out.shape(), shape);
    EXPECT_LT(rel_err(out.to_vector<double>(), reference_sum_to(t, shape)), 1e-15) << shape_str(shape);
  }
  // The same shape returns the tensor itself.
  EXPECT_EQ(sum_to(t, t.shape()).impl(), t.impl());
}

TEST(SumTo, GradientsMatchFiniteDifferences) {
  for (const Shape& shape : {Shape{3, 1}, Shape{4}, Shape{}, Shape{2, 1, 4}}) {
    Tensor t = uniform64({2, 3, 4}, 8);
    GradCheckResult r = grad_check([&](const std::vector<Tensor>& v) { return sum_to(v[0], shape); }, {t});
    EXPECT_LT(r.max_rel_error, kGradTol) << shape_str(shape);
  }
}

// ---- errors ----------------------------------------------------------------------------------
using testing::expect_error;

TEST(ReduceErrors, BadAxisNamesOpAxisAndShape) {
  Tensor a = Tensor::zeros({2, 3, 4});
  expect_error([&] { sum(a, 3); }, {"sum:", "axis", "[2, 3, 4]", "3"});
  expect_error([&] { mean(a, -4); }, {"mean:", "axis", "-4"});
  expect_error([&] { max(a, 7, true); }, {"max:", "axis"});
  expect_error([&] { sum(Tensor::scalar(1.0), 0); }, {"sum:", "axis"});
}

TEST(ReduceErrors, I64AndEmptyAxisAreRejected) {
  Tensor ids = Tensor::arange(4);
  expect_error([&] { sum(ids); }, {"sum:", "i64"});
  expect_error([&] { mean(ids, 0); }, {"mean:", "i64"});
  expect_error([&] { max(ids, 0); }, {"max:", "i64"});
  expect_error([&] { max(Tensor::zeros({2, 0}), 1); }, {"max:", "empty"});
}

TEST(ReduceErrors, SumToIncompatibleShape) {
  Tensor t = Tensor::zeros({2, 3});
  expect_error([&] { sum_to(t, {4}); }, {"sum_to:", "[2, 3]", "[4]"});
  expect_error([&] { sum_to(t, {2, 2, 3}); }, {"sum_to:"});
  expect_error([&] { sum_to(t, {2, 1, 1}); }, {"sum_to:"});
}

}  // namespace
}  // namespace lat
