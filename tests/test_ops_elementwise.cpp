// Elementwise ops: forward values against a naive float64 reference or a known answer,
// gradients against central finite differences (lat::grad_check, f64) over NumPy
// broadcasting cases, one tape node per op, and errors that name the op, the argument and
// both shapes or dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "lat/lat.h"
#include "tests/expect_error.h"

namespace lat {
namespace {

constexpr double kGradTol = 1e-6;  // finite differences in f64 with eps = 1e-6

using BinaryOp = std::function<Tensor(const Tensor&, const Tensor&)>;
using BinaryRef = std::function<double(double, double)>;

Tensor uniform64(const Shape& shape, uint64_t seed, double low, double high, bool requires_grad = true) {
  Generator gen(seed);
  Tensor t = Tensor::uniform(shape, gen, low, high, DType::f64);
  t.set_requires_grad(requires_grad);
  return t;
}

// Naive broadcasting reference: each output element's operands found by decomposing its
// flat index, independently of the kernels' fast paths.
std::vector<double> reference_binary(const Tensor& a, const Tensor& b, const Shape& out_shape, const BinaryRef& f) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  const int64_t nd = static_cast<int64_t>(out_shape.size());
  auto offset = [&](const Shape& in, int64_t flat) {
    int64_t off = 0, stride = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t idx = flat % out_shape[d];
      flat /= out_shape[d];
      const int64_t k = d - (nd - static_cast<int64_t>(in.size()));
      if (k < 0) continue;
      if (in[k] != 1) off += idx * stride;
      stride *= in[k];
    }
    return off;
  };
  std::vector<double> out(static_cast<size_t>(shape_numel(out_shape)));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i)
    out[i] = f(x[offset(a.shape(), i)], y[offset(b.shape(), i)]);
  return out;
}

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  return relative_error(Tensor::from_vector(a, {static_cast<int64_t>(a.size())}),
                        Tensor::from_vector(b, {static_cast<int64_t>(b.size())}));
}

struct BinaryCase {
  const char* name;
  BinaryOp op;
  BinaryRef ref;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double x, double y) { return x + y; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double x, double y) { return x - y; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double x, double y) { return x * y; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double x, double y) { return x / y; }},
  };
}

struct ShapePair {
  Shape a, b, out;
};

// Same shape, [2,3,4] op [3,1] (general path), [4] op [2,3,4] (row broadcast of a), scalars
// on either side, both sides broadcast ([2,1,4] op [3,1]), and a size-1 leading dim.
std::vector<ShapePair> broadcast_pairs() {
  return {{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {3, 1}, {2, 3, 4}}, {{4}, {2, 3, 4}, {2, 3, 4}},
          {{}, {2, 3}, {2, 3}},             {{2, 3}, {}, {2, 3}},          {{2, 1, 4}, {3, 1}, {2, 3, 4}},
          {{1, 3}, {3}, {1, 3}},            {{}, {}, {}},                  {{3, 1}, {1, 4}, {3, 4}}};
}

TEST(ElementwiseBinary, ForwardMatchesNaiveBroadcastReference) {
  for (const BinaryCase& c : binary_cases()) {
    for (const ShapePair& p : broadcast_pairs()) {
      Tensor a = uniform64(p.a, 1, -2.0, 2.0, false);
      Tensor b = uniform64(p.b, 2, 0.5, 2.0, false);  // away from 0 for div
      Tensor out = c.op(a, b);
      ASSERT_EQ(out.shape(), p.out) << c.name;
      EXPECT_LT(rel_err(out.to_vector<double>(), reference_binary(a, b, p.out, c.ref)), 1e-15)
          << c.name << " " << shape_str(p.a) << " op " << shape_str(p.b);
    }
  }
}

TEST(ElementwiseBinary, LargeF32FastPathsMatchF64Reference) {
  // Above the OpenMP threshold: same shape, scalar operand, row broadcast, general path.
  const std::vector<ShapePair> pairs = {{{300, 200}, {300, 200}, {300, 200}},
                                        {{300, 200}, {}, {300, 200}},
                                        {{300, 200}, {200}, {300, 200}},
                                        {{1, 200}, {300, 200}, {300, 200}},
                                        {{300, 1}, {300, 200}, {300, 200}},
                                        {{30, 10, 200}, {10, 1}, {30, 10, 200}}};
  for (const BinaryCase& c : binary_cases()) {
    for (const ShapePair& p : pairs) {
      Tensor a = uniform64(p.a, 3, -2.0, 2.0, false).to(DType::f32);
      Tensor b = uniform64(p.b, 4, 0.5, 2.0, false).to(DType::f32);
      Tensor out = c.op(a, b);
      ASSERT_EQ(out.dtype(), DType::f32);
      ASSERT_EQ(out.shape(), p.out);
      EXPECT_LT(rel_err(out.to_vector<double>(), reference_binary(a, b, p.out, c.ref)), 1e-7)
          << c.name << " " << shape_str(p.a) << " op " << shape_str(p.b);
    }
  }
}

TEST(ElementwiseBinary, GradientsMatchFiniteDifferencesWithBroadcasting) {
  for (const BinaryCase& c : binary_cases()) {
    for (const ShapePair& p : broadcast_pairs()) {
      Tensor a = uniform64(p.a, 5, -2.0, 2.0);
      Tensor b = uniform64(p.b, 6, 0.5, 2.0);
      GradCheckResult r = grad_check([&](const std::vector<Tensor>& x) { return c.op(x[0], x[1]); }, {a, b});
      ASSERT_EQ(r.rel_error.size(), 2u);
      EXPECT_LT(r.max_rel_error, kGradTol) << c.name << " " << shape_str(p.a) << " op " << shape_str(p.b);
    }
  }
}

TEST(ElementwiseBinary, SameTensorOnBothSides) {
  Tensor a = uniform64({3, 2}, 7, 0.5, 2.0);
  for (const BinaryCase& c : binary_cases()) {
    GradCheckResult r = grad_check([&](const std::vector<Tensor>& x) { return c.op(x[0], x[0]); }, {a});
    EXPECT_LT(r.max_rel_error, kGradTol) << c.name;
  }
}

TEST(ElementwiseBinary, OnlyInputsThatRequireGradGetOne) {
  clear_tape();
  Tensor a = uniform64({2, 3}, 8, -1.0, 1.0, true);
  Tensor b = uniform64({3}, 9, 0.5, 1.0, false);
  backward(sum(mul(a, b)));
  ASSERT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  // d sum(a * b) / da = b broadcast over the rows.
  std::vector<double> expected = reference_binary(a, b, {2, 3}, [](double, double y) { return y; });
  EXPECT_LT(rel_err(a.grad().to_vector<double>(), expected), 1e-15);
}

TEST(ElementwiseBinary, RecordsOneNodePerOpAndNoneWithoutGrad) {
  clear_tape();
  Tensor a = uniform64({2, 3}, 10, 0.5, 1.0);
  Tensor b = uniform64({3}, 11, 0.5, 1.0, false);
  for (const BinaryCase& c : binary_cases()) {
    const size_t before = tape_size();
    c.op(a, b);
    EXPECT_EQ(tape_size(), before + 1) << c.name;
  }
  clear_tape();
  Tensor x = uniform64({2, 3}, 12, 0.5, 1.0, false);
  for (const BinaryCase& c : binary_cases()) c.op(x, b);
  {
    NoGradGuard no_grad;
    for (const BinaryCase& c : binary_cases()) c.op(a, b);
  }
  EXPECT_EQ(tape_size(), 0u);
}

// ---- tensor-scalar forms and operators ------------------------------------------------------
struct ScalarCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
};

std::vector<ScalarCase> scalar_cases() {
  const double s = 1.75;
  return {
      {"add", [=](const Tensor& a) { return add(a, s); }, [=](double x) { return x + s; }},
      {"sub", [=](const Tensor& a) { return sub(a, s); }, [=](double x) { return x - s; }},
      {"rsub", [=](const Tensor& a) { return rsub(a, s); }, [=](double x) { return s - x; }},
      {"mul", [=](const Tensor& a) { return mul(a, s); }, [=](double x) { return x * s; }},
      {"div", [=](const Tensor& a) { return div(a, s); }, [=](double x) { return x / s; }},
      {"rdiv", [=](const Tensor& a) { return rdiv(a, s); }, [=](double x) { return s / x; }},
      {"a + s", [=](const Tensor& a) { return a + s; }, [=](double x) { return x + s; }},
      {"s + a", [=](const Tensor& a) { return s + a; }, [=](double x) { return s + x; }},
      {"a - s", [=](const Tensor& a) { return a - s; }, [=](double x) { return x - s; }},
      {"s - a", [=](const Tensor& a) { return s - a; }, [=](double x) { return s - x; }},
      {"a * s", [=](const Tensor& a) { return a * s; }, [=](double x) { return x * s; }},
      {"s * a", [=](const Tensor& a) { return s * a; }, [=](double x) { return s * x; }},
      {"a / s", [=](const Tensor& a) { return a / s; }, [=](double x) { return x / s; }},
      {"s / a", [=](const Tensor& a) { return s / a; }, [=](double x) { return s / x; }},
      {"-a", [](const Tensor& a) { return -a; }, [](double x) { return -x; }},
  };
}

std::vector<double> map_ref(const Tensor& a, const std::function<double(double)>& f) {
  std::vector<double> v = a.to_vector<double>();
  for (double& x : v) x = f(x);
  return v;
}

TEST(ElementwiseScalar, ForwardAndGradients) {
  for (const ScalarCase& c : scalar_cases()) {
    for (const Shape& shape : {Shape{}, Shape{2, 3}}) {
      Tensor a = uniform64(shape, 13, 0.5, 2.0);
      Tensor out = c.op(a);
      ASSERT_EQ(out.shape(), shape) << c.name;
      EXPECT_LT(rel_err(out.to_vector<double>(), map_ref(a, c.ref)), 1e-15) << c.name;
      GradCheckResult r = grad_check([&](const std::vector<Tensor>& x) { return c.op(x[0]); }, {a});
      EXPECT_LT(r.max_rel_error, kGradTol) << c.name << " " << shape_str(shape);
    }
    Tensor a32 = uniform64({250, 200}, 14, 0.5, 2.0, false).to(DType::f32);
    Tensor out32 = c.op(a32);
    ASSERT_EQ(out32.dtype(), DType::f32);
    EXPECT_LT(rel_err(out32.to_vector<double>(), map_ref(a32, c.ref)), 1e-7) << c.name;
  }
}

TEST(ElementwiseOperators, TensorTensorOperatorsMatchNamedOps) {
  Tensor a = uniform64({2, 3}, 15, 0.5, 2.0, false);
  Tensor b = uniform64({3}, 16, 0.5, 2.0, false);
  EXPECT_EQ((a + b).to_vector<double>(), add(a, b).to_vector<double>());
  EXPECT_EQ((a - b).to_vector<double>(), sub(a, b).to_vector<double>());
  EXPECT_EQ((a * b).to_vector<double>(), mul(a, b).to_vector<double>());
  EXPECT_EQ((a / b).to_vector<double>(), div(a, b).to_vector<double>());
  Tensor known = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3});
  EXPECT_EQ((known * known - known / 2.0).to_vector<double>(), (std::vector<double>{0.5, 3.0, 7.5}));
}

// ---- unary ---------------------------------------------------------------------------------
struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double low, high;   // sampling interval
  double avoid = 0.0;  // |x| >= avoid, keeping finite differences off a kink at 0
};

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<UnaryCase> unary_cases() {
  const double c = std::sqrt(2.0 / M_PI);
  return {
      {"neg", [](const Tensor& a) { return neg(a); }, [](double x) { return -x; }, -2, 2},
      {"exp", [](const Tensor& a) { return exp(a); }, [](double x) { return std::exp(x); }, -2, 2},
      {"log", [](const Tensor& a) { return log(a); }, [](double x) { return std::log(x); }, 0.3, 3},
      {"sqrt", [](const Tensor& a) { return sqrt(a); }, [](double x) { return std::sqrt(x); }, 0.3, 3},
      {"rsqrt", [](const Tensor& a) { return rsqrt(a); }, [](double x) { return 1.0 / std::sqrt(x); }, 0.3, 3},
      {"pow 2", [](const Tensor& a) { return pow(a, 2.0); }, [](double x) { return x * x; }, -2, 2},
      {"pow 3", [](const Tensor& a) { return pow(a, 3.0); }, [](double x) { return x * x * x; }, -2, 2},
      {"pow 0.5", [](const Tensor& a) { return pow(a, 0.5); }, [](double x) { return std::sqrt(x); }, 0.3, 3},
      {"pow -1.5", [](const Tensor& a) { return pow(a, -1.5); }, [](double x) { return std::pow(x, -1.5); }, 0.3, 3},
      {"pow 0", [](const Tensor& a) { return pow(a, 0.0); }, [](double) { return 1.0; }, -2, 2},
      {"tanh", [](const Tensor& a) { return tanh(a); }, [](double x) { return std::tanh(x); }, -3, 3},
      {"sigmoid", [](const Tensor& a) { return sigmoid(a); }, sigmoid_ref, -4, 4},
      {"silu", [](const Tensor& a) { return silu(a); }, [](double x) { return x * sigmoid_ref(x); }, -4, 4},
      {"gelu", [](const Tensor& a) { return gelu(a); },
       [=](double x) { return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x))); }, -4, 4},
      {"softplus", [](const Tensor& a) { return softplus(a); }, [](double x) { return std::log(1.0 + std::exp(x)); },
       -4, 4},
      {"elu", [](const Tensor& a) { return elu(a); }, [](double x) { return x > 0 ? x : std::exp(x) - 1.0; }, -3, 3,
       0.05},
      {"elu 0.5", [](const Tensor& a) { return elu(a, 0.5); },
       [](double x) { return x > 0 ? x : 0.5 * (std::exp(x) - 1.0); }, -3, 3, 0.05},
      {"relu", [](const Tensor& a) { return relu(a); }, [](double x) { return x > 0 ? x : 0.0; }, -3, 3, 0.05},
  };
}

Tensor sample(const UnaryCase& c, const Shape& shape, uint64_t seed, bool requires_grad) {
  Tensor t = uniform64(shape, seed, c.low, c.high, false);
  double* x = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::abs(x[i]) < c.avoid) x[i] = x[i] < 0 ? -c.avoid - std::abs(x[i]) : c.avoid + x[i];
  t.set_requires_grad(requires_grad);
  return t;
}

TEST(ElementwiseUnary, ForwardMatchesStdReferenceInF64AndF32) {
  for (const UnaryCase& c : unary_cases()) {
    Tensor a = sample(c, {3, 5}, 17, false);
    Tensor out = c.op(a);
    ASSERT_EQ(out.shape(), a.shape()) << c.name;
    EXPECT_LT(rel_err(out.to_vector<double>(), map_ref(a, c.ref)), 1e-14) << c.name;
    // f32 above the OpenMP threshold, compared with the f64 reference of the f32 inputs.
    Tensor a32 = sample(c, {200, 180}, 18, false).to(DType::f32);
    Tensor out32 = c.op(a32);
    ASSERT_EQ(out32.dtype(), DType::f32) << c.name;
    EXPECT_LT(rel_err(out32.to_vector<double>(), map_ref(a32, c.ref)), 1e-6) << c.name;
  }
}

TEST(ElementwiseUnary, GradientsMatchFiniteDifferences) {
  for (const UnaryCase& c : unary_cases()) {
    for (const Shape& shape : {Shape{}, Shape{2, 3, 4}}) {
      Tensor a = sample(c, shape, 19, true);
      GradCheckResult r = grad_check([&](const std::vector<Tensor>& x) { return c.op(x[0]); }, {a});
      EXPECT_LT(r.max_rel_error, kGradTol) << c.name << " " << shape_str(shape);
    }
  }
}

TEST(ElementwiseUnary, RecordsOneNodePerOp) {
  clear_tape();
  for (const UnaryCase& c : unary_cases()) {
    Tensor a = sample(c, {4}, 20, true);
    c.op(a);
    EXPECT_EQ(tape_size(), 1u) << c.name;
    clear_tape();
  }
}

TEST(ElementwiseUnary, KnownValues) {
  Tensor x = Tensor::from_vector(std::vector<double>{-1.0, 0.0, 1.0}, {3});
  // gelu (tanh form) at 1: 0.5 (1 + tanh(sqrt(2/pi) 1.044715)).
  EXPECT_NEAR(gelu(x).at({2}), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(gelu(x).at({0}), -0.15880800939172324, 1e-15);
  EXPECT_EQ(sigmoid(x).at({1}), 0.5);
  EXPECT_NEAR(silu(x).at({2}), 0.7310585786300049, 1e-15);
  EXPECT_NEAR(softplus(x).at({1}), std::log(2.0), 1e-15);
  EXPECT_NEAR(elu(x, 2.0).at({0}), 2.0 * (std::exp(-1.0) - 1.0), 1e-15);
  EXPECT_EQ(relu(x).to_vector<double>(), (std::vector<double>{0.0, 0.0, 1.0}));
}

TEST(ElementwiseUnary, StableAtLargeMagnitude) {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = Tensor::from_vector(std::vector<double>{-1000.0, -20.0, 100.0, 1000.0}, {4}).to(dtype);
    std::vector<double> sp = softplus(x).to_vector<double>();
    EXPECT_EQ(sp[0], 0.0);
    EXPECT_NEAR(sp[1], std::exp(-20.0), 1e-15);
    EXPECT_EQ(sp[2], 100.0);
    EXPECT_EQ(sp[3], 1000.0);
    std::vector<double> sg = sigmoid(x).to_vector<double>();
    EXPECT_EQ(sg[0], 0.0);
    EXPECT_EQ(sg[3], 1.0);
    std::vector<double> si = silu(x).to_vector<double>();
    EXPECT_EQ(si[0], 0.0);  // -1000 * 0, not -1000 * NaN
    EXPECT_EQ(si[3], 1000.0);
    std::vector<double> ge = gelu(x).to_vector<double>();
    EXPECT_EQ(ge[0], 0.0);
    EXPECT_EQ(ge[3], 1000.0);
  }
  // Gradients stay finite where exp would overflow.
  Tensor x = Tensor::from_vector(std::vector<double>{-800.0, 800.0}, {2}, true);
  backward(sum(add(softplus(x), sigmoid(x))));
  std::vector<double> g = x.grad().to_vector<double>();
  EXPECT_EQ(g[0], 0.0);
  EXPECT_EQ(g[1], 1.0);
}

TEST(ElementwiseUnary, ReluGradientAtZeroIsZero) {
  Tensor x = Tensor::from_vector(std::vector<double>{-1.0, 0.0, 2.0}, {3}, true);
  backward(sum(relu(x)));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0.0, 0.0, 1.0}));
}

// ---- errors --------------------------------------------------------------------------------
using testing::expect_error;

// swiglu(gate, up) = silu(gate) * up as one fused node.
TEST(Swiglu, ForwardMatchesF64ReferenceAndGradientsMatchFiniteDifferences) {
  auto ref = [](double a, double u) { return a / (1.0 + std::exp(-a)) * u; };
  for (const Shape& shape : {Shape{3, 5}, Shape{200, 180}}) {  // below and above the OpenMP threshold
    Tensor gate = uniform64(shape, 21, -6.0, 6.0, false), up = uniform64(shape, 22, -2.0, 2.0, false);
    std::vector<double> expected = reference_binary(gate, up, shape, ref);
    EXPECT_LT(rel_err(swiglu(gate, up).to_vector<double>(), expected), 1e-14);
    Tensor gate32 = gate.to(DType::f32), up32 = up.to(DType::f32);
    EXPECT_LT(rel_err(swiglu(gate32, up32).to_vector<double>(), reference_binary(gate32, up32, shape, ref)), 1e-6);
  }
  Tensor gate = uniform64({2, 3, 4}, 23, -4.0, 4.0), up = uniform64({2, 3, 4}, 24, -2.0, 2.0);
  GradCheckResult r = grad_check([](const std::vector<Tensor>& x) { return swiglu(x[0], x[1]); }, {gate, up});
  ASSERT_EQ(r.rel_error.size(), 2u);
  EXPECT_LT(r.max_rel_error, kGradTol);
  clear_tape();
  swiglu(gate, up);
  EXPECT_EQ(tape_size(), 1u);
  clear_tape();
}

TEST(Swiglu, F32GradientsMatchTheUnfusedOps) {
  Tensor gate = uniform64({300, 200}, 25, -8.0, 8.0, false).to(DType::f32);
  Tensor up = uniform64({300, 200}, 26, -2.0, 2.0, false).to(DType::f32);
  gate.set_requires_grad(true);
  up.set_requires_grad(true);
  Tensor w = uniform64({300, 200}, 27, -1.0, 1.0, false).to(DType::f32);
  backward(sum(mul(swiglu(gate, up), w)));
  std::vector<double> dgate = gate.grad().to_vector<double>(), dup = up.grad().to_vector<double>();
  gate.zero_grad();
  up.zero_grad();
  backward(sum(mul(mul(silu(gate), up), w)));
  EXPECT_LT(rel_err(dgate, gate.grad().to_vector<double>()), 1e-6);
  EXPECT_LT(rel_err(dup, up.grad().to_vector<double>()), 1e-6);
}

TEST(Swiglu, ShapeMismatchNamesBothShapes) {
  Tensor gate = Tensor::zeros({2, 3}), up = Tensor::zeros({3, 2});
  expect_error([&] { swiglu(gate, up); }, {"swiglu: up: shape [3, 2] differs from gate: shape [2, 3]"});
}

TEST(ElementwiseErrors, BroadcastShapeMismatchNamesOpAndShapes) {
  Tensor a = Tensor::zeros({2, 3});
  Tensor b = Tensor::zeros({4});
  expect_error([&] { add(a, b); }, {"add:", "[2, 3]", "[4]"});
  expect_error([&] { sub(a, b); }, {"sub:"});
  expect_error([&] { mul(a, Tensor::zeros({2, 2, 3, 2})); }, {"mul:", "[2, 2, 3, 2]"});
  expect_error([&] { div(Tensor::zeros({3, 1}), Tensor::zeros({2, 5})); }, {"div:"});
  expect_error([&] { broadcast_shape({5}, {6}, "myop"); }, {"myop:"});
  EXPECT_EQ(broadcast_shape({2, 1, 4}, {3, 1}, "t"), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shape({}, {}, "t"), Shape{});
  EXPECT_EQ(broadcast_shape({0, 1}, {3}, "t"), (Shape{0, 3}));
}

TEST(ElementwiseErrors, DtypeMismatchNamesOpAndDtypes) {
  Tensor a = Tensor::zeros({2}, DType::f32);
  Tensor b = Tensor::zeros({2}, DType::f64);
  expect_error([&] { add(a, b); }, {"add:", "b:", "f32", "f64"});
  expect_error([&] { mul(b, a); }, {"mul:", "b:", "f64", "f32"});
}

TEST(ElementwiseErrors, I64InputToFloatMathIsRejected) {
  Tensor ids = Tensor::arange(4);
  expect_error([&] { exp(ids); }, {"exp:", "a:", "i64"});
  expect_error([&] { gelu(ids); }, {"gelu:", "i64"});
  expect_error([&] { mul(ids, 2.0); }, {"mul:", "i64"});
  expect_error([&] { add(Tensor::zeros({4}), ids); }, {"add:", "b:", "i64"});
}

TEST(ElementwiseErrors, UndefinedTensorIsRejected) {
  expect_error([&] { tanh(Tensor()); }, {"tanh:", "undefined"});
  expect_error([&] { div(Tensor::zeros({1}), Tensor()); }, {"div:", "b:", "undefined"});
}

TEST(ElementwiseEmpty, ZeroElementTensorsWork) {
  Tensor a = Tensor::zeros({0, 3});
  EXPECT_EQ(add(a, Tensor::ones({3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(exp(a).numel(), 0);
}

}  // namespace
}  // namespace lat
