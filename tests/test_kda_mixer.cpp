// The Kimi Delta Attention mixer (layers/kda_layer.h): parameter names, shapes and
// initialization, the float32 layer against a float64 re-implementation that runs the KDA
// recurrence token by token (outputs and every gradient), that re-implementation against
// finite differences, step() against forward() (token by token and with the prefill split
// anywhere), packed sequences against separate calls, bf16 products against fp32, the layer
// on CUDA against the CPU (skipped without a device), config errors and lat info's state memory.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lat/lat.h"
#include "lat/precision.h"
#include "layers/kda_layer.h"
#include "tests/config_testing.h"
#include "tests/expect_error.h"
#include "tests/mixer_reference.h"
#include "train/config/config.h"
#include "train/config/model_config.h"
#include "train/inference/info.h"
#include "train/run/device.h"

namespace lat {
namespace {

using testing::conv_silu;
using testing::expect_config_error;
using testing::expect_error;
using testing::expect_matches_float64_reference;
using testing::expect_packed_matches_separate;
using testing::expect_split_prefill_equals_one_pass;
using testing::expect_steps_reproduce_forward;
using testing::f64_leaf;
using testing::l2norm_ref;
using testing::linear;
using testing::ParamMap;
using testing::parse;
using testing::random_input;
using testing::rms_norm_ref;

// Letters as in kda_layer.h. The small layer: D = 16, H = 2 heads of K = 8, chunk 16 so that
// T = 37 spans three partial chunks.
MixerConfig small_config() {
  MixerConfig c;
  c.d_model = 16;
  c.n_heads = 2;
  c.head_dim = 8;
  c.conv_size = 4;
  c.chunk_size = 16;
  // Larger than the default 0.02 so that the convs, the gates and beta leave their linear regimes.
  c.init_std = 0.3;
  c.out_init_std = 0.2;
  return c;
}

// The layer with o_norm moved off ones and dt_bias spread wider, so that a weight the forward
// ignores shows and the per-channel decays range from about 0 to strong within a head.
std::unique_ptr<KimiDeltaAttention> build(const MixerConfig& config) {
  Generator gen(1);
  auto m = std::make_unique<KimiDeltaAttention>(config, gen);
  Generator noise(7);
  for (auto& [name, p] : m->named_parameters()) {
    if (name == "o_norm.weight") p.copy_(Tensor::ones(p.shape()) + Tensor::randn(p.shape(), noise, DType::f32, 0, 0.3));
    if (name == "dt_bias") p.copy_(Tensor::randn(p.shape(), noise, DType::f32, -1.0, 2.0));
  }
  return m;
}

// ---- the float64 reference, written from the formulas (kda_layer.h) ----------------------

// The whole mixer in float64 on x [B, T, D], the KDA recurrence one token at a time as
// transformers' recurrent_kimi_delta_attention:
//   S = S * exp(g_t);  S = S + beta_t k_t (v_t - S^T k_t)^T;  o_t = K^-1/2 S^T q_t  (S [K, V] per head).
Tensor reference_forward(const MixerConfig& c, const ParamMap& P, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), H = c.n_heads, K = c.head_dim;
  const int64_t V = static_cast<int64_t>(static_cast<double>(K) * c.expand_v);
  const auto conv = [&](const std::string& name) {
    const Tensor projected = linear(x, P.at(name + "_proj.weight"));
    return c.use_short_conv ? conv_silu(projected, P.at(name + "_conv1d.weight")) : silu(projected);
  };
  const Tensor q = l2norm_ref(conv("q").reshape({B, T, H, K}));
  const Tensor k = l2norm_ref(conv("k").reshape({B, T, H, K}));
  const Tensor v = conv("v").reshape({B, T, H, V});
  const Tensor f = linear(linear(x, P.at("f_a_proj.weight")), P.at("f_b_proj.weight")) + P.at("dt_bias");
  const Tensor g = -(exp(P.at("A_log")).reshape({H, 1}) * softplus(f.reshape({B, T, H, K})));
  const Tensor beta = sigmoid(linear(x, P.at("b_proj.weight")));  // [B, T, H]
  const double scale = 1.0 / std::sqrt(static_cast<double>(K));
  Tensor S = Tensor::zeros({B, H, K, V}, DType::f64);
  std::vector<Tensor> outputs;
  for (int64_t t = 0; t < T; ++t) {
    const Tensor q_t = slice(q, 1, t, t + 1).reshape({B, H, K, 1});
    const Tensor k_t = slice(k, 1, t, t + 1).reshape({B, H, K, 1});
    const Tensor v_t = slice(v, 1, t, t + 1).reshape({B, H, 1, V});
    const Tensor g_t = slice(g, 1, t, t + 1).reshape({B, H, K, 1});
    const Tensor beta_t = slice(beta, 1, t, t + 1).reshape({B, H, 1, 1});
    S = S * exp(g_t);
    const Tensor delta = (v_t - sum(S * k_t, 2, true)) * beta_t;  // [B, H, 1, V]
    S = S + k_t * delta;
    outputs.push_back((sum(S * q_t, 2) * scale).reshape({B, 1, H, V}));
  }
  Tensor y = rms_norm_ref(concat(outputs, 1), P.at("o_norm.weight"), c.norm_eps);
  if (c.use_gate)
    y = y * sigmoid(linear(linear(x, P.at("g_a_proj.weight")), P.at("g_b_proj.weight")).reshape({B, T, H, V}));
  return linear(y.reshape({B, T, H * V}), P.at("o_proj.weight"));
}

struct Case {
  std::string name;
  MixerConfig config;
};

std::vector<Case> cases() {
  MixerConfig wide_values = small_config();
  wide_values.expand_v = 1.5;  // V = 12 != K
  MixerConfig no_gate = small_config();
  no_gate.use_gate = false;
  MixerConfig conv_size1 = small_config();
  conv_size1.conv_size = 1;
  MixerConfig no_conv = small_config();
  no_conv.use_short_conv = false;
  no_conv.n_heads = 4;
  no_conv.head_dim = 4;
  return {{"Default", small_config()},
          {"ValueDimAboveKeyDim", wide_values},
          {"NoOutputGate", no_gate},
          {"ConvSize1", conv_size1},
          {"NoShortConvFourHeads", no_conv}};
}

class KdaMixerTest : public ::testing::TestWithParam<Case> {};

// The float32 layer against the float64 reference: output within 1e-5, dx and every
// parameter's gradient within 1e-4 (relative).
TEST_P(KdaMixerTest, MatchesFloat64Reference) {
  const MixerConfig& c = GetParam().config;
  auto m = build(c);
  expect_matches_float64_reference(*m, c.d_model,
                                   [&](ParamMap& P, const Tensor& x64) { return reference_forward(c, P, x64); });
}

// The reference's gradients for every parameter and the input against central differences.
TEST_P(KdaMixerTest, ReferenceMatchesFiniteDifferences) {
  MixerConfig c = GetParam().config;
  c.d_model = 8;
  Generator gen(10);
  KimiDeltaAttention m(c, gen);
  std::vector<std::string> names;
  std::vector<Tensor> inputs;
  for (auto& [name, p] : m.named_parameters()) {
    names.push_back(name);
    // dt_bias near 0 rather than its initial -2.3..-6.9: the gradients of A_log and dt_bias
    // scale with the decay, and so small they would drown in the differences' rounding.
    const Tensor base = name == "dt_bias" ? Tensor::zeros(p.shape()) : p.detach();
    inputs.push_back(f64_leaf(base + Tensor::randn(p.shape(), gen, DType::f32, 0, 0.1)));
  }
  inputs.push_back(f64_leaf(random_input(1, 6, c.d_model, 11)));
  auto f = [&](const std::vector<Tensor>& in) {
    ParamMap P;
    for (size_t i = 0; i < names.size(); ++i) P[names[i]] = in[i];
    return reference_forward(c, P, in.back());
  };
  const GradCheckResult r = grad_check(f, inputs);
  for (size_t i = 0; i < r.rel_error.size(); ++i)
    EXPECT_LT(r.rel_error[i], 1e-6) << (i < names.size() ? names[i] : std::string("x"));
}

// step() in pieces reproduces forward(): one token at a time (recurrent_step_kda), and a
// 20-token prompt (chunk op), a 5-token piece (fused recurrent op), then single tokens.
TEST_P(KdaMixerTest, StepReproducesForward) {
  const MixerConfig& c = GetParam().config;
  expect_steps_reproduce_forward(*build(c), random_input(2, 37, c.d_model, 4));
}

// A prefill split anywhere (inside the conv window, at and across chunk boundaries) gives
// the outputs of one pass, and the states after it continue the same way.
TEST_P(KdaMixerTest, SplitPrefillEqualsOnePass) {
  const MixerConfig& c = GetParam().config;
  expect_split_prefill_equals_one_pass(*build(c), random_input(2, 37, c.d_model, 5), {1, 2, 3, 16, 17, 30, 35});
}

// Packed sequences (1-token ones, ones shorter than the conv, across chunks, a row start
// left out) equal the mixer on each sequence alone, outputs and every gradient.
TEST_P(KdaMixerTest, PackedSequencesEqualSeparateCalls) {
  const MixerConfig& c = GetParam().config;
  auto m = build(c);
  expect_packed_matches_separate(*m, c.d_model);
}

// The same layer on the GPU: output, dx and every parameter gradient as on the CPU, and
// generation: a 20-token prompt (chunk op), a 5-token piece (fused recurrent op), then
// single tokens (recurrent step), all against the CPU forward.
TEST_P(KdaMixerTest, CudaMatchesCpu) {
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
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i)
    EXPECT_LT(relative_error(gpu_params[i].second.grad().to(Device::cpu()), cpu_params[i].second.grad()), 1e-4)
        << cpu_params[i].first;
  NoGradGuard no_grad;
  auto state = gpu_layer->make_state(B);
  std::vector<Tensor> outputs{gpu_layer->step(slice(x, 1, 0, 20).to(gpu), *state),
                              gpu_layer->step(slice(x, 1, 20, 25).to(gpu), *state)};
  for (int64_t t = 25; t < T; ++t) outputs.push_back(gpu_layer->step(slice(x, 1, t, t + 1).to(gpu), *state));
  EXPECT_LT(relative_error(concat(outputs, 1).to(Device::cpu()), y_cpu.detach()), 1e-5) << "step";
}

INSTANTIATE_TEST_SUITE_P(Configs, KdaMixerTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- names, shapes and initialization ------------------------------------------------------

// Kimi Linear's names and shapes (A_log [H] here, [1, 1, H, 1] in its checkpoints), in
// registration order.
TEST(KdaMixer, ParameterNamesAndShapes) {
  MixerConfig c = small_config();
  c.expand_v = 1.5;  // V = 12
  Generator gen(0);
  auto m = make_mixer("kda", c, gen);
  std::vector<std::pair<std::string, Shape>> got;
  for (auto& [name, p] : m->named_parameters()) got.emplace_back(name, p.shape());
  const std::vector<std::pair<std::string, Shape>> expected = {{"q_proj.weight", {16, 16}},
                                                               {"k_proj.weight", {16, 16}},
                                                               {"v_proj.weight", {24, 16}},
                                                               {"q_conv1d.weight", {16, 1, 4}},
                                                               {"k_conv1d.weight", {16, 1, 4}},
                                                               {"v_conv1d.weight", {24, 1, 4}},
                                                               {"f_a_proj.weight", {8, 16}},
                                                               {"f_b_proj.weight", {16, 8}},
                                                               {"A_log", {2}},
                                                               {"dt_bias", {16}},
                                                               {"b_proj.weight", {2, 16}},
                                                               {"g_a_proj.weight", {8, 16}},
                                                               {"g_b_proj.weight", {24, 8}},
                                                               {"o_norm.weight", {12}},
                                                               {"o_proj.weight", {16, 24}}};
  EXPECT_EQ(got, expected);

  c.use_gate = false;
  c.use_short_conv = false;
  auto bare = make_mixer("kda", c, gen);
  std::vector<std::string> names;
  for (auto& [name, p] : bare->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"q_proj.weight", "k_proj.weight", "v_proj.weight", "f_a_proj.weight",
                                             "f_b_proj.weight", "A_log", "dt_bias", "b_proj.weight", "o_norm.weight",
                                             "o_proj.weight"}));
}

// transformers' _init_weights: A_log = log U[1, 16] per head, softplus(dt_bias) in [1e-3, 1e-1]
// per key channel and spread over it, o_norm ones.
TEST(KdaMixer, Initialization) {
  MixerConfig c = small_config();
  c.n_heads = 4;
  c.head_dim = 16;
  c.d_model = 64;
  Generator gen(3);
  KimiDeltaAttention m(c, gen);
  for (auto& [name, p] : m.named_parameters()) {
    const std::vector<float> v = p.to_vector();
    if (name == "A_log") {
      ASSERT_EQ(v.size(), 4u);
      for (float e : v) {
        EXPECT_GE(e, 0.0f);
        EXPECT_LE(e, std::log(16.0f));
      }
    }
    if (name == "o_norm.weight") {
      for (float e : v) EXPECT_EQ(e, 1.0f);
    }
    if (name == "dt_bias") {
      ASSERT_EQ(v.size(), 64u);
      double low = 1, high = 0;
      for (float e : v) {
        const double dt = std::log1p(std::exp(static_cast<double>(e)));
        EXPECT_GE(dt, 1e-3 * (1 - 1e-5));
        EXPECT_LE(dt, 1e-1 * (1 + 1e-5));
        low = std::min(low, dt);
        high = std::max(high, dt);
      }
      EXPECT_LT(low, 0.003);  // log-uniform over two decades: 64 draws reach both ends
      EXPECT_GT(high, 0.03);
    }
  }
}

// The log-decay is per key channel, <= 0, and the one forward uses: -exp(A_log) softplus(.).
TEST(KdaMixer, LogDecayPerKeyChannel) {
  const MixerConfig c = small_config();
  auto m = build(c);
  const Tensor x = random_input(2, 5, c.d_model, 3);
  NoGradGuard no_grad;
  const Tensor g = m->log_decay(x);
  ASSERT_EQ(g.shape(), Shape({2, 5, 2, 8}));
  ParamMap P;
  for (auto& [name, p] : m->named_parameters()) P[name] = p.detach().to(DType::f64);
  const Tensor f = linear(linear(x.to(DType::f64), P.at("f_a_proj.weight")), P.at("f_b_proj.weight")) + P.at("dt_bias");
  const Tensor expected = -(exp(P.at("A_log")).reshape({2, 1}) * softplus(f.reshape({2, 5, 2, 8})));
  EXPECT_LT(relative_error(g, expected), 1e-6);
  for (float e : g.to_vector()) EXPECT_LE(e, 0.0f);
}

// bf16 products (projections, the chunk op) keep the output close to fp32's; the gradients
// stay finite.
TEST(KdaMixer, Bf16CloseToFp32) {
  if (!bf16_supported(Device::cpu())) GTEST_SKIP() << "no bf16 products on this CPU";
  const MixerConfig c = small_config();
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

TEST(KdaMixer, BadOptionsNameTheOption) {
  const auto expect_refused = [](auto change, std::string_view message) {
    MixerConfig c = small_config();
    change(c);
    Generator gen(0);
    expect_error([&] { KimiDeltaAttention(c, gen); }, {message});
  };
  expect_refused([](MixerConfig& c) { c.n_v_heads = 4; },
                 "LinearMixer(kda): n_v_heads: expected n_heads 2 (value heads apart from key heads exist in gdn and "
                 "delta_net only), got 4");
  expect_refused([](MixerConfig& c) { c.head_dim = 512; },
                 "LinearMixer(kda): head_dim: expected 1..256 (the kernels' limit), got 512");
  expect_refused([](MixerConfig& c) { c.conv_size = 0; }, "LinearMixer(kda): conv_size: expected >= 1, got 0");
}

TEST(KdaMixer, StepRejectsForeignStateAndWrongShapes) {
  const MixerConfig c = small_config();
  auto m = build(c);
  Generator gen(0);
  auto other = make_mixer("gdn", c, gen);
  auto foreign = other->make_state(2);
  expect_error([&] { m->step(random_input(2, 1, c.d_model, 1), *foreign); },
               {"kda::step: state: expected a state made by a kda mixer's make_state, got one of kind gdn"});
  auto state = m->make_state(2);
  expect_error([&] { m->step(random_input(3, 1, c.d_model, 1), *state); },
               {"kda::step: x: expected shape [2, T >= 1, 16], got [3, 1, 16]"});
  expect_error([&] { m->forward(random_input(2, 3, 12, 1)); },
               {"kda::forward: x: expected shape [B, T, 16], got [2, 3, 12]"});
}

// ---- config (model.n_heads, model.head_dim, model.linear.*) --------------------------------

TEST(KdaConfig, TheLinearKeysBuildTheLayer) {
  const Config c = parse(
      "model:\n  d_model: 64\n  n_heads: 2\n  head_dim: 16\n  expand_v: 2\n  layers: kda,attn\n"
      "  linear: {conv_size: 3, chunk_size: 32, use_gate: false}\n");
  const HybridLMConfig lm = hybrid_lm_config(c.model, 50);
  Generator gen(0);
  auto m = make_mixer("kda", lm.mixer, gen);
  std::vector<std::pair<std::string, Shape>> got;
  for (auto& [name, p] : m->named_parameters()) got.emplace_back(name, p.shape());
  const std::vector<std::pair<std::string, Shape>> expected = {{"q_proj.weight", {32, 64}},
                                                               {"k_proj.weight", {32, 64}},
                                                               {"v_proj.weight", {64, 64}},
                                                               {"q_conv1d.weight", {32, 1, 3}},
                                                               {"k_conv1d.weight", {32, 1, 3}},
                                                               {"v_conv1d.weight", {64, 1, 3}},
                                                               {"f_a_proj.weight", {16, 64}},
                                                               {"f_b_proj.weight", {32, 16}},
                                                               {"A_log", {2}},
                                                               {"dt_bias", {32}},
                                                               {"b_proj.weight", {2, 64}},
                                                               {"o_norm.weight", {32}},
                                                               {"o_proj.weight", {64, 64}}};
  EXPECT_EQ(got, expected);
  const auto& kda = dynamic_cast<const KimiDeltaAttention&>(*m);
  EXPECT_EQ(kda.config().chunk_size, 32);
  EXPECT_EQ(kda.config().conv_size, 3);
}

TEST(KdaConfig, ImpossibleValuesNameTheKey) {
  expect_config_error("model:\n  layers: kda,attn\n  linear: {n_v_heads: 8}\n",
                      "model.linear.n_v_heads: value heads apart from the key heads exist in gdn and delta_net layers "
                      "only, but model.layers has 'kda' (run.yaml:4)");
  expect_config_error("model:\n  layers: kda,attn\n  d_model: 1024\n  n_heads: 2\n",
                      "model.d_model: the linear-attention kernels take head dimensions up to 256, got head_dim 512 "
                      "and value dim 512 (run.yaml:4)");
}

// lat info: a kda layer holds its state [H, K, V] and the conv state of q, k and v,
// [conv_size - 1, 2 H K + H V]; the parameters are the model's.
TEST(KdaConfig, InfoCountsTheStateMemory) {
  const Config c = parse("model:\n  d_model: 32\n  n_layers: 2\n  n_heads: 2\n  expand_v: 2\n  layers: kda,attn\n");
  const ModelInfo info = model_info(c, 50, 100);
  ASSERT_EQ(info.memory.size(), 2u);
  EXPECT_EQ(info.memory[0].kind, "kda");
  EXPECT_EQ(info.memory[0].state, 2 * 16 * 32);
  EXPECT_EQ(info.memory[0].conv, 3 * (2 * 32 + 64));
  Generator gen(0);
  const HybridLM model(hybrid_lm_config(c.model, 50), gen);
  EXPECT_EQ(info.total_params, model.num_parameters());
  // q, k [32, 32], v [64, 32]; convs (32 + 32 + 64) x 4; f_a [16, 32], f_b [32, 16]; A_log 2;
  // dt_bias 32; b_proj [2, 32]; g_a [16, 32], g_b [64, 16]; o_norm 32; o_proj [32, 64].
  const int64_t kda = 2 * 32 * 32 + 64 * 32 + 128 * 4 + 16 * 32 + 32 * 16 + 2 + 32 + 2 * 32 + 16 * 32 + 64 * 16 + 32 +
                      32 * 64;
  EXPECT_EQ(info.params[1].name, "layers.0.attn (kda)");
  EXPECT_EQ(info.params[1].count, kda);
}

}  // namespace
}  // namespace lat
