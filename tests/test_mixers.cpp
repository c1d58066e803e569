// The linear-attention mixers (layers/linear_attention_layers.h) and make_mixer: shapes,
// exact parameter names, step() against forward() (token by token and in prompt pieces that
// take the chunk, fused-recurrent and single-step paths), gradients reaching every
// parameter, outputs and every gradient against a float64 re-implementation of each layer
// from core ops and the naive kernels, that re-implementation against finite differences,
// the Mamba-2 decay (g <= 0, initialization) and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "lat/lat.h"
#include "layers/attention.h"
#include "layers/linear_attention_layers.h"
#include "tests/expect_error.h"
#include "tests/mixer_reference.h"

namespace lat {
namespace {

using testing::expect_error;
using testing::conv_silu;
using testing::expect_matches_float64_reference;
using testing::expect_packed_matches_separate;
using testing::ParamMap;
using testing::f64_leaf;
using testing::l2norm_ref;
using testing::linear;
using testing::perturb_norm_weights;
using testing::random_input;
using testing::rms_norm_ref;
using testing::expect_steps_reproduce_forward;

// Sizes of the small test layers: K = 8 and V = 12 (K != V), a chunk size of 16 so T = 37
// spans three partial chunks.
MixerConfig small_config() {
  MixerConfig c;
  c.d_model = 16;
  c.n_heads = 2;
  c.head_dim = 8;
  c.expand_v = 1.5;
  c.conv_size = 4;
  c.chunk_size = 16;
  // Larger than the default 0.02 so the gates and activations leave their linear regimes.
  c.init_std = 0.3;
  c.out_init_std = 0.2;
  return c;
}

struct Case {
  std::string name;  // test name suffix
  std::string kind;
  MixerConfig config;
};

// gtest prints the case by name instead of its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  std::vector<Case> out;
  const MixerConfig base = small_config();
  auto add = [&](const std::string& name, const std::string& kind, auto&& edit) {
    MixerConfig c = base;
    edit(c);
    out.push_back({name, kind, c});
  };
  auto none = [](MixerConfig&) {};
  add("linear_attn", "linear_attn", none);
  add("linear_attn_normalized", "linear_attn", [](MixerConfig& c) { c.normalize = true; });
  add("linear_attn_relu", "linear_attn", [](MixerConfig& c) { c.feature_map = "relu"; });
  add("linear_attn_identity", "linear_attn", [](MixerConfig& c) { c.feature_map = "identity"; });
  add("simple_gla", "simple_gla", none);
  add("simple_gla_no_conv_no_gate", "simple_gla", [](MixerConfig& c) {
    c.use_short_conv = false;
    c.use_gate = false;
  });
  add("retention", "retention", none);
  add("delta_net", "delta_net", none);
  add("delta_net_no_conv", "delta_net", [](MixerConfig& c) { c.use_short_conv = false; });
  add("gdn", "gdn", none);
  add("gdn_conv2_no_gate", "gdn", [](MixerConfig& c) {
    c.conv_size = 2;
    c.use_gate = false;
  });
  add("gdn_conv1", "gdn", [](MixerConfig& c) { c.conv_size = 1; });
  return out;
}

std::unique_ptr<Mixer> build(const Case& c, uint64_t seed = 1) {
  Generator gen(seed);
  return make_mixer(c.kind, c.config, gen);
}



// ---- the float64 re-implementation: written from the formulas with core ops -----------------







// The layer `kind` with config c (head_dim set) on x [B, T, d_model], all in float64.
Tensor reference_forward(const std::string& kind, const MixerConfig& c, ParamMap& P, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), H = c.n_heads, K = c.head_dim;
  const int64_t V = static_cast<int64_t>(K * c.expand_v);
  const bool delta = kind == "delta_net" || kind == "gdn";
  Tensor q = linear(x, P["q_proj.weight"]), k = linear(x, P["k_proj.weight"]), v = linear(x, P["v_proj.weight"]);
  if (kind != "linear_attn" && c.use_short_conv) {
    q = conv_silu(q, P["q_conv1d.weight"]);
    k = conv_silu(k, P["k_conv1d.weight"]);
    v = conv_silu(v, P["v_conv1d.weight"]);
  } else if (delta) {
    q = silu(q);
    k = silu(k);
    v = silu(v);
  }
  q = q.reshape({B, T, H, K});
  k = k.reshape({B, T, H, K});
  v = v.reshape({B, T, H, V});
  auto mamba2_g = [&] { return -(exp(P["A_log"]) * softplus(linear(x, P["a_proj.weight"]) + P["dt_bias"])); };

  Tensor o;
  if (kind == "linear_attn") {
    auto phi = [&](const Tensor& t) {
      if (c.feature_map == "elu1") return elu(t) + 1.0;
      if (c.feature_map == "relu") return relu(t);
      return t;
    };
    o = naive_linear_attn(phi(q), phi(k), v, {}, c.normalize).o;
    return linear(o.reshape({B, T, H * V}), P["o_proj.weight"]);
  }
  if (kind == "simple_gla") o = naive_simple_gla(q, k, v, mamba2_g()).o;
  if (kind == "retention") {
    std::vector<double> g(static_cast<size_t>(B * T * H));
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::log(1.0 - std::pow(2.0, -5.0 - static_cast<double>(i % H)));
    o = naive_simple_gla(q, k, v, Tensor::from_vector(g, {B, T, H})).o;
  }
  if (delta) {
    Tensor beta = sigmoid(linear(x, P["b_proj.weight"]));
    o = naive_gated_delta_rule(l2norm_ref(q), l2norm_ref(k), v, kind == "gdn" ? mamba2_g() : Tensor(), beta).o;
  }
  Tensor y = rms_norm_ref(o, P["o_norm.weight"], c.norm_eps);
  if (c.use_gate) y = y * silu(linear(x, P["g_proj.weight"])).reshape({B, T, H, V});
  return linear(y.reshape({B, T, H * V}), P["o_proj.weight"]);
}

class MixerTest : public ::testing::TestWithParam<Case> {};

TEST_P(MixerTest, OutputShapeAndFinite) {
  const Case& c = GetParam();
  auto m = build(c);
  NoGradGuard no_grad;
  for (int64_t T : {1, 16, 37}) {
    Tensor y = m->forward(random_input(2, T, c.config.d_model, 3));
    ASSERT_EQ(y.shape(), Shape({2, T, c.config.d_model}));
    for (float v : y.to_vector()) ASSERT_TRUE(std::isfinite(v));
  }
}

// Feeding the sequence to step() in pieces reproduces forward() on the whole of it: one token
// at a time (recurrent_step), and as a 20-token prompt (longer than chunk_size: chunk op with
// initial state), a 5-token piece (fused recurrent op) and then single tokens.
TEST_P(MixerTest, StepReproducesForward) {
  const Case& c = GetParam();
  auto m = build(c);
  perturb_norm_weights(*m);
  expect_steps_reproduce_forward(*m, random_input(2, 37, c.config.d_model, 4));
}

TEST_P(MixerTest, GradientsReachEveryParameter) {
  const Case& c = GetParam();
  MixerConfig config = c.config;
  config.init_std = 0.02;  // the real initialization
  config.out_init_std = 0.02 / std::sqrt(8.0);
  Generator gen(5);
  auto m = make_mixer(c.kind, config, gen);
  Tensor x = random_input(2, 21, config.d_model, 6);
  backward(sum(m->forward(x)));
  for (auto& [name, p] : m->named_parameters()) {
    Tensor g = p.grad();
    ASSERT_TRUE(g.defined()) << name;
    ASSERT_EQ(g.shape(), p.shape()) << name;
    double norm = 0;
    for (float v : g.to_vector()) {
      ASSERT_TRUE(std::isfinite(v)) << name;
      norm += static_cast<double>(v) * v;
    }
    EXPECT_GT(norm, 0.0) << name;
  }
}

// The float32 layer against the float64 re-implementation: the output, and the gradients of
// a random projection of it with respect to x and every parameter (the kernels' fused
// backward, the in-kernel L2 norm, the conv, gate and norm backwards all enter).
TEST_P(MixerTest, MatchesFloat64Reference) {
  const Case& c = GetParam();
  auto m = build(c);
  perturb_norm_weights(*m);
  expect_matches_float64_reference(*m, c.config.d_model, [&](ParamMap& P, const Tensor& x64) {
    return reference_forward(c.kind, c.config, P, x64);
  });
}

// The float64 re-implementation's gradients against central differences for the parameters
// of the gate, beta, conv and norm paths (the core ops' backwards composed as the layer does).
TEST_P(MixerTest, ReferenceMatchesFiniteDifferences) {
  const Case& c = GetParam();
  MixerConfig config = c.config;
  config.d_model = 8;
  config.head_dim = 4;  // V = 6
  Generator gen(10);
  auto m = make_mixer(c.kind, config, gen);
  perturb_norm_weights(*m);
  const std::vector<std::string> checked{"A_log",           "dt_bias",         "a_proj.weight", "b_proj.weight",
                                         "q_conv1d.weight", "v_conv1d.weight", "o_norm.weight", "g_proj.weight",
                                         "k_proj.weight"};
  std::vector<std::string> names;
  std::vector<Tensor> inputs;
  for (auto& [name, p] : m->named_parameters()) {
    names.push_back(name);
    Tensor t = p.detach().to(DType::f64);
    if (std::find(checked.begin(), checked.end(), name) != checked.end()) t.set_requires_grad(true);
    inputs.push_back(t);
  }
  Tensor x = random_input(1, 6, config.d_model, 11).to(DType::f64);
  auto f = [&](const std::vector<Tensor>& in) {
    ParamMap P;
    for (size_t i = 0; i < names.size(); ++i) P[names[i]] = in[i];
    return reference_forward(c.kind, config, P, x);
  };
  GradCheckResult r = grad_check(f, inputs);
  EXPECT_LT(r.max_rel_error, 1e-6);
}

// Packed sequences: x [2, 37] read as one row of 74 tokens cut into sequences (1-token
// ones, ones shorter than the conv, ones across chunks, and the row start 37 left out of
// cu_seqlens, which the mixer adds). The packed forward equals the mixer run on each
// sequence alone, and so do the gradients of x and of every parameter.
TEST_P(MixerTest, PackedSequencesEqualSeparateCalls) {
  const Case& c = GetParam();
  auto m = build(c);
  perturb_norm_weights(*m);
  expect_packed_matches_separate(*m, c.config.d_model);
}

INSTANTIATE_TEST_SUITE_P(Kinds, MixerTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- parameter names (flash-linear-attention's), exactly and in order ----------------------

std::vector<std::pair<std::string, Shape>> named_shapes(const Mixer& m) {
  std::vector<std::pair<std::string, Shape>> out;
  for (auto& [name, p] : m.named_parameters()) out.emplace_back(name, p.shape());
  return out;
}

TEST(MixerNames, EachKind) {
  MixerConfig c = small_config();  // d 16, H 2, K 8, V 12, conv 4
  const Shape qk{16, 16}, v{24, 16}, heads{2, 16}, h{2}, conv_qk{16, 1, 4}, conv_v{24, 1, 4}, o{16, 24};
  using Names = std::vector<std::pair<std::string, Shape>>;
  const Names qkv{{"q_proj.weight", qk}, {"k_proj.weight", qk}, {"v_proj.weight", v}};
  const Names decay{{"a_proj.weight", heads}, {"A_log", h}, {"dt_bias", h}};
  const Names convs{{"q_conv1d.weight", conv_qk}, {"k_conv1d.weight", conv_qk}, {"v_conv1d.weight", conv_v}};
  const Names out{{"g_proj.weight", v}, {"o_norm.weight", {12}}, {"o_proj.weight", o}};
  auto join = [](std::initializer_list<Names> parts) {
    Names all;
    for (const Names& p : parts) all.insert(all.end(), p.begin(), p.end());
    return all;
  };
  Generator gen(1);
  EXPECT_EQ(named_shapes(*make_mixer("linear_attn", c, gen)), join({qkv, {{"o_proj.weight", o}}}));
  EXPECT_EQ(named_shapes(*make_mixer("simple_gla", c, gen)), join({qkv, decay, convs, out}));
  EXPECT_EQ(named_shapes(*make_mixer("retention", c, gen)), join({qkv, convs, out}));
  EXPECT_EQ(named_shapes(*make_mixer("delta_net", c, gen)), join({qkv, {{"b_proj.weight", heads}}, convs, out}));
  EXPECT_EQ(named_shapes(*make_mixer("gdn", c, gen)), join({qkv, {{"b_proj.weight", heads}}, decay, convs, out}));
  EXPECT_EQ(named_shapes(*make_mixer("attn", c, gen)),
            (Names{{"q_proj.weight", {16, 16}}, {"k_proj.weight", {16, 16}}, {"v_proj.weight", {16, 16}},
                   {"o_proj.weight", {16, 16}}}));
  c.use_short_conv = false;
  c.use_gate = false;
  EXPECT_EQ(named_shapes(*make_mixer("gdn", c, gen)),
            join({qkv, {{"b_proj.weight", heads}}, decay, {{"o_norm.weight", {12}}, {"o_proj.weight", o}}}));
}

// ---- the decay ------------------------------------------------------------------------------

// g = -exp(A_log) softplus(x a_proj^T + dt_bias) <= 0 and finite for inputs of any size, and
// the RetNet decay is log(1 - 2^(-5-h)).
TEST(MixerDecay, NonPositiveForExtremeInputs) {
  MixerConfig c = small_config();
  c.n_heads = 4;
  c.head_dim = 4;
  Generator gen(12);
  SimpleGLA gla(c, gen);
  GatedDeltaNet gdn(c, gen);
  SimpleGLA retention(c, gen, true);
  Tensor x = random_input(2, 9, c.d_model, 13);
  NoGradGuard no_grad;
  for (double magnitude : {1.0, 1e2, 1e4, 1e6}) {
    for (const Tensor& g : {gla.log_decay(x * magnitude), gdn.log_decay(x * magnitude)}) {
      ASSERT_EQ(g.shape(), Shape({2, 9, 4}));
      for (float v : g.to_vector()) {
        ASSERT_TRUE(std::isfinite(v)) << magnitude;
        ASSERT_LE(v, 0.0f) << magnitude;
      }
    }
  }
  Tensor g = retention.log_decay(x);
  for (int64_t h = 0; h < 4; ++h)
    EXPECT_NEAR(g.at({1, 8, h}), std::log(1.0 - std::pow(2.0, -5.0 - h)), 1e-7) << h;
}

// Mamba-2's initialization: A = exp(A_log) in [1, 16]; dt = softplus(dt_bias) in [1e-3, 1e-1],
// log-uniformly spread.
TEST(MixerDecay, Mamba2Initialization) {
  MixerConfig c;
  c.d_model = 256;
  c.n_heads = 256;
  c.head_dim = 4;
  Generator gen(14);
  GatedDeltaNet m(c, gen);
  std::map<std::string, std::vector<float>> p;
  for (auto& [name, t] : m.named_parameters()) p[name] = t.to_vector();
  int low_dt = 0, high_dt = 0;
  for (size_t h = 0; h < 256; ++h) {
    const double A = std::exp(p["A_log"][h]);
    EXPECT_GE(A, 1.0 - 1e-5);
    EXPECT_LE(A, 16.0 + 1e-4);
    const double dt = std::log1p(std::exp(static_cast<double>(p["dt_bias"][h])));
    EXPECT_GE(dt, 1e-3 * (1 - 1e-4));
    EXPECT_LE(dt, 1e-1 * (1 + 1e-4));
    low_dt += dt < 1e-2;  // the geometric midpoint of [1e-3, 1e-1]
    high_dt += dt >= 1e-2;
  }
  EXPECT_GT(low_dt, 90);
  EXPECT_GT(high_dt, 90);
}

// ---- errors ---------------------------------------------------------------------------------

TEST(MixerErrors, UnknownKindNamesItAndTheValidOnes) {
  Generator gen(1);
  expect_error([&] { make_mixer("mamba", small_config(), gen); },
               {"make_mixer", "'mamba'", "attn", "linear_attn", "simple_gla", "retention", "delta_net", "gdn"});
}

TEST(MixerErrors, BadConfig) {
  Generator gen(1);
  MixerConfig c = small_config();
  c.feature_map = "softmax";
  expect_error([&] { make_mixer("linear_attn", c, gen); }, {"feature_map"});
  c = small_config();
  c.expand_v = 1.3;  // 8 * 1.3 is not a whole number
  expect_error([&] { make_mixer("gdn", c, gen); }, {"expand_v"});
  c = small_config();
  c.head_dim = 0;
  c.d_model = 15;  // not a multiple of n_heads 2
  expect_error([&] { make_mixer("simple_gla", c, gen); }, {"d_model"});
  c = small_config();
  c.head_dim = 512;
  expect_error([&] { make_mixer("delta_net", c, gen); }, {"head_dim"});
}

TEST(MixerErrors, StepRejectsForeignStateAndWrongShapes) {
  Generator gen(1);
  auto gdn = make_mixer("gdn", small_config(), gen);
  auto gla = make_mixer("simple_gla", small_config(), gen);
  auto attn = make_mixer("attn", small_config(), gen);
  Tensor x = random_input(2, 1, 16, 2);
  auto gla_state = gla->make_state(2);
  expect_error([&] { gdn->step(x, *gla_state); }, {"simple_gla"});
  auto attn_state = attn->make_state(2);
  expect_error([&] { gdn->step(x, *attn_state); }, {"state"});
  auto state = gdn->make_state(3);
  expect_error([&] { gdn->step(x, *state); }, {"x: expected shape [3"});
  expect_error([&] { gdn->forward(random_input(2, 4, 8, 2)); }, {"x: expected shape"});
}

}  // namespace
}  // namespace lat
