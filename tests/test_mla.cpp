// The multi-head latent attention mixer (layers/mla_attention.h) against a float64 reference
// written here from the formulas of KimiLinearAttention (an explicit latent, its expansion
// per head, the shared key part broadcast to every head, a masked softmax): outputs and every
// gradient, the reference against finite differences, q_lora_rank 0 and > 0, rope off and on,
// step() against forward() (token by token and a prefill split anywhere), packed sequences
// against separate calls, the cache's size, bf16 against fp32, CUDA against the CPU, `lat info`
// and config errors.
//
// Letters: B batch, T tokens, H heads, R q_lora_rank, C kv_lora_rank, Dn qk_nope_head_dim,
// Dr qk_rope_head_dim, Dv v_head_dim, Dq = Dn + Dr.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lat/cuda.h"
#include "lat/lat.h"
#include "lat/precision.h"
#include "layers/mla_attention.h"
#include "tests/config_testing.h"
#include "tests/expect_error.h"
#include "tests/mixer_reference.h"
#include "train/config/config.h"
#include "train/config/model_config.h"
#include "train/files/model_reader.h"
#include "train/files/trained_model.h"
#include "train/inference/info.h"
#include "train/run/memory_estimate.h"
#include "train/run/device.h"

namespace lat {
namespace {

using testing::expect_config_error;
using testing::expect_error;
using testing::expect_matches_float64_reference;
using testing::expect_packed_matches_separate;
using testing::f64_leaf;
using testing::linear;
using testing::ParamMap;
using testing::parse;
using testing::random_input;
using testing::rms_norm_ref;
using testing::run_steps;

constexpr double kLatentNormEps = 1e-6;  // transformers' KimiLinearRMSNorm default

struct Case {
  std::string name;
  MixerConfig config;
};

// d_model 12, 2 model heads, 3 attention heads; init far from GPT-2's 0.02 so that the
// softmax is peaky.
MixerConfig mla_config(int64_t q_lora_rank, int64_t C, int64_t Dn, int64_t Dr, int64_t Dv, bool rope,
                       int64_t window = 0) {
  MixerConfig c;
  c.d_model = 12;
  c.n_heads = 2;
  c.attn_n_heads = 3;
  c.window_size = window;
  c.rope_theta = 100.0;
  c.init_std = 0.3;
  c.out_init_std = 0.3;
  c.mla = {.q_lora_rank = q_lora_rank, .kv_lora_rank = C, .qk_nope_head_dim = Dn, .qk_rope_head_dim = Dr,
           .v_head_dim = Dv, .rope = rope};
  return c;
}

std::vector<Case> cases() {
  return {{"plain_q_nope", mla_config(0, 6, 4, 2, 5, false)},
          {"low_rank_q_rope", mla_config(5, 7, 4, 4, 3, true)},
          {"no_shared_part", mla_config(0, 5, 6, 0, 6, false)},
          {"shared_part_only_rope_window", mla_config(4, 6, 0, 6, 4, true, 5)},
          {"window_nope", mla_config(3, 4, 2, 2, 2, false, 3)},
          {"window_of_one_token", mla_config(0, 4, 2, 2, 2, true, 1)}};
}

// A layer whose RMSNorm weights are away from their init (ones), so that an ignored or swapped
// norm weight shows.
std::unique_ptr<MlaAttention> build(const MixerConfig& c, uint64_t seed = 3) {
  Generator gen(seed);
  auto m = std::make_unique<MlaAttention>(c, gen);
  Generator noise(7);
  for (auto& [name, p] : m->named_parameters())
    if (name == "kv_a_layernorm.weight" || name == "q_a_layernorm.weight")
      p.copy_(p + Tensor::randn(p.shape(), noise, DType::f32, 0, 0.3));
  return m;
}

// ---- float64 reference --------------------------------------------------------------------

// RoPE in the non-interleaved layout on x [B, T, n, Dr]: the pair (x_i, x_{i+Dr/2}) of token t
// turns by t * theta^(-2i/Dr).
Tensor rope_ref(const Tensor& x, double theta) {
  const int64_t T = x.size(1), Dr = x.size(3), half = Dr / 2;
  std::vector<double> cos_v, sin_v;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / Dr);
      cos_v.push_back(std::cos(angle));
      sin_v.push_back(std::sin(angle));
    }
  const Tensor cos_t = Tensor::from_vector(cos_v, {T, 1, half}), sin_t = Tensor::from_vector(sin_v, {T, 1, half});
  const Tensor a = slice(x, 3, 0, half), b = slice(x, 3, half, Dr);
  return concat({a * cos_t - b * sin_t, b * cos_t + a * sin_t}, 3);
}

// 0 where query i sees key j (j <= i, and j > i - window with a window), -1e9 elsewhere: [T, T].
Tensor causal_mask(int64_t T, int64_t window) {
  std::vector<double> m(static_cast<size_t>(T * T));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) m[i * T + j] = j <= i && (window == 0 || j > i - window) ? 0.0 : -1e9;
  return Tensor::from_vector(m, {T, T});
}

// Concatenates the non-empty pieces along the last axis of 4-D tensors.
Tensor concat_heads(const std::vector<Tensor>& pieces) {
  std::vector<Tensor> kept;
  for (const Tensor& p : pieces)
    if (p.size(3) > 0) kept.push_back(p);
  return kept.size() == 1 ? kept[0] : concat(kept, 3);
}

// KimiLinearAttention on x [B, T, d_model] (float64, each row a sequence from position 0).
Tensor reference_forward(const MixerConfig& c, ParamMap& P, const Tensor& x) {
  const MlaOptions& o = c.mla;
  const int64_t B = x.size(0), T = x.size(1), H = c.attn_n_heads, C = o.kv_lora_rank, Dn = o.qk_nope_head_dim,
                Dr = o.qk_rope_head_dim, Dv = o.v_head_dim, Dq = Dn + Dr;
  // Queries [B, T, H, Dq], each head's channels [nope | rope].
  const Tensor q_flat =
      o.q_lora_rank == 0
          ? linear(x, P["q_proj.weight"])
          : linear(rms_norm_ref(linear(x, P["q_a_proj.weight"]), P["q_a_layernorm.weight"], kLatentNormEps),
                   P["q_b_proj.weight"]);
  Tensor q = q_flat.reshape({B, T, H, Dq});
  // The latent [B, T, C] and the shared key part [B, T, 1, Dr] of every token.
  const Tensor compressed = linear(x, P["kv_a_proj_with_mqa.weight"]);
  const Tensor latent = rms_norm_ref(slice(compressed, 2, 0, C), P["kv_a_layernorm.weight"], kLatentNormEps);
  Tensor k_rot = slice(compressed, 2, C, C + Dr).reshape({B, T, 1, Dr});
  if (o.rope) {
    q = concat_heads({slice(q, 3, 0, Dn), rope_ref(slice(q, 3, Dn, Dq), c.rope_theta)});
    k_rot = rope_ref(k_rot, c.rope_theta);
  }
  // Expansion: per head [k_nope | v] from the latent; the key is [k_nope | k_rot].
  const Tensor kv = linear(latent, P["kv_b_proj.weight"]).reshape({B, T, H, Dn + Dv});
  const Tensor k = concat_heads({slice(kv, 3, 0, Dn), k_rot + Tensor::zeros({B, T, H, Dr}, DType::f64)});
  const Tensor v = slice(kv, 3, Dn, Dn + Dv);
  // Causal softmax attention per head, scaled by Dq^-0.5.
  const Tensor qh = permute(q, {0, 2, 1, 3}), kh = permute(k, {0, 2, 1, 3}), vh = permute(v, {0, 2, 1, 3});
  const Tensor scores = matmul(qh, kh, false, true) * (1.0 / std::sqrt(static_cast<double>(Dq)));
  const Tensor probs = softmax(scores + causal_mask(T, c.window_size));
  const Tensor heads = permute(matmul(probs, vh), {0, 2, 1, 3}).reshape({B, T, H * Dv});
  return linear(heads, P["o_proj.weight"]);
}

class MlaTest : public ::testing::TestWithParam<Case> {};

// The float32 layer against the float64 reference: output within 1e-5, dx and every
// parameter's gradient within 1e-4 (relative).
TEST_P(MlaTest, MatchesFloat64Reference) {
  const MixerConfig& c = GetParam().config;
  auto m = build(c);
  expect_matches_float64_reference(*m, c.d_model,
                                   [&](ParamMap& P, const Tensor& x64) { return reference_forward(c, P, x64); });
}

// The reference's gradients for every parameter and the input against central differences.
TEST_P(MlaTest, ReferenceMatchesFiniteDifferences) {
  const MixerConfig& c = GetParam().config;
  auto m = build(c);
  std::vector<std::string> names;
  std::vector<Tensor> inputs;
  for (auto& [name, p] : m->named_parameters()) {
    names.push_back(name);
    inputs.push_back(f64_leaf(p));
  }
  inputs.push_back(f64_leaf(random_input(2, 7, c.d_model, 11)));
  auto f = [&](const std::vector<Tensor>& in) {
    ParamMap P;
    for (size_t i = 0; i < names.size(); ++i) P[names[i]] = in[i];
    return reference_forward(c, P, in.back());
  };
  const GradCheckResult r = grad_check(f, inputs);
  ASSERT_EQ(r.rel_error.size(), names.size() + 1);
  for (size_t i = 0; i < r.rel_error.size(); ++i)
    EXPECT_LT(r.rel_error[i], 1e-6) << (i < names.size() ? names[i] : std::string("x"));
}

TEST_P(MlaTest, StepTokenByTokenEqualsForward) {
  const MixerConfig& c = GetParam().config;
  auto m = build(c);
  const int64_t B = 2, T = 23;
  const Tensor x = random_input(B, T, c.d_model, 4);
  NoGradGuard no_grad;
  EXPECT_LT(relative_error(run_steps(*m, x, std::vector<int64_t>(T, 1)), m->forward(x)), 1e-5);
}

// A prefill cut at every position, then the rest in one piece and one more token, equals one
// pass: the cache after any prefill continues the same way.
TEST_P(MlaTest, PrefillSplitAnywhereEqualsOnePass) {
  const MixerConfig& c = GetParam().config;
  auto m = build(c);
  const int64_t B = 2, T = 17;
  const Tensor x = random_input(B, T, c.d_model, 5);
  NoGradGuard no_grad;
  const Tensor expected = m->forward(x);
  for (int64_t cut = 1; cut < T - 1; ++cut)
    EXPECT_LT(relative_error(run_steps(*m, x, {cut, T - 1 - cut, 1}), expected), 1e-5) << "cut " << cut;
}

// Packed sequences (1-token ones, one across a row start) equal the layer on each alone:
// outputs and every gradient, RoPE positions restarting at each sequence.
TEST_P(MlaTest, PackedSequencesEqualSeparateCalls) {
  const MixerConfig& c = GetParam().config;
  auto m = build(c);
  expect_packed_matches_separate(*m, c.d_model);
}

// The cache holds per token the latent and the shared key part only: (C + Dr) floats, however
// many heads; with a window, no more rows than the window still shows.
TEST_P(MlaTest, CacheKeepsTheLatentAndTheSharedPartOnly) {
  const MixerConfig& c = GetParam().config;
  const MlaOptions& o = c.mla;
  auto m = build(c);
  const int64_t B = 2, T = 11;
  const Tensor x = random_input(B, T, c.d_model, 6);
  auto state = m->make_state(B);
  m->step(slice(x, 1, 0, 8), *state);
  for (int64_t t = 8; t < T; ++t) m->step(slice(x, 1, t, t + 1), *state);
  const auto& cache = dynamic_cast<const MlaCache&>(*state);
  const int64_t L = c.window_size > 0 ? c.window_size : T;
  EXPECT_EQ(cache.length, L);
  EXPECT_EQ(cache.position, T);
  EXPECT_EQ(cache.latent.shape(), Shape({B, L, o.kv_lora_rank}));
  EXPECT_EQ(cache.latent.dtype(), DType::f32);
  int64_t bytes = cache.latent.numel() * 4;
  if (o.qk_rope_head_dim > 0) {
    EXPECT_EQ(cache.k_rot.shape(), Shape({B, L, o.qk_rope_head_dim}));
    EXPECT_EQ(cache.k_rot.dtype(), DType::f32);
    bytes += cache.k_rot.numel() * 4;
  } else {
    EXPECT_FALSE(cache.k_rot.defined());
  }
  EXPECT_EQ(bytes / (B * L), (o.kv_lora_rank + o.qk_rope_head_dim) * 4);
}

// The same layer on the GPU: output, dx and every parameter gradient as on the CPU, packed or
// not, and generation (a prompt, then single tokens) with the cache on the GPU.
TEST_P(MlaTest, CudaMatchesCpu) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << (cuda_built() ? "no CUDA device visible" : "lat was built without CUDA (LAT_CUDA=OFF)");
  const MixerConfig& c = GetParam().config;
  const Device gpu = Device::cuda(0);
  const int64_t B = 2, T = 13, D = c.d_model;
  const Tensor x = random_input(B, T, D, 14);
  Generator gen(15);
  const Tensor w = Tensor::randn({B, T, D}, gen);
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed" : "batched");
    auto cpu_layer = build(c), gpu_layer = build(c);
    move_parameters(*gpu_layer, gpu);
    const Tensor cu = packed ? Tensor::from_vector(std::vector<int64_t>{0, 1, 5, 16, 26}, {5}) : Tensor();
    Tensor x_cpu = x.clone().set_requires_grad(true), x_gpu = x.to(gpu).set_requires_grad(true);
    const Tensor y_cpu = cpu_layer->forward(x_cpu, cu);
    backward(sum(y_cpu * w));
    const Tensor y_gpu = gpu_layer->forward(x_gpu, cu);
    backward(sum(y_gpu * w.to(gpu)));
    EXPECT_LT(relative_error(y_gpu.detach().to(Device::cpu()), y_cpu.detach()), 1e-5) << "output";
    EXPECT_LT(relative_error(x_gpu.grad().to(Device::cpu()), x_cpu.grad()), 1e-4) << "dx";
    const auto cpu_params = cpu_layer->named_parameters(), gpu_params = gpu_layer->named_parameters();
    for (size_t i = 0; i < cpu_params.size(); ++i)
      EXPECT_LT(relative_error(gpu_params[i].second.grad().to(Device::cpu()), cpu_params[i].second.grad()), 1e-4)
          << cpu_params[i].first;
    if (packed) continue;
    NoGradGuard no_grad;
    std::vector<int64_t> pieces{6};
    pieces.resize(T - 5, 1);
    EXPECT_LT(relative_error(run_steps(*gpu_layer, x.to(gpu), pieces).to(Device::cpu()), y_cpu.detach()), 1e-5)
        << "step";
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, MlaTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- names, shapes, precision ---------------------------------------------------------------

// transformers' KimiLinearAttention names and shapes, in its registration order.
TEST(Mla, ParameterNamesAndShapes) {
  for (int64_t R : {0, 5}) {
    SCOPED_TRACE("q_lora_rank " + std::to_string(R));
    auto m = build(mla_config(R, 7, 4, 2, 5, false));
    std::vector<std::pair<std::string, Shape>> got;
    for (auto& [name, p] : m->named_parameters()) got.emplace_back(name, p.shape());
    // H = 3, Dq = 6: queries 18 rows; kv_b_proj 3 * (4 + 5) = 27 rows; o_proj 3 * 5 columns.
    std::vector<std::pair<std::string, Shape>> expected;
    if (R == 0)
      expected = {{"q_proj.weight", {18, 12}}};
    else
      expected = {{"q_a_proj.weight", {5, 12}}, {"q_a_layernorm.weight", {5}}, {"q_b_proj.weight", {18, 5}}};
    for (auto& entry : std::vector<std::pair<std::string, Shape>>{{"kv_a_proj_with_mqa.weight", {9, 12}},
                                                                  {"kv_a_layernorm.weight", {7}},
                                                                  {"kv_b_proj.weight", {27, 7}},
                                                                  {"o_proj.weight", {12, 15}}})
      expected.push_back(entry);
    EXPECT_EQ(got, expected);
  }
  // The head count falls back to the model's n_heads.
  MixerConfig c = mla_config(0, 7, 4, 2, 5, false);
  c.attn_n_heads = 0;
  Generator gen(1);
  MlaAttention m(c, gen);
  EXPECT_EQ(m.config().attn_n_heads, 2);
  EXPECT_EQ(m.named_parameters().back().second.shape(), Shape({12, 10}));
}

// Without rope the layer sees no positions (NoPE, Kimi Linear): the last token's output does
// not change when the tokens before it are reordered. With rope it does; the first token,
// which sees itself alone, has the same output either way (the rotation only moves scores).
TEST(Mla, RopeGivesPositionsNoPEDoesNot) {
  auto nope = build(mla_config(0, 6, 4, 4, 3, false)), roped = build(mla_config(0, 6, 4, 4, 3, true));
  const int64_t T = 6;
  const Tensor x = random_input(1, T, 12, 8);
  std::vector<Tensor> reordered;
  for (int64_t t = T - 2; t >= 0; --t) reordered.push_back(slice(x, 1, t, t + 1));
  reordered.push_back(slice(x, 1, T - 1, T));
  const Tensor x_reordered = concat(reordered, 1);
  NoGradGuard no_grad;
  const auto last = [&](const MlaAttention& m, const Tensor& in) { return slice(m.forward(in), 1, T - 1, T); };
  EXPECT_LT(relative_error(last(*nope, x_reordered), last(*nope, x)), 1e-6);
  EXPECT_GT(relative_error(last(*roped, x_reordered), last(*roped, x)), 1e-3);
  EXPECT_LT(relative_error(slice(roped->forward(x), 1, 0, 1), slice(nope->forward(x), 1, 0, 1)), 1e-6);
}

// bf16 products (projections, the attention op) keep the output close to fp32's, further
// from it than fp32's rounding (bf16 really used); the gradients stay finite.
TEST(Mla, Bf16CloseToFp32) {
  if (!bf16_supported(Device::cpu())) GTEST_SKIP() << "no bf16 products on this CPU";
  const MixerConfig c = mla_config(5, 7, 4, 4, 3, true);
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
  EXPECT_GT(relative_error(y, fp32), 1e-5);
  backward(sum(y));
  for (auto& [name, p] : m->named_parameters())
    for (float v : p.grad().to_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
}

// ---- errors ---------------------------------------------------------------------------------

TEST(Mla, BadOptionsNameTheOption) {
  const auto expect_refused = [](auto change, std::string_view message) {
    MixerConfig c = mla_config(0, 6, 4, 2, 5, false);
    change(c);
    Generator gen(0);
    expect_error([&] { MlaAttention(c, gen); }, {message});
  };
  expect_refused([](MixerConfig& c) { c.mla.kv_lora_rank = 0; },
                 "MlaAttention: kv_lora_rank: expected a size >= 1, got 0");
  expect_refused([](MixerConfig& c) { c.mla.q_lora_rank = -1; },
                 "MlaAttention: q_lora_rank: expected a size >= 0 (0 = a plain q_proj), got -1");
  expect_refused([](MixerConfig& c) { c.mla.qk_nope_head_dim = -2; },
                 "MlaAttention: qk_nope_head_dim: expected a size >= 0, got -2");
  expect_refused([](MixerConfig& c) { c.mla.qk_rope_head_dim = -1; },
                 "MlaAttention: qk_rope_head_dim: expected a size >= 0, got -1");
  expect_refused([](MixerConfig& c) { c.mla.qk_nope_head_dim = c.mla.qk_rope_head_dim = 0; },
                 "MlaAttention: qk_nope_head_dim + qk_rope_head_dim: expected a query/key head size >= 1, got 0");
  expect_refused([](MixerConfig& c) { c.mla.v_head_dim = 0; }, "MlaAttention: v_head_dim: expected a size >= 1, got 0");
  expect_refused(
      [](MixerConfig& c) {
        c.mla.rope = true;
        c.mla.qk_rope_head_dim = 3;
      },
      "MlaAttention: qk_rope_head_dim: expected an even size >= 2 with rope (RoPE rotates pairs), got 3");
  expect_refused(
      [](MixerConfig& c) {
        c.mla.rope = true;
        c.mla.qk_rope_head_dim = 0;
      },
      "MlaAttention: qk_rope_head_dim: expected an even size >= 2 with rope (RoPE rotates pairs), got 0");
  expect_refused([](MixerConfig& c) { c.window_size = -1; },
                 "MlaAttention: window_size: expected >= 0 (0 = full), got -1");
  expect_refused([](MixerConfig& c) { c.attn_n_heads = -3; },
                 "MlaAttention: attn_n_heads: expected a positive count (0 = n_heads), got -3");
}

TEST(Mla, StepRejectsForeignStateAndWrongShapes) {
  auto m = build(mla_config(0, 6, 4, 2, 5, false));
  Generator gen(0);
  auto other = make_mixer("gdn", MixerConfig{}, gen);
  auto foreign = other->make_state(2);
  expect_error([&] { m->step(random_input(2, 1, 12, 1), *foreign); },
               {"MlaAttention::step: state: expected an MlaCache (made by MlaAttention::make_state)"});
  auto state = m->make_state(2);
  expect_error([&] { m->step(random_input(3, 1, 12, 1), *state); },
               {"MlaAttention::step: x: expected shape [2, T, 12], got [3, 1, 12]"});
  expect_error([&] { m->forward(random_input(2, 3, 10, 1)); },
               {"MlaAttention::forward: x: expected shape [B, T, 12], got [2, 3, 10]"});
}

// ---- config (model.mla.*) and lat info ------------------------------------------------------

TEST(MlaConfig, DefaultsAndTheLayerTheyBuild) {
  const Config c = parse("model: {layers: \"gdn,mla\", d_model: 64}\n");
  const MlaConfig& m = c.model.mla;
  EXPECT_EQ(m.q_lora_rank, 0);
  EXPECT_EQ(m.kv_lora_rank, 64);
  EXPECT_EQ(m.qk_nope_head_dim, 32);
  EXPECT_EQ(m.qk_rope_head_dim, 16);
  EXPECT_EQ(m.v_head_dim, 32);
  EXPECT_FALSE(m.rope);
  const Config set = parse(
      "model:\n  layers: mla\n  attn: {n_heads: 2, window_size: 8}\n  mla: {q_lora_rank: 6, kv_lora_rank: 10, "
      "qk_nope_head_dim: 0, qk_rope_head_dim: 4, v_head_dim: 3, rope: true}\n");
  EXPECT_EQ(set.model.mla, (MlaConfig{6, 10, 0, 4, 3, true}));
  // The saved config reads back to the same keys.
  EXPECT_EQ(parse_config(to_yaml(set), "saved.yaml").model.mla, set.model.mla);
}

TEST(MlaConfig, BadValuesNameTheKey) {
  expect_config_error("model.mla.kv_lora_rank: 0\n",
                      "model.mla.kv_lora_rank: expected an int in [1, 1024], got 0 (run.yaml:2)");
  expect_config_error("model.mla.q_lora_rank: -1\n",
                      "model.mla.q_lora_rank: expected an int in [0, 1024], got -1 (run.yaml:2)");
  expect_config_error("model.mla.qk_nope_head_dim: -4\n",
                      "model.mla.qk_nope_head_dim: expected an int in [0, 1024], got -4 (run.yaml:2)");
  expect_config_error("model.mla.v_head_dim: 0\n",
                      "model.mla.v_head_dim: expected an int in [1, 1024], got 0 (run.yaml:2)");
  expect_config_error("model:\n  layers: gdn,mla\n  mla: {qk_nope_head_dim: 0, qk_rope_head_dim: 0}\n",
                      "model.mla.qk_rope_head_dim: model.mla.qk_nope_head_dim + qk_rope_head_dim is the query/key "
                      "head size, expected at least 1, got 0 + 0 (run.yaml:4)");
  expect_config_error("model:\n  layers: mla\n  mla: {qk_rope_head_dim: 5, rope: true}\n",
                      "model.mla.rope: rotates model.mla.qk_rope_head_dim channels, expected an even number >= 2 "
                      "(RoPE rotates pairs), got 5 (run.yaml:4)");
  expect_config_error("model.mla.kv_lora_rnak: 8\n",
                      "model.mla.kv_lora_rnak: unknown key, did you mean 'model.mla.kv_lora_rank'? (run.yaml:2)");
  // Without an mla layer the sizes are not used, so their combination is not checked.
  EXPECT_NO_THROW(parse("model:\n  layers: gdn\n  mla: {qk_nope_head_dim: 0, qk_rope_head_dim: 0, rope: true}\n"));
}

// lat info: an mla layer holds min(context, window) * (C + Dr) floats, printed beside what a
// plain KV cache of its heads would take per token.
TEST(MlaConfig, InfoShowsTheLatentCacheBesideAPlainKvCache) {
  const Config c = parse("model:\n  layers: gdn,mla\n  n_layers: 2\n  d_model: 64\n  n_heads: 4\n");
  const ModelInfo info = model_info(c, 32, 1000);
  ASSERT_EQ(info.memory.size(), 2u);
  EXPECT_EQ(info.memory[1].kind, "mla");
  EXPECT_EQ(info.memory[1].cache_per_token, 64 + 16);
  EXPECT_EQ(info.memory[1].plain_kv_per_token, 4 * (32 + 16 + 32));
  EXPECT_EQ(info.memory[1].state, 1000 * (64 + 16));
  EXPECT_EQ(info.memory[1].conv, 0);
  const std::string text = format_info(info);
  EXPECT_NE(text.find("latent cache"), std::string::npos) << text;
  // The model line gives the mla sizes, and no attention line for a model without attn layers.
  EXPECT_NE(text.find("; mla 4 heads, latent 64, q/k 32 + 16 shared, v 32; vocab"), std::string::npos) << text;
  EXPECT_EQ(text.find("; attention "), std::string::npos) << text;
  EXPECT_NE(text.find("per token 320 B (latent + shared key); a plain KV cache of the same heads: 1.25 KiB"),
            std::string::npos)
      << text;
  const Config windowed = parse("model:\n  layers: mla\n  n_layers: 1\n  attn: {window_size: 100}\n");
  EXPECT_EQ(model_info(windowed, 32, 1000).memory[0].state, 100 * (64 + 16));
}

// The training step's memory estimate (made before the model is built) counts an mla model's
// parameters exactly: weights, gradients and two moments, 16 bytes each.
TEST(MlaConfig, StepMemoryEstimateCountsTheParameters) {
  for (const std::string q : {"0", "24"}) {
    SCOPED_TRACE("q_lora_rank " + q);
    const Config c = parse("model:\n  layers: mla\n  n_layers: 2\n  d_model: 64\n  mla: {q_lora_rank: " + q +
                           ", kv_lora_rank: 20, qk_nope_head_dim: 6, qk_rope_head_dim: 10, v_head_dim: 12}\n");
    const ModelInfo info = model_info(c, 32, 16);
    EXPECT_EQ(estimate_step_memory(c, 32, 1).parameters, 16.0 * static_cast<double>(info.total_params));
  }
}

// A step refused for its memory names the model.mla.* keys that make an mla layer's saved
// activations large: the latent where it dominates, else the per-head sizes.
TEST(MlaConfig, StepMemoryRefusalNamesTheMlaSizesThatMakeItLarge) {
  const double gib = double(1 << 30);
  const Config wide_latent = parse("data.block_size: 65536\nmodel:\n  layers: mla\n  n_layers: 2\n  d_model: 64\n"
                                   "  mla: {kv_lora_rank: 1024, qk_nope_head_dim: 8, qk_rope_head_dim: 8, "
                                   "v_head_dim: 8}\n");
  const StepMemory latent = estimate_step_memory(wide_latent, 32, 1);
  EXPECT_GT(latent.mla_activations, latent.activations / 4);
  check_step_memory(wide_latent, latent, 32, 64 * gib);  // fits in 64 GiB
  expect_error<ConfigError>([&] { check_step_memory(wide_latent, latent, 32, gib); },
                            {"(1.0 GiB): make data.block_size (65536), train.batch_size (12), model.d_model (64), "
                             "model.n_layers (2) or model.mla.kv_lora_rank (1024) smaller"});

  const Config heads = parse("data.block_size: 65536\nmodel:\n  layers: mla\n  n_layers: 2\n  d_model: 64\n");
  const StepMemory per_head = estimate_step_memory(heads, 32, 1);
  expect_error<ConfigError>([&] { check_step_memory(heads, per_head, 32, gib); },
                            {"make data.block_size (65536), train.batch_size (12), model.d_model (64), "
                             "model.n_layers (2), model.mla.qk_nope_head_dim (32) or model.mla.v_head_dim (32) "
                             "smaller"});

  // Without mla layers no model.mla.* key is named, whatever their values.
  const Config no_mla = parse("data.block_size: 65536\nmodel:\n  layers: gdn\n  n_layers: 2\n  d_model: 64\n"
                              "  mla: {kv_lora_rank: 1024}\n");
  const std::string message = expect_error<ConfigError>(
      [&] { check_step_memory(no_mla, estimate_step_memory(no_mla, 32, 1), 32, gib); },
      {"model.d_model (64) or model.n_layers (2) smaller"});
  EXPECT_EQ(message.find("model.mla."), std::string::npos) << message;
}

// model.attn.n_kv_heads groups attn layers' heads: set to another count in a model of mla
// layers and no attn layer it would read as mla's, and is refused; other attention-free models
// keep it (Hugging Face configs carry num_key_value_heads); the count it resolves to (what a
// resolved config repeats) is accepted.
TEST(MlaConfig, KvHeadsWithoutAttnLayersAreRefused) {
  expect_config_error("model:\n  layers: mla\n  attn: {n_kv_heads: 2}\n",
                      "model.attn.n_kv_heads: 2 key/value heads group the heads of attn layers only, but "
                      "model.layers 'mla' has none (an mla layer expands every head's key and value from its "
                      "latent, model.mla.kv_lora_rank): remove model.attn.n_kv_heads (run.yaml:4)");
  expect_config_error("model:\n  layers: kda,mla\n  attn: {n_kv_heads: 1}\n",
                      "model.attn.n_kv_heads: 1 key/value heads group the heads of attn layers only, but "
                      "model.layers 'kda,mla' has none (an mla layer expands every head's key and value from its "
                      "latent, model.mla.kv_lora_rank): remove model.attn.n_kv_heads (run.yaml:4)");
  EXPECT_EQ(parse("model:\n  layers: gdn\n  attn: {n_kv_heads: 1}\n").model.attn.n_kv_heads, 1);
  EXPECT_EQ(parse("model:\n  layers: gdn,mla,attn\n  attn: {n_kv_heads: 2}\n").model.attn.n_kv_heads, 2);
  const Config resolved = parse("model:\n  layers: mla\n  n_heads: 8\n");
  EXPECT_EQ(resolved.model.attn.n_kv_heads, 8);
  EXPECT_EQ(parse_config(to_yaml(resolved), "saved.yaml"), resolved);
}

// The other model.attn.* keys only attn layers read (head_dim, output_gate, qk_norm,
// rope_fraction) would be silently unused in a model of mla layers and no attn layer, and are
// refused there at other values than their defaults; the keys mla reads (n_heads, window_size,
// rope_theta) stay, as do the attn-only keys beside an attn layer or in other attention-free
// models (a Qwen3.5 import of gdn layers carries output_gate and qk_norm).
TEST(MlaConfig, AttnOnlyKeysWithoutAttnLayersAreRefused) {
  const std::string has_none =
      "' has none (mla layers use model.mla.*, and of model.attn only n_heads, window_size and rope_theta): remove ";
  expect_config_error("model:\n  d_model: 64\n  n_heads: 4\n  layers: kda,mla\n  attn: {head_dim: 32}\n",
                      "model.attn.head_dim: 32 sizes the heads of attn layers only, but model.layers 'kda,mla" +
                          has_none + "model.attn.head_dim (run.yaml:6)");
  expect_config_error("model:\n  layers: mla\n  attn: {output_gate: true}\n",
                      "model.attn.output_gate: true gates the output of attn layers only, but model.layers 'mla" +
                          has_none + "model.attn.output_gate (run.yaml:4)");
  expect_config_error("model:\n  layers: kda,mla\n  attn: {qk_norm: true}\n",
                      "model.attn.qk_norm: true normalizes q and k in attn layers only, but model.layers 'kda,mla" +
                          has_none + "model.attn.qk_norm (run.yaml:4)");
  expect_config_error("model:\n  layers: gdn,mla\n  attn: {rope_fraction: 0.5}\n",
                      "model.attn.rope_fraction: 0.5 rotates part of the heads of attn layers only, but "
                      "model.layers 'gdn,mla" + has_none + "model.attn.rope_fraction (run.yaml:4)");

  // The keys mla reads, and the attn-only keys at their defaults or model.head_dim.
  const Config mla_keys = parse("model:\n  d_model: 64\n  n_heads: 4\n  layers: kda,mla\n"
                                "  attn: {n_heads: 2, window_size: 8, rope_theta: 500.0, head_dim: 16, "
                                "output_gate: false, qk_norm: false, rope_fraction: 1.0}\n");
  EXPECT_EQ(mla_keys.model.attn.n_heads, 2);
  EXPECT_EQ(mla_keys.model.attn.window_size, 8);
  EXPECT_EQ(mla_keys.model.attn.rope_theta, 500.0);
  EXPECT_EQ(mla_keys.model.attn.head_dim, 16);
  // Beside an attn layer, and in attention-free models without mla layers.
  const std::string attn_only = "  attn: {head_dim: 32, output_gate: true, qk_norm: true, rope_fraction: 0.5}\n";
  EXPECT_TRUE(parse("model:\n  d_model: 64\n  n_heads: 4\n  layers: kda,mla,attn\n" + attn_only).model.attn.qk_norm);
  const Config gdn_only = parse("model:\n  d_model: 64\n  n_heads: 4\n  layers: gdn\n" + attn_only);
  EXPECT_EQ(gdn_only.model.attn.head_dim, 32);
  EXPECT_TRUE(gdn_only.model.attn.output_gate);
  EXPECT_EQ(gdn_only.model.attn.rope_fraction, 0.5);
}

// model_from_weights reads an mla model back exactly and compares the latent projections' and
// o_proj's sizes with model.mla.* and model.attn.n_heads before building the model.
TEST(MlaConfig, ModelFromWeightsChecksTheMlaSizes) {
  ModelWeights w{.path = "m.h5",
                 .config = parse("model: {d_model: 16, n_layers: 2, n_heads: 2, layers: \"mla,gdn\",\n"
                                 "        mla: {q_lora_rank: 3, kv_lora_rank: 8, qk_nope_head_dim: 4, "
                                 "qk_rope_head_dim: 2, v_head_dim: 6}}\n"),
                 .checkpoint = {}};
  Generator gen(3);
  HybridLM source(hybrid_lm_config(w.config.model, 13), gen);
  for (const auto& [name, t] : source.named_parameters()) w.checkpoint.model.emplace_back(name, t.detach().clone());
  std::unique_ptr<HybridLM> loaded = model_from_weights(w);
  const auto a = source.named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;

  ModelWeights larger_latent = w;
  larger_latent.config.model.mla.kv_lora_rank = 12;
  expect_error([&] { model_from_weights(larger_latent); },
               {"model_from_weights: 'm.h5': model.mla.kv_lora_rank 12 + qk_rope_head_dim 2 (mla layer) does not match "
                "tensor 'layers.0.attn.kv_a_proj_with_mqa.weight' [10, 16]: expected 14 rows, found 10"});
  ModelWeights narrower_values = w;
  narrower_values.config.model.mla.v_head_dim = 5;
  expect_error([&] { model_from_weights(narrower_values); },
               {"model.attn.n_heads 2 x (model.mla.qk_nope_head_dim 4 + v_head_dim 5) (mla layer) does not match "
                "tensor 'layers.0.attn.kv_b_proj.weight' [20, 8]: expected 18 rows, found 20"});
  ModelWeights more_heads = w;
  more_heads.config.model.attn.n_heads = 4;
  expect_error([&] { model_from_weights(more_heads); },
               {"model.attn.n_heads 4 x (model.mla.qk_nope_head_dim 4 + v_head_dim 6) (mla layer) does not match "
                "tensor 'layers.0.attn.kv_b_proj.weight' [20, 8]: expected 40 rows, found 20"});
}

}  // namespace
}  // namespace lat
