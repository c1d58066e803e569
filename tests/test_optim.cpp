// Optimizers, schedules and clipping against hand-computed values: SGD with momentum and
// AdamW single steps, the LR schedule at chosen steps, global-norm clipping (including a
// non-finite norm), weight-decay grouping by name, and exact state export/import.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "lat/lat.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "optim/weight_decay.h"
#include "tests/expect_error.h"

namespace lat {
namespace {

using testing::expect_error;

// A leaf parameter holding `values` with shape `shape` (f64 unless given floats).
Tensor param(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape, true);
}

void set_grad(Tensor& p, const std::vector<double>& g) { p.set_grad(Tensor::from_vector(g, p.shape())); }

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
}

// ---- SGD -------------------------------------------------------------------------------

TEST(Sgd, MomentumTwoStepsMatchHandValues) {
  Tensor p = param({1.0, -2.0}, {1, 2});
  Sgd sgd({{"w.weight", p}}, {.momentum = 0.9, .weight_decay = 0.0});
  set_grad(p, {0.5, 0.25});
  sgd.step(0.1);
  // First step: buf = g = [0.5, 0.25]; p = [1 - 0.05, -2 - 0.025].
  expect_near_all(p.to_vector<double>(), {0.95, -2.025}, 1e-15);
  set_grad(p, {-1.0, 2.0});
  sgd.step(0.1);
  // buf = 0.9 [0.5, 0.25] + [-1, 2] = [-0.55, 2.225]; p -= 0.1 buf.
  expect_near_all(p.to_vector<double>(), {1.005, -2.2475}, 1e-15);
  EXPECT_EQ(sgd.step_count(), 2);
  expect_near_all(sgd.export_state().at("w.weight").at("momentum_buffer").to_vector<double>(), {-0.55, 2.225}, 1e-15);
}

TEST(Sgd, WeightDecayOnlyOnMatmulWeights) {
  Tensor w = param({1.0, -2.0}, {1, 2});
  Tensor b = param({3.0}, {1});
  Sgd sgd({{"w.weight", w}, {"w.bias", b}}, {.momentum = 0.0, .weight_decay = 0.5});
  set_grad(w, {0.5, 0.25});
  set_grad(b, {1.0});
  sgd.step(0.1);
  // d = g + 0.5 p = [1.0, -0.75] for the weight; the bias has no decay.
  expect_near_all(w.to_vector<double>(), {0.9, -1.925}, 1e-15);
  expect_near_all(b.to_vector<double>(), {2.9}, 1e-15);
  EXPECT_TRUE(sgd.export_state().empty()) << "plain SGD keeps no state";
}

TEST(Sgd, SkipsParametersWithoutGradientAndAppliesLrMult) {
  Tensor a = param({1.0}, {1});
  Tensor b = param({1.0}, {1});
  Sgd sgd({{"a", a}, {"b", b}}, {.momentum = 0.9});
  sgd.set_lr_mult("a", 0.5);
  set_grad(a, {1.0});
  sgd.step(0.1);
  expect_near_all(a.to_vector<double>(), {0.95}, 1e-15);
  expect_near_all(b.to_vector<double>(), {1.0}, 0.0);
  OptimizerState state = sgd.export_state();
  EXPECT_EQ(state.count("a"), 1u);
  EXPECT_EQ(state.count("b"), 0u) << "no state for a parameter that never had a gradient";
  expect_error([&] { sgd.set_lr_mult("c", 2.0); }, {"'c'"});
}

TEST(Sgd, ZeroGradDropsGradients) {
  Tensor a = param({1.0}, {1});
  Sgd sgd({{"a", a}}, {});
  set_grad(a, {1.0});
  sgd.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

// ---- AdamW -------------------------------------------------------------------------------

// One AdamW step on scalars, written from the formula of adamw.h.
struct AdamWReference {
  double beta1, beta2, eps, weight_decay;
  double m = 0.0, v = 0.0;
  int t = 0;
  double step(double p, double g, double lr) {
    ++t;
    p -= lr * weight_decay * p;
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
    double m_hat = m / (1 - std::pow(beta1, t));
    double denom = std::sqrt(v) / std::sqrt(1 - std::pow(beta2, t)) + eps;
    return p - lr * m_hat / denom;
  }
};

TEST(AdamW, TwoStepsWithDecayMatchHandValues) {
  Tensor p = param({1.0, -2.0}, {1, 2});
  AdamW adamw({{"layers.0.mlp.up_proj.weight", p}}, {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
  set_grad(p, {0.5, -0.25});
  adamw.step(0.01);
  // Step 1: p *= 1 - 0.01*0.1; the bias-corrected Adam step is lr * sign(g) up to eps:
  // [0.999 - 0.01, -1.998 + 0.01].
  expect_near_all(p.to_vector<double>(), {0.989, -1.988}, 1e-9);
  set_grad(p, {-1.0, 0.125});
  adamw.step(0.005);
  AdamWReference r0{0.9, 0.99, 1e-8, 0.1}, r1{0.9, 0.99, 1e-8, 0.1};
  double p0 = r0.step(1.0, 0.5, 0.01), p1 = r1.step(-2.0, -0.25, 0.01);
  p0 = r0.step(p0, -1.0, 0.005);
  p1 = r1.step(p1, 0.125, 0.005);
  expect_near_all(p.to_vector<double>(), {p0, p1}, 1e-15);
  OptimizerState state = adamw.export_state();
  expect_near_all(state.at("layers.0.mlp.up_proj.weight").at("exp_avg").to_vector<double>(), {r0.m, r1.m}, 1e-15);
  expect_near_all(state.at("layers.0.mlp.up_proj.weight").at("exp_avg_sq").to_vector<double>(), {r0.v, r1.v}, 1e-15);
}

TEST(AdamW, TwoStepsWithoutDecayForNormWeight) {
  Tensor p = param({1.0, -2.0}, {2});
  AdamW adamw({{"layers.0.attn_norm.weight", p}}, {.beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3, .weight_decay = 0.1});
  set_grad(p, {0.5, -0.25});
  adamw.step(0.01);
  // No decay; with eps 1e-3: p -= 0.01 * |g| / (|g| + 1e-3) * sign(g).
  expect_near_all(p.to_vector<double>(), {1.0 - 0.01 * 0.5 / 0.501, -2.0 + 0.01 * 0.25 / 0.251}, 1e-15);
  set_grad(p, {0.3, 0.0});
  adamw.step(0.01);
  AdamWReference r0{0.8, 0.95, 1e-3, 0.0}, r1{0.8, 0.95, 1e-3, 0.0};
  double p0 = r0.step(r0.step(1.0, 0.5, 0.01), 0.3, 0.01);
  double p1 = r1.step(r1.step(-2.0, -0.25, 0.01), 0.0, 0.01);
  expect_near_all(p.to_vector<double>(), {p0, p1}, 1e-15);
}

TEST(AdamW, Float32LargeTensorMatchesFloat64Reference) {
  // Above the OpenMP threshold, so the parallel loop is exercised.
  Generator gen(7);
  Tensor p = Tensor::randn({7, 10001}, gen);
  Tensor g = Tensor::randn({7, 10001}, gen);
  const int64_t n = p.numel();
  std::vector<float> p0 = p.to_vector(), g0 = g.to_vector();
  p.set_requires_grad(true);
  AdamW adamw({{"x.weight", p}}, {});
  p.set_grad(g);
  adamw.step(1e-2);
  adamw.step(1e-2);
  std::vector<float> out = p.to_vector();
  double err = 0.0, ref_norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    AdamWReference r{0.9, 0.99, 1e-8, 0.1};
    double expected = r.step(r.step(p0[i], g0[i], 1e-2), g0[i], 1e-2);
    err += (out[i] - expected) * (out[i] - expected);
    ref_norm += expected * expected;
  }
  EXPECT_LT(std::sqrt(err / ref_norm), 1e-6);
}

TEST(AdamW, RejectsBadOptions) {
  Tensor p = param({1.0}, {1});
  expect_error([&] { AdamW({{"p", p}}, {.beta1 = 1.0}); }, {"beta1"});
  expect_error([&] { AdamW({{"p", p}}, {.eps = 0.0}); }, {"eps"});
  expect_error([&] { AdamW({{"p", p}, {"p", p}}, {}); }, {"twice"});
}

// ---- state export / import ---------------------------------------------------------------

// Runs steps from..to-1 with gradient g_k[i] = sin(1.3 k + i) on every parameter.
template <class Opt>
void run_steps(Opt& opt, int from, int to) {
  for (int k = from; k < to; ++k) {
    for (const NamedParameter& np : opt.parameters()) {
      std::vector<float> g(static_cast<size_t>(np.tensor.numel()));
      for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(std::sin(k * 1.3 + i));
      Tensor t = np.tensor;
      t.set_grad(Tensor::from_vector(g, t.shape()));
    }
    opt.step(1e-2);
  }
}

std::vector<NamedParameter> fresh_params() {
  Generator gen(3);
  Tensor w = Tensor::randn({3, 5}, gen);
  Tensor b = Tensor::randn({5}, gen);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  return {{"l.weight", w}, {"l.bias", b}};
}

// Copies of the parameter values (so a second optimizer starts from the same point).
std::vector<NamedParameter> copy_params(const std::vector<NamedParameter>& params) {
  std::vector<NamedParameter> out;
  for (const NamedParameter& p : params) {
    Tensor t = Tensor::empty(p.tensor.shape());
    t.copy_(p.tensor);
    t.set_requires_grad(true);
    out.push_back({p.name, t});
  }
  return out;
}

template <class Opt, class Options>
void expect_exact_resume(Options options) {
  Opt original(fresh_params(), options);
  run_steps<Opt>(original, 0, 3);
  Opt resumed(copy_params(original.parameters()), options);
  resumed.import_state(original.export_state(), original.step_count());
  EXPECT_EQ(resumed.step_count(), 3);
  run_steps<Opt>(original, 3, 5);
  run_steps<Opt>(resumed, 3, 5);
  for (size_t i = 0; i < original.parameters().size(); ++i) {
    std::vector<float> a = original.parameters()[i].tensor.to_vector();
    std::vector<float> b = resumed.parameters()[i].tensor.to_vector();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << original.parameters()[i].name;
  }
}

TEST(OptimizerState, AdamWRoundTripIsBitIdentical) { expect_exact_resume<AdamW>(AdamWOptions{}); }
TEST(OptimizerState, SgdRoundTripIsBitIdentical) { expect_exact_resume<Sgd>(SgdOptions{.momentum = 0.9, .weight_decay = 0.1}); }

TEST(OptimizerState, ImportIsADeepCopyAndChecksNames) {
  AdamW a(fresh_params(), {});
  run_steps<AdamW>(a, 0, 1);
  OptimizerState state = a.export_state();
  EXPECT_EQ(state.size(), 2u);
  EXPECT_EQ(state.at("l.weight").size(), 2u);
  AdamW b(copy_params(a.parameters()), {});
  b.import_state(state, 1);
  state.at("l.weight").at("exp_avg").fill_(123.0);
  EXPECT_NE(b.export_state().at("l.weight").at("exp_avg").to_vector()[0], 123.0f);

  OptimizerState unknown_param{{"nope", {{"exp_avg", Tensor::zeros({1})}}}};
  expect_error([&] { b.import_state(unknown_param, 1); }, {"'nope'"});
  OptimizerState unknown_buffer{{"l.bias", {{"momentum_buffer", Tensor::zeros({5})}}}};
  expect_error([&] { b.import_state(unknown_buffer, 1); }, {"momentum_buffer"});
  OptimizerState wrong_shape{{"l.bias", {{"exp_avg", Tensor::zeros({4})}}}};
  expect_error([&] { b.import_state(wrong_shape, 1); }, {"[5]"});
}

// ---- schedule ------------------------------------------------------------------------------

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s{.kind = "cosine", .lr = 1e-3, .min_lr = 1e-4, .warmup = 10, .max_steps = 110};
  EXPECT_DOUBLE_EQ(s.at(1), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(5), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(35), 1e-4 + 0.45e-3 * (1 + std::cos(std::numbers::pi / 4)));
  EXPECT_DOUBLE_EQ(s.at(60), 5.5e-4);
  EXPECT_DOUBLE_EQ(s.at(110), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(500), 1e-4);
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule linear{.kind = "linear", .lr = 1e-3, .min_lr = 1e-4, .warmup = 10, .max_steps = 110};
  EXPECT_DOUBLE_EQ(linear.at(10), 1e-3);
  EXPECT_DOUBLE_EQ(linear.at(35), 7.75e-4);
  EXPECT_DOUBLE_EQ(linear.at(60), 5.5e-4);
  EXPECT_DOUBLE_EQ(linear.at(110), 1e-4);
  LrSchedule constant{.kind = "constant", .lr = 1e-3, .min_lr = 1e-4, .warmup = 10, .max_steps = 110};
  EXPECT_DOUBLE_EQ(constant.at(3), 3e-4);
  EXPECT_DOUBLE_EQ(constant.at(60), 1e-3);
  EXPECT_DOUBLE_EQ(constant.at(500), 1e-3);
}

TEST(LrSchedule, NoWarmupAndMaxStepsBelowWarmup) {
  LrSchedule no_warmup{.kind = "cosine", .lr = 1e-3, .min_lr = 0.0, .warmup = 0, .max_steps = 100};
  EXPECT_DOUBLE_EQ(no_warmup.at(1), 0.5e-3 * (1 + std::cos(std::numbers::pi * 0.01)));
  EXPECT_DOUBLE_EQ(no_warmup.at(100), 0.0);
  LrSchedule short_run{.kind = "cosine", .lr = 1e-3, .min_lr = 1e-4, .warmup = 100, .max_steps = 50};
  EXPECT_DOUBLE_EQ(short_run.at(1), 1e-5);
  EXPECT_DOUBLE_EQ(short_run.at(50), 5e-4);
}

TEST(LrSchedule, RejectsBadValues) {
  LrSchedule s;
  s.kind = "cosin";
  expect_error([&] { s.at(1); }, {"train.schedule"});
  s = LrSchedule{};
  s.min_lr = 1.0;
  expect_error([&] { s.validate(); }, {"train.min_lr"});
  s = LrSchedule{};
  expect_error([&] { s.at(0); }, {"step"});
}

// ---- clipping --------------------------------------------------------------------------------

TEST(Clip, NormAndScaling) {
  Tensor a = param({3.0, 4.0}, {2});
  Tensor b = param({12.0}, {1});
  Tensor c = param({1.0}, {1});  // no gradient: counts as zero
  set_grad(a, {3.0, 4.0});
  set_grad(b, {12.0});
  std::vector<NamedParameter> params{{"a", a}, {"b", b}, {"c", c}};
  EXPECT_DOUBLE_EQ(grad_norm(params), 13.0);

  ClipResult off = clip_grad_norm(params, 0.0);
  EXPECT_DOUBLE_EQ(off.norm, 13.0);
  EXPECT_TRUE(off.finite);
  EXPECT_FALSE(off.clipped);
  ClipResult below = clip_grad_norm(params, 20.0);
  EXPECT_FALSE(below.clipped);
  expect_near_all(a.grad().to_vector<double>(), {3.0, 4.0}, 0.0);

  ClipResult clipped = clip_grad_norm(params, 6.5);
  EXPECT_DOUBLE_EQ(clipped.norm, 13.0);
  EXPECT_TRUE(clipped.clipped);
  double f = 6.5 / (13.0 + 1e-6);
  expect_near_all(a.grad().to_vector<double>(), {3.0 * f, 4.0 * f}, 1e-15);
  expect_near_all(b.grad().to_vector<double>(), {12.0 * f}, 1e-15);
  EXPECT_NEAR(grad_norm(params), 6.5, 1e-6);
}

TEST(Clip, LargeFloatTensorNormInDouble) {
  const int64_t n = 100003;  // several chunks
  std::vector<float> g(n);
  double expected = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    g[i] = static_cast<float>(std::cos(0.37 * i));
    expected += static_cast<double>(g[i]) * g[i];
  }
  Tensor p = Tensor::zeros({n});
  p.set_requires_grad(true);
  p.set_grad(Tensor::from_vector(g, {n}));
  EXPECT_NEAR(grad_norm({{"p", p}}), std::sqrt(expected), 1e-12 * std::sqrt(expected));
}

TEST(Clip, NonFiniteNormSignalsSkipAndLeavesGradients) {
  for (double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    Tensor a = param({0.0, 0.0}, {2});
    set_grad(a, {100.0, bad});
    ClipResult r = clip_grad_norm({{"a", a}}, 1.0);
    EXPECT_FALSE(r.finite);
    EXPECT_FALSE(std::isfinite(r.norm));
    EXPECT_FALSE(r.clipped);
    EXPECT_EQ(a.grad().to_vector<double>()[0], 100.0) << "gradients untouched";
  }
  Tensor a = param({0.0}, {1});
  expect_error([&] { clip_grad_norm({{"a", a}}, -1.0); }, {"max_norm"});
}

// ---- weight-decay groups ------------------------------------------------------------------------

TEST(WeightDecay, GroupsByNameAndShape) {
  struct Case {
    std::string name;
    Shape shape;
    bool decay;
  };
  const std::vector<Case> cases = {
      {"embeddings.weight", {65, 16}, false},
      {"layers.0.attn_norm.weight", {16}, false},
      {"layers.0.attn.q_proj.weight", {16, 16}, true},
      {"layers.0.attn.o_proj.weight", {16, 16}, true},
      {"layers.0.attn.b_proj.weight", {4, 16}, true},
      {"layers.0.attn.b_proj.bias", {4}, false},
      {"layers.0.attn.q_conv1d.weight", {16, 4}, false},
      {"layers.0.attn.k_conv1d.weight", {16, 1, 4}, false},
      {"layers.0.attn.A_log", {4}, false},
      {"layers.0.attn.dt_bias", {4}, false},
      {"layers.0.attn.o_norm.weight", {4}, false},
      {"layers.0.mlp_norm.weight", {16}, false},
      {"layers.0.mlp.down_proj.weight", {16, 64}, true},
      {"norm.weight", {16}, false},
      {"lm_head.weight", {65, 16}, true},
  };
  std::vector<NamedParameter> params;
  for (const Case& c : cases) {
    Tensor t = Tensor::zeros(c.shape);
    EXPECT_EQ(applies_weight_decay(c.name, t), c.decay) << c.name;
    params.push_back({c.name, t.set_requires_grad(true)});
  }
  AdamW adamw(params, {.weight_decay = 0.1});
  std::string groups = adamw.describe_groups();
  EXPECT_NE(groups.find("decay (weight_decay 0.1): 5 tensors, "
                        + std::to_string(2 * 256 + 64 + 16 * 64 + 65 * 16) + " parameters"),
            std::string::npos)
      << groups;
  EXPECT_NE(groups.find("no decay: 10 tensors"), std::string::npos) << groups;
  EXPECT_NE(groups.find("layers.0.attn.A_log"), std::string::npos) << groups;
}

}  // namespace
}  // namespace lat
