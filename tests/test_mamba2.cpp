// The Mamba-2 mixer (layers/mamba2_layer.h): parameter names and initialization, the float32
// layer against a float64 re-implementation that runs the SSM recurrence token by token
// (outputs and every gradient), that re-implementation against finite differences, step()
// against forward() (token by token and with the prefill split anywhere), packed sequences
// against separate calls, G = 1 and G = 2, bf16 products against fp32, and config errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lat/lat.h"
#include "lat/precision.h"
#include "layers/fused/short_conv.h"
#include "layers/mamba2_layer.h"
#include "tests/config_testing.h"
#include "tests/expect_error.h"
#include "tests/mixer_reference.h"
#include "train/config/config.h"
#include "train/config/model_config.h"
#include "train/files/model_reader.h"
#include "train/files/trained_model.h"
#include "train/inference/info.h"
#include "train/run/device.h"

namespace lat {
namespace {

using testing::expect_config_error;
using testing::expect_error;
using testing::expect_matches_float64_reference;
using testing::expect_packed_matches_separate;
using testing::expect_split_prefill_equals_one_pass;
using testing::expect_steps_reproduce_forward;
using testing::f64_leaf;
using testing::linear;
using testing::ParamMap;
using testing::parse;
using testing::random_input;

// Letters as in mamba2_layer.h: D d_model, I = expand * D, H heads of P, G groups of N.
// The small layer: D = 16, I = 32, P = 8 so H = 4, N = 6 (N != P), chunk 16 so that T = 37
// spans three partial chunks.
MixerConfig small_config(int64_t n_groups) {
  MixerConfig c;
  c.d_model = 16;
  c.mamba.d_state = 6;
  c.mamba.head_dim = 8;
  c.mamba.expand = 2;
  c.mamba.n_groups = n_groups;
  c.mamba.conv_size = 4;
  c.mamba.chunk_size = 16;
  // Larger than the default 0.02 so that the conv, gate and time step leave their linear regimes.
  c.init_std = 0.3;
  c.out_init_std = 0.2;
  return c;
}

// The layer with its norm weight and D moved off their initial ones, so that a weight the
// forward ignores shows.
std::unique_ptr<Mamba2> build(const MixerConfig& config) {
  Generator gen(1);
  auto m = std::make_unique<Mamba2>(config, gen);
  Generator noise(7);
  for (auto& [name, p] : m->named_parameters())
    if (name == "norm.weight" || name == "D")
      p.copy_(Tensor::ones(p.shape()) + Tensor::randn(p.shape(), noise, DType::f32, 0, 0.3));
  return m;
}

// ---- the float64 reference, written from the formulas (mamba2_layer.h) -------------------

// Causal depthwise conv + bias + SiLU from shifted slices: y_t = silu(sum_w weight[:, 0, w]
// x_{t-W+1+w} + bias); x [B, T, C], weight [C, 1, W], bias [C] or undefined.
Tensor conv_bias_silu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), W = weight.size(2);
  const Tensor xe = W > 1 ? concat({Tensor::zeros({B, W - 1, C}, DType::f64), x}, 1) : x;
  Tensor acc;
  for (int64_t w = 0; w < W; ++w) {
    const Tensor term = slice(xe, 1, w, w + T) * slice(weight, 2, w, w + 1).reshape({C});
    acc = acc.defined() ? acc + term : term;
  }
  return silu(bias.defined() ? acc + bias : acc);
}

Tensor maybe(const ParamMap& P, const std::string& name) {
  const auto it = P.find(name);
  return it == P.end() ? Tensor() : it->second;
}

// The whole mixer in float64 on x [B, T, D]: the SSM recurrence per token,
//   S_t = exp(A_h dt_t) S_{t-1} + dt_t B_t x_t^T,  y_t = C_t^T S_t + D_h x_t  (S [N, P] per head),
// head h reading group h / (H / G)'s B and C.
Tensor reference_forward(const Mamba2Options& o, int64_t d_model, double eps, const ParamMap& P, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), I = o.expand * d_model, P_ = o.head_dim, H = I / P_;
  const int64_t G = o.n_groups, N = o.d_state, conv_dim = I + 2 * G * N;
  Tensor zxbcdt = linear(x, P.at("in_proj.weight"));
  if (const Tensor b = maybe(P, "in_proj.bias"); b.defined()) zxbcdt = zxbcdt + b;
  const Tensor z = slice(zxbcdt, 2, 0, I);
  const Tensor xBC = conv_bias_silu(slice(zxbcdt, 2, I, I + conv_dim), P.at("conv1d.weight"), maybe(P, "conv1d.bias"));
  Tensor dt = softplus(slice(zxbcdt, 2, I + conv_dim, I + conv_dim + H) + P.at("dt_bias"));  // [B, T, H]
  const auto [lo, hi] = o.time_step_limit;
  if (lo > 0) dt = relu(dt - lo) + lo;
  if (std::isfinite(hi)) dt = hi - relu(hi - dt);
  const Tensor A = -exp(P.at("A_log"));  // [H]
  const Tensor xs = slice(xBC, 2, 0, I).reshape({B, T, H, P_});
  const Tensor Bg = slice(xBC, 2, I, I + G * N).reshape({B, T, G, N});
  const Tensor Cg = slice(xBC, 2, I + G * N, conv_dim).reshape({B, T, G, N});
  std::vector<Tensor> Bh, Ch;  // per head [B, T, 1, N]
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / G);
    Bh.push_back(slice(Bg, 2, g, g + 1));
    Ch.push_back(slice(Cg, 2, g, g + 1));
  }
  const Tensor Bs = concat(Bh, 2), Cs = concat(Ch, 2);  // [B, T, H, N]
  Tensor S = Tensor::zeros({B, H, N, P_}, DType::f64);
  std::vector<Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    const Tensor dt_t = slice(dt, 1, t, t + 1).reshape({B, H, 1, 1});
    const Tensor x_t = slice(xs, 1, t, t + 1).reshape({B, H, 1, P_});
    const Tensor B_t = slice(Bs, 1, t, t + 1).reshape({B, H, N, 1});
    const Tensor C_t = slice(Cs, 1, t, t + 1).reshape({B, H, N, 1});
    S = S * exp(A.reshape({H, 1, 1}) * dt_t) + dt_t * B_t * x_t;
    ys.push_back(sum(C_t * S, 2).reshape({B, 1, H, P_}));
  }
  const Tensor y = (concat(ys, 1) + xs * P.at("D").reshape({H, 1})).reshape({B, T, I});
  // Gated RMSNorm over each group's I / G channels, then the weight over all I.
  const Tensor gated = (y * silu(z)).reshape({B, T, G, I / G});
  const Tensor normed = (gated * rsqrt(mean(gated * gated, -1, true) + eps)).reshape({B, T, I}) * P.at("norm.weight");
  Tensor out = linear(normed, P.at("out_proj.weight"));
  if (const Tensor b = maybe(P, "out_proj.bias"); b.defined()) out = out + b;
  return out;
}

struct Case {
  std::string name;
  MixerConfig config;
};

std::vector<Case> cases() {
  MixerConfig biases = small_config(1);
  biases.mamba.proj_bias = true;
  biases.mamba.time_step_limit = {0.05, 0.5};  // both ends bind for some tokens
  MixerConfig no_conv_bias = small_config(2);
  no_conv_bias.mamba.conv_bias = false;
  no_conv_bias.mamba.conv_size = 1;
  return {{"OneGroup", small_config(1)},
          {"TwoGroups", small_config(2)},
          {"FourGroups", small_config(4)},
          {"BiasesAndTimeStepLimit", biases},
          {"NoConvBiasConvSize1", no_conv_bias}};
}

class Mamba2Test : public ::testing::TestWithParam<Case> {};

// The float32 layer against the float64 reference: output within 1e-5, dx and every
// parameter's gradient within 1e-4 (relative).
TEST_P(Mamba2Test, MatchesFloat64Reference) {
  const MixerConfig& c = GetParam().config;
  auto m = build(c);
  expect_matches_float64_reference(*m, c.d_model, [&](ParamMap& P, const Tensor& x64) {
    return reference_forward(c.mamba, c.d_model, c.norm_eps, P, x64);
  });
}

// The reference's gradients for every parameter and the input against central differences.
TEST_P(Mamba2Test, ReferenceMatchesFiniteDifferences) {
  MixerConfig c = GetParam().config;
  c.d_model = 8;  // I = 16, H = 2 of P = 8
  c.mamba.d_state = 3;
  c.mamba.n_groups = std::min<int64_t>(c.mamba.n_groups, 2);
  // dt near 1 rather than the default's 0.001-0.1: the gradients of A_log and dt_bias scale
  // with dt, and at 1e-5 they would drown in the differences' rounding.
  c.mamba.dt_min = 0.3;
  c.mamba.dt_max = 1.0;
  Generator gen(10);
  Mamba2 m(c, gen);
  std::vector<std::string> names;
  std::vector<Tensor> inputs;
  for (auto& [name, p] : m.named_parameters()) {
    names.push_back(name);
    inputs.push_back(f64_leaf(p + Tensor::randn(p.shape(), gen, DType::f32, 0, 0.1)));
  }
  inputs.push_back(f64_leaf(random_input(1, 6, c.d_model, 11)));
  auto f = [&](const std::vector<Tensor>& in) {
    ParamMap P;
    for (size_t i = 0; i < names.size(); ++i) P[names[i]] = in[i];
    return reference_forward(c.mamba, c.d_model, c.norm_eps, P, in.back());
  };
  const GradCheckResult r = grad_check(f, inputs);
  for (size_t i = 0; i < r.rel_error.size(); ++i)
    EXPECT_LT(r.rel_error[i], 1e-6) << (i < names.size() ? names[i] : std::string("x"));
}

// step() in pieces reproduces forward(): one token at a time (recurrent_step), and a 20-token
// prompt (chunk op), a 5-token piece (fused recurrent op), then single tokens.
TEST_P(Mamba2Test, StepReproducesForward) {
  const MixerConfig& c = GetParam().config;
  expect_steps_reproduce_forward(*build(c), random_input(2, 37, c.d_model, 4));
}

// A prefill split anywhere (inside the conv window, at and across chunk boundaries) gives
// the outputs of one pass, and the states after it continue the same way.
TEST_P(Mamba2Test, SplitPrefillEqualsOnePass) {
  const MixerConfig& c = GetParam().config;
  expect_split_prefill_equals_one_pass(*build(c), random_input(2, 37, c.d_model, 5), {1, 2, 3, 16, 17, 30, 35});
}

// Packed sequences (1-token ones, ones shorter than the conv, across chunks, a row start
// left out) equal the mixer on each sequence alone, outputs and every gradient.
TEST_P(Mamba2Test, PackedSequencesEqualSeparateCalls) {
  const MixerConfig& c = GetParam().config;
  auto m = build(c);
  expect_packed_matches_separate(*m, c.d_model);
}

// The same layer on the GPU: output, dx and every parameter gradient as on the CPU, and
// generation (a chunk prompt with the conv-state prefill, then single tokens).
TEST_P(Mamba2Test, CudaMatchesCpu) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << (cuda_built() ? "no CUDA device visible" : "lat was built without CUDA (LAT_CUDA=OFF)");
  const MixerConfig& c = GetParam().config;
  const Device gpu = Device::cuda(0);
  auto cpu_layer = build(c), gpu_layer = build(c);
  move_parameters(*gpu_layer, gpu);
  const int64_t B = 2, T = 37, D = c.d_model;
  const Tensor x = random_input(B, T, D, 14);
  Generator gen(15);
  const Tensor w = Tensor::randn({B, T, D}, gen);
  Tensor x_cpu = x.clone().set_requires_grad(true), x_gpu = x.to(gpu).set_requires_grad(true);
  const Tensor y_cpu = cpu_layer->forward(x_cpu);
  backward(sum(y_cpu * w));
  const Tensor y_gpu = gpu_layer->forward(x_gpu);
  backward(sum(y_gpu * w.to(gpu)));
  EXPECT_LT(relative_error(y_gpu.detach().to(Device::cpu()), y_cpu.detach()), 1e-5) << "output";
  EXPECT_LT(relative_error(x_gpu.grad().to(Device::cpu()), x_cpu.grad()), 1e-4) << "dx";
  const auto cpu_params = cpu_layer->named_parameters(), gpu_params = gpu_layer->named_parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i)
    EXPECT_LT(relative_error(gpu_params[i].second.grad().to(Device::cpu()), cpu_params[i].second.grad()), 1e-4)
        << cpu_params[i].first;
  NoGradGuard no_grad;
  auto state = gpu_layer->make_state(B);
  std::vector<Tensor> outputs{gpu_layer->step(slice(x, 1, 0, 20).to(gpu), *state)};
  for (int64_t t = 20; t < T; ++t) outputs.push_back(gpu_layer->step(slice(x, 1, t, t + 1).to(gpu), *state));
  EXPECT_LT(relative_error(concat(outputs, 1).to(Device::cpu()), y_cpu.detach()), 1e-5) << "step";
}

INSTANTIATE_TEST_SUITE_P(Configs, Mamba2Test, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- names, shapes and initialization ------------------------------------------------------

// transformers' Mamba2Mixer's names and shapes, in its registration order.
TEST(Mamba2, ParameterNamesAndShapes) {
  MixerConfig c = small_config(2);
  c.mamba.proj_bias = true;
  Generator gen(0);
  auto m = make_mixer("mamba2", c, gen);
  std::vector<std::pair<std::string, Shape>> got;
  for (auto& [name, p] : m->named_parameters()) got.emplace_back(name, p.shape());
  // I = 32, G N = 12, H = 4: conv_dim = 32 + 24 = 56, in_proj rows 2 * 32 + 24 + 4 = 92.
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"conv1d.weight", {56, 1, 4}}, {"conv1d.bias", {56}},    {"in_proj.weight", {92, 16}},
      {"in_proj.bias", {92}},        {"dt_bias", {4}},         {"A_log", {4}},
      {"norm.weight", {32}},         {"D", {4}},               {"out_proj.weight", {16, 32}},
      {"out_proj.bias", {16}}};
  EXPECT_EQ(got, expected);
}

// A_log = log(1 .. H), D = 1, norm = 1, softplus(dt_bias) in [dt_min, dt_max] and spread over it.
TEST(Mamba2, Initialization) {
  MixerConfig c = small_config(1);
  c.d_model = 64;  // I = 128, H = 16
  c.mamba.dt_min = 0.002;
  c.mamba.dt_max = 0.2;
  Generator gen(3);
  Mamba2 m(c, gen);
  ASSERT_EQ(m.heads(), 16);
  for (auto& [name, p] : m.named_parameters()) {
    const std::vector<float> v = p.to_vector();
    if (name == "A_log")
      for (size_t h = 0; h < v.size(); ++h) EXPECT_FLOAT_EQ(v[h], std::log(static_cast<float>(h + 1)));
    if (name == "D" || name == "norm.weight")
      for (float e : v) EXPECT_EQ(e, 1.0f) << name;
    if (name == "dt_bias") {
      double low = 1, high = 0;
      for (float e : v) {
        const double dt = std::log1p(std::exp(static_cast<double>(e)));
        EXPECT_GE(dt, 0.002 * (1 - 1e-5));
        EXPECT_LE(dt, 0.2 * (1 + 1e-5));
        low = std::min(low, dt);
        high = std::max(high, dt);
      }
      EXPECT_LT(low, 0.01);  // log-uniform over two decades: 16 draws reach both ends
      EXPECT_GT(high, 0.04);
    }
  }
}

// The conv bias of short_conv: outputs and all gradients of the op against the shifted-slice
// reference in float64 (T = 1 and T > W included).
TEST(Mamba2, ShortConvBiasMatchesReference) {
  for (int64_t T : {1, 9}) {
    Generator gen(T);
    const Tensor x = f64_leaf(Tensor::randn({2, T, 5}, gen));
    const Tensor w = f64_leaf(Tensor::randn({5, 1, 3}, gen));
    const Tensor b = f64_leaf(Tensor::randn({5}, gen));
    const auto f = [](const std::vector<Tensor>& in) { return short_conv(in[0], in[1], {}, {}, in[2]); };
    const GradCheckResult r = grad_check(f, {x, w, b});
    EXPECT_LT(r.max_rel_error, 1e-6) << "T " << T;
    const Tensor y = short_conv(x, w, {}, {}, b);
    EXPECT_LT(relative_error(y, conv_bias_silu(x, w, b)), 1e-12) << "T " << T;
  }
}

// bf16 products (in_proj, out_proj, the chunk op) keep the output close to fp32's; the
// gradients stay finite.
TEST(Mamba2, Bf16CloseToFp32) {
  if (!bf16_supported(Device::cpu())) GTEST_SKIP() << "no bf16 products on this CPU";
  const MixerConfig c = small_config(2);
  auto m = build(c);
  const Tensor x = random_input(2, 37, c.d_model, 6);
  Tensor fp32;
  {
    NoGradGuard no_grad;
    fp32 = m->forward(x);
  }
  PrecisionGuard bf16(Precision::bf16);
  const Tensor y = m->forward(x);
  EXPECT_LT(relative_error(y, fp32), 3e-2);
  backward(sum(y));
  for (auto& [name, p] : m->named_parameters())
    for (float v : p.grad().to_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
}

// ---- errors -------------------------------------------------------------------------------

TEST(Mamba2, BadOptionsNameTheOption) {
  const auto expect_refused = [](auto change, std::string_view message) {
    MixerConfig c = small_config(1);
    change(c.mamba);
    Generator gen(0);
    expect_error([&] { Mamba2(c, gen); }, {message});
  };
  expect_refused([](Mamba2Options& o) { o.head_dim = 12; },
                 "Mamba2: head_dim: expected a divisor of expand * d_model = 32, got 12");
  expect_refused([](Mamba2Options& o) { o.n_groups = 3; },
                 "Mamba2: n_groups: expected a divisor of the head count 4, got 3");
  expect_refused([](Mamba2Options& o) { o.d_state = 257; },
                 "Mamba2: d_state: expected 1..256 (the kernels' limit), got 257");
  expect_refused([](Mamba2Options& o) { o.head_dim = 512; },
                 "Mamba2: head_dim: expected 1..256 (the kernels' limit), got 512");
  expect_refused([](Mamba2Options& o) { o.dt_min = 0.5; },
                 "Mamba2: dt_min, dt_max: expected 0 < dt_min <= dt_max, got 0.5, 0.1");
  expect_refused([](Mamba2Options& o) { o.time_step_limit = {0.5, 0.5}; },
                 "Mamba2: time_step_limit: expected [lo, hi] with 0 <= lo < hi, got [0.5, 0.5]");
}

TEST(Mamba2, StepRejectsForeignStateAndWrongShapes) {
  const MixerConfig c = small_config(1);
  auto m = build(c);
  Generator gen(0);
  auto other = make_mixer("simple_gla", MixerConfig{}, gen);
  auto foreign = other->make_state(2);
  expect_error([&] { m->step(random_input(2, 1, c.d_model, 1), *foreign); },
               {"mamba2::step: state: expected a state made by a mamba2 mixer's make_state"});
  auto state = m->make_state(2);
  expect_error([&] { m->step(random_input(3, 1, c.d_model, 1), *state); },
               {"mamba2::step: x: expected shape [2, T >= 1, 16], got [3, 1, 16]"});
}

// ---- config (model.mamba.*) ---------------------------------------------------------------

TEST(Mamba2Config, DefaultsAndTheLayerTheyBuild) {
  const Config c = parse("model: {layers: \"mamba2,attn\", d_model: 64}\n");
  const MambaConfig& m = c.model.mamba;
  EXPECT_EQ(m.d_state, 128);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.expand, 2);
  EXPECT_EQ(m.n_groups, 1);
  EXPECT_EQ(m.conv_size, 4);
  EXPECT_EQ(m.chunk_size, 64);
  EXPECT_TRUE(m.conv_bias);
  EXPECT_FALSE(m.proj_bias);
  EXPECT_EQ(m.time_step_limit[0], 0.0);
  EXPECT_TRUE(std::isinf(m.time_step_limit[1]) && m.time_step_limit[1] > 0);
  EXPECT_EQ(m.dt_min, 0.001);
  EXPECT_EQ(m.dt_max, 0.1);
  Generator gen(0);
  const HybridLMConfig lm = hybrid_lm_config(c.model, 50);
  Mamba2 layer(lm.mixer, gen);
  EXPECT_EQ(layer.inner_dim(), 128);
  EXPECT_EQ(layer.heads(), 2);
  EXPECT_EQ(layer.conv_dim(), 128 + 2 * 128);
}

// Every key set, and the resolved YAML (with time_step_limit's .inf) reading back equal.
TEST(Mamba2Config, KeysRoundTripThroughTheResolvedYaml) {
  const Config c = parse(
      "model:\n  layers: mamba2\n  mamba: {d_state: 16, head_dim: 32, expand: 3, n_groups: 2, conv_size: 3,\n"
      "    chunk_size: 32, conv_bias: false, proj_bias: true, time_step_limit: [0.01, .inf], dt_min: 0.002,\n"
      "    dt_max: 0.05}\n");
  EXPECT_EQ(c.model.mamba.expand, 3);
  EXPECT_EQ(c.model.mamba.time_step_limit[0], 0.01);
  EXPECT_TRUE(std::isinf(c.model.mamba.time_step_limit[1]));
  const std::string yaml = to_yaml(c);
  EXPECT_NE(yaml.find("time_step_limit: [0.01, .inf]"), std::string::npos) << yaml;
  EXPECT_EQ(parse_config(yaml, "saved.yaml"), c);
  EXPECT_EQ(parse("model.mamba.time_step_limit: [0.0, 2.5]\n").model.mamba.time_step_limit[1], 2.5);
}

TEST(Mamba2Config, ImpossibleValuesNameTheKey) {
  expect_config_error("model:\n  layers: mamba2,attn\n  mamba:\n    head_dim: 48\n",
                      "model.mamba.head_dim: expected a divisor of model.mamba.expand * model.d_model = 256, got 48 "
                      "(run.yaml:5)");
  expect_config_error("model:\n  layers: mamba2\n  mamba:\n    head_dim: 32\n    n_groups: 3\n",
                      "model.mamba.n_groups: expected a divisor of the mamba head count 8 (expand * d_model / "
                      "head_dim), got 3 (run.yaml:6)");
  expect_config_error("model.mamba.d_state: 512\n", "model.mamba.d_state: expected an int in [1, 256], got 512 "
                                                    "(run.yaml:2)");
  expect_config_error("model.mamba.head_dim: 257\n", "model.mamba.head_dim: expected an int in [1, 256], got 257 "
                                                     "(run.yaml:2)");
  expect_config_error("model.mamba.time_step_limit: [0.5, 0.1]\n",
                      "model.mamba.time_step_limit: expected [lo, hi] with lo < hi, got [0.5, 0.1] (run.yaml:2)");
  expect_config_error("model.mamba.time_step_limit: [-1, 1]\n",
                      "model.mamba.time_step_limit: expected floats >= 0, got -1 (run.yaml:2)");
  expect_config_error("model:\n  mamba: {dt_min: 0.2, dt_max: 0.1}\n",
                      "model.mamba.dt_max: expected at least model.mamba.dt_min (0.2), got 0.1 (run.yaml:3)");
  // Without a mamba2 layer the sizes are not checked against d_model (as model.linear.*).
  EXPECT_EQ(parse("model.mamba.head_dim: 48\n").model.mamba.head_dim, 48);
}

// lat info: a mamba2 layer holds its SSM state [H, N, P] (H P = d_inner) and the conv state of
// x, B and C, [conv_size - 1, d_inner + 2 G N]; the parameters are the model's.
TEST(Mamba2Config, InfoCountsTheStateMemory) {
  const Config c = parse("model:\n  d_model: 32\n  n_layers: 2\n  n_heads: 2\n  layers: mamba2,attn\n"
                         "  mamba: {d_state: 16, head_dim: 16, n_groups: 2}\n");
  const ModelInfo info = model_info(c, 50, 100);
  ASSERT_EQ(info.memory.size(), 2u);
  EXPECT_EQ(info.memory[0].kind, "mamba2");
  EXPECT_EQ(info.memory[0].state, 64 * 16);
  EXPECT_EQ(info.memory[0].conv, 3 * (64 + 2 * 2 * 16));
  EXPECT_EQ(info.memory[1].state, 2 * 100 * 2 * 16);
  Generator gen(0);
  const HybridLM model(hybrid_lm_config(c.model, 50), gen);
  EXPECT_EQ(info.total_params, model.num_parameters());
  // in_proj 2 * 64 + 2 * 32 + 4 = 196 rows; conv 128 x 4 + 128; dt_bias, A_log, D 4 each; norm 64; out_proj 32 x 64.
  const int64_t mamba2 = 196 * 32 + 128 * 4 + 128 + 3 * 4 + 64 + 32 * 64;
  EXPECT_EQ(info.params[1].name, "layers.0.attn (mamba2)");
  EXPECT_EQ(info.params[1].count, mamba2);
  const std::string text = format_info(info);
  EXPECT_NE(text.find("; mamba2 4 heads x 16, d_state 16, 2 groups; vocab 50"), std::string::npos) << text;
}

// model_from_weights reads a mamba2 model back exactly and compares in_proj's rows, out_proj's
// columns and conv1d's taps with model.mamba.* before building the model.
TEST(Mamba2Config, ModelFromWeightsChecksTheMambaSizes) {
  ModelWeights w{.path = "m.h5",
                 .config = parse("model: {d_model: 16, n_layers: 2, n_heads: 2, layers: \"mamba2,attn\",\n"
                                 "        mamba: {d_state: 8, head_dim: 8, n_groups: 2}}\n"),
                 .checkpoint = {}};
  Generator gen(3);
  HybridLM source(hybrid_lm_config(w.config.model, 13), gen);
  for (const auto& [name, t] : source.named_parameters()) w.checkpoint.model.emplace_back(name, t.detach().clone());
  std::unique_ptr<HybridLM> loaded = model_from_weights(w);
  const auto a = source.named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;

  ModelWeights larger_state = w;
  larger_state.config.model.mamba.d_state = 16;
  expect_error([&] { model_from_weights(larger_state); },
               {"model_from_weights: 'm.h5': model.mamba.expand 2 x model.d_model 16, model.mamba.d_state 16, n_groups "
                "2, head_dim 8 (mamba2 layer: 2 d_inner + 2 n_groups d_state + heads) does not match tensor "
                "'layers.0.attn.in_proj.weight' [100, 16]: expected 132 rows, found 100"});
  ModelWeights wider = w;
  wider.config.model.mamba.expand = 3;
  wider.config.model.mamba.head_dim = 6;
  expect_error([&] { model_from_weights(wider); },
               {"model.mamba.expand 3 x model.d_model 16, model.mamba.d_state 8, n_groups 2, head_dim 6 (mamba2 layer: "
                "2 d_inner + 2 n_groups d_state + heads) does not match tensor 'layers.0.attn.in_proj.weight' [100, "
                "16]: expected 136 rows, found 100"});
  ModelWeights longer_conv = w;
  longer_conv.config.model.mamba.conv_size = 3;
  expect_error([&] { model_from_weights(longer_conv); },
               {"model.mamba.conv_size 3 does not match tensor 'layers.0.attn.conv1d.weight' [64, 1, 4]: expected 3 "
                "taps, found 4"});
}

}  // namespace
}  // namespace lat
