// Grouped value heads of gdn and delta_net (MixerConfig.n_v_heads = Hv, a multiple of the key
// heads H; Qwen3.5's linear_num_value_heads): parameter shapes, the float32 layer against a
// float64 re-implementation that repeats q and k explicitly (torch.repeat_interleave) before
// the naive delta rule, that re-implementation against finite differences, step() against
// forward(), packed sequences against separate calls, errors, the default (Hv = H) unchanged,
// the GPU against the CPU. Then the model-level options: zero-centred norms
// (norm_zero_centered) against plain norms holding 1 + w, intermediate_size as the SwiGLU
// width, and both through model_from_weights' size checks.
//
// Letters: B batch, T tokens, H key heads, Hv value heads, G = Hv / H, K key head dim, V value
// head dim.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "lat/lat.h"
#include "layers/hybrid_lm.h"
#include "layers/linear_attention_layers.h"
#include "layers/swiglu.h"
#include "tests/expect_error.h"
#include "tests/mixer_reference.h"
#include "train/config/config.h"
#include "train/config/model_config.h"
#include "train/files/model_reader.h"
#include "train/files/trained_model.h"
#include "train/run/device.h"

namespace lat {
namespace {

using testing::expect_error;
using testing::conv_silu;
using testing::expect_matches_float64_reference;
using testing::expect_packed_matches_separate;
using testing::expect_steps_reproduce_forward;
using testing::ParamMap;
using testing::f64_leaf;
using testing::l2norm_ref;
using testing::linear;
using testing::perturb_norm_weights;
using testing::random_input;
using testing::rms_norm_ref;

#define LAT_REQUIRE_CUDA()                                                                                     \
  do {                                                                                                         \
    if (cuda_device_count() == 0)                                                                              \
      GTEST_SKIP() << (cuda_built() ? "no CUDA device visible" : "lat was built without CUDA (LAT_CUDA=OFF)"); \
  } while (0)

// d_model 16, H = 2 key heads of K = 8, V = 12 (K != V), a chunk size of 16 so T = 37 spans
// three partial chunks; init stds above the default so gates and activations leave their
// linear regimes.
MixerConfig gva_config(int64_t n_v_heads) {
  MixerConfig c;
  c.d_model = 16;
  c.n_heads = 2;
  c.head_dim = 8;
  c.expand_v = 1.5;
  c.n_v_heads = n_v_heads;
  c.conv_size = 4;
  c.chunk_size = 16;
  c.init_std = 0.3;
  c.out_init_std = 0.2;
  return c;
}

struct Case {
  std::string name;
  std::string kind;
  MixerConfig config;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string kind : {"gdn", "delta_net"})
    for (int64_t G : {2, 4}) out.push_back({kind + "_G" + std::to_string(G), kind, gva_config(2 * G)});
  MixerConfig plain = gva_config(4);
  plain.use_short_conv = false;  // the SiLU path instead of the convolutions
  plain.use_gate = false;
  out.push_back({"gdn_G2_no_conv_no_gate", "gdn", plain});
  return out;
}



// ---- the float64 re-implementation ----------------------------------------------------------







// torch.repeat_interleave(t, G, dim=2) for t [B, T, H, K]: head j becomes heads j*G .. j*G+G-1.
Tensor repeat_interleave_heads(const Tensor& t, int64_t G) {
  std::vector<Tensor> heads;
  for (int64_t j = 0; j < t.size(2); ++j)
    for (int64_t r = 0; r < G; ++r) heads.push_back(slice(t, 2, j, j + 1));
  return concat(heads, 2);
}

// The gdn / delta_net layer with Hv value heads on x [B, T, d_model], all in float64, written
// from the formulas as transformers' Qwen3_5GatedDeltaNet computes them.
Tensor reference_forward(const std::string& kind, const MixerConfig& c, ParamMap& P, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), H = c.n_heads, Hv = c.n_v_heads, K = c.head_dim;
  const int64_t V = static_cast<int64_t>(K * c.expand_v);
  Tensor q = linear(x, P["q_proj.weight"]), k = linear(x, P["k_proj.weight"]), v = linear(x, P["v_proj.weight"]);
  if (c.use_short_conv) {
    q = conv_silu(q, P["q_conv1d.weight"]);
    k = conv_silu(k, P["k_conv1d.weight"]);
    v = conv_silu(v, P["v_conv1d.weight"]);
  } else {
    q = silu(q);
    k = silu(k);
    v = silu(v);
  }
  q = repeat_interleave_heads(l2norm_ref(q.reshape({B, T, H, K})), Hv / H);
  k = repeat_interleave_heads(l2norm_ref(k.reshape({B, T, H, K})), Hv / H);
  v = v.reshape({B, T, Hv, V});
  Tensor beta = sigmoid(linear(x, P["b_proj.weight"]));
  Tensor g = kind == "gdn" ? -(exp(P["A_log"]) * softplus(linear(x, P["a_proj.weight"]) + P["dt_bias"])) : Tensor();
  Tensor o = naive_gated_delta_rule(q, k, v, g, beta).o;
  Tensor y = rms_norm_ref(o, P["o_norm.weight"], c.norm_eps);
  if (c.use_gate) y = y * silu(linear(x, P["g_proj.weight"])).reshape({B, T, Hv, V});
  return linear(y.reshape({B, T, Hv * V}), P["o_proj.weight"]);
}

class GvaTest : public ::testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<Mixer> build(uint64_t seed = 1) const {
    Generator gen(seed);
    return make_mixer(GetParam().kind, GetParam().config, gen);
  }
};

// Key projections and convolutions keep H heads; everything of the values has Hv; so does the
// generation state.
TEST_P(GvaTest, ParameterAndStateShapes) {
  const Case& c = GetParam();
  auto m = build();
  const int64_t Hv = c.config.n_v_heads, HK = 16, HvV = Hv * 12;
  std::map<std::string, Shape> shapes;
  for (auto& [name, p] : m->named_parameters()) shapes[name] = p.shape();
  EXPECT_EQ(shapes["q_proj.weight"], Shape({HK, 16}));
  EXPECT_EQ(shapes["k_proj.weight"], Shape({HK, 16}));
  EXPECT_EQ(shapes["v_proj.weight"], Shape({HvV, 16}));
  EXPECT_EQ(shapes["b_proj.weight"], Shape({Hv, 16}));
  EXPECT_EQ(shapes["o_norm.weight"], Shape({12}));
  EXPECT_EQ(shapes["o_proj.weight"], Shape({16, HvV}));
  if (c.kind == "gdn") {
    EXPECT_EQ(shapes["a_proj.weight"], Shape({Hv, 16}));
    EXPECT_EQ(shapes["A_log"], Shape({Hv}));
    EXPECT_EQ(shapes["dt_bias"], Shape({Hv}));
  }
  if (c.config.use_short_conv) {
    EXPECT_EQ(shapes["q_conv1d.weight"], Shape({HK, 1, 4}));
    EXPECT_EQ(shapes["k_conv1d.weight"], Shape({HK, 1, 4}));
    EXPECT_EQ(shapes["v_conv1d.weight"], Shape({HvV, 1, 4}));
  }
  if (c.config.use_gate) {
    EXPECT_EQ(shapes["g_proj.weight"], Shape({HvV, 16}));
  }
  auto state = m->make_state(3);
  const auto& s = dynamic_cast<const LinearMixerState&>(*state);
  EXPECT_EQ(s.recurrent_state.shape(), Shape({3, Hv, 8, 12}));
  if (c.config.use_short_conv) {
    EXPECT_EQ(s.q_conv.shape(), Shape({3, 3, HK}));
    EXPECT_EQ(s.k_conv.shape(), Shape({3, 3, HK}));
    EXPECT_EQ(s.v_conv.shape(), Shape({3, 3, HvV}));
  }
}

// The float32 layer against the float64 re-implementation: the output and the gradients of a
// random projection of it with respect to x and every parameter (so the repeat's backward,
// which sums each group of value heads into its key head, is held to the explicit repeat's).
TEST_P(GvaTest, MatchesFloat64Reference) {
  const Case& c = GetParam();
  auto m = build();
  perturb_norm_weights(*m);
  expect_matches_float64_reference(*m, c.config.d_model, [&](ParamMap& P, const Tensor& x64) {
    return reference_forward(c.kind, c.config, P, x64);
  });
}

// The float64 re-implementation against central differences through the q, k and v
// projections, beta and the decay, at small sizes (K = 4, V = 6).
TEST_P(GvaTest, ReferenceMatchesFiniteDifferences) {
  const Case& c = GetParam();
  MixerConfig config = c.config;
  config.d_model = 8;
  config.head_dim = 4;
  Generator gen(10);
  auto m = make_mixer(c.kind, config, gen);
  const std::vector<std::string> checked{"q_proj.weight", "k_proj.weight", "v_proj.weight", "a_proj.weight",
                                         "b_proj.weight", "A_log",         "dt_bias"};
  std::vector<std::string> names;
  std::vector<Tensor> inputs;
  size_t n_checked = 0;
  for (auto& [name, p] : m->named_parameters()) {
    names.push_back(name);
    Tensor t = p.detach().to(DType::f64);
    if (std::find(checked.begin(), checked.end(), name) != checked.end()) {
      t.set_requires_grad(true);
      ++n_checked;
    }
    inputs.push_back(t);
  }
  ASSERT_EQ(n_checked, c.kind == "gdn" ? 7u : 4u);
  Tensor x = random_input(1, 6, config.d_model, 11).to(DType::f64);
  auto f = [&](const std::vector<Tensor>& in) {
    ParamMap P;
    for (size_t i = 0; i < names.size(); ++i) P[names[i]] = in[i];
    return reference_forward(c.kind, config, P, x);
  };
  GradCheckResult r = grad_check(f, inputs);
  EXPECT_LT(r.max_rel_error, 1e-6);
}

// step() fed one token at a time (recurrent_step), and as a 20-token prompt (chunk op with an
// initial state), a 5-token piece (fused recurrent op) and single tokens, reproduces forward().
TEST_P(GvaTest, StepReproducesForward) {
  const Case& c = GetParam();
  auto m = build();
  perturb_norm_weights(*m);
  expect_steps_reproduce_forward(*m, random_input(2, 37, c.config.d_model, 4));
}

// x [2, 37] read as one row of 74 tokens cut into sequences (1-token ones, ones shorter than
// the conv, ones across chunks, the row start 37 implied): output and every gradient equal
// the layer run on each sequence alone.
TEST_P(GvaTest, PackedSequencesEqualSeparateCalls) {
  const Case& c = GetParam();
  auto m = build();
  perturb_norm_weights(*m);
  expect_packed_matches_separate(*m, c.config.d_model);
}

// The same layer on the GPU: output, dx and every parameter gradient as on the CPU, and step().
TEST_P(GvaTest, CudaMatchesCpu) {
  LAT_REQUIRE_CUDA();
  const Case& c = GetParam();
  const Device gpu = Device::cuda(0);
  auto cpu_layer = build(), gpu_layer = build();
  move_parameters(*gpu_layer, gpu);
  const int64_t B = 2, T = 37, D = c.config.d_model;
  Tensor x = random_input(B, T, D, 14);
  Generator gen(15);
  Tensor w = Tensor::randn({B, T, D}, gen);
  Tensor x_cpu = x.clone().set_requires_grad(true), x_gpu = x.to(gpu).set_requires_grad(true);
  // One backward per tape: it walks the nodes recorded so far, then clears them.
  Tensor y_cpu = cpu_layer->forward(x_cpu);
  backward(sum(y_cpu * w));
  Tensor y_gpu = gpu_layer->forward(x_gpu);
  backward(sum(y_gpu * w.to(gpu)));
  EXPECT_LT(relative_error(y_gpu.detach().to(Device::cpu()), y_cpu.detach()), 1e-5) << "output";
  EXPECT_LT(relative_error(x_gpu.grad().to(Device::cpu()), x_cpu.grad()), 1e-4) << "dx";
  const auto cpu_params = cpu_layer->named_parameters(), gpu_params = gpu_layer->named_parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i)
    EXPECT_LT(relative_error(gpu_params[i].second.grad().to(Device::cpu()), cpu_params[i].second.grad()), 1e-4)
        << cpu_params[i].first;

  // Generation on the GPU: the chunk prompt (with the conv-state prefill) and recurrent steps.
  NoGradGuard no_grad;
  auto state = gpu_layer->make_state(B);
  std::vector<Tensor> outputs{gpu_layer->step(slice(x, 1, 0, 20).to(gpu), *state)};
  for (int64_t t = 20; t < T; ++t) outputs.push_back(gpu_layer->step(slice(x, 1, t, t + 1).to(gpu), *state));
  EXPECT_LT(relative_error(concat(outputs, 1).to(Device::cpu()), y_cpu.detach()), 1e-5) << "step";
}

INSTANTIATE_TEST_SUITE_P(Kinds, GvaTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// n_v_heads = 0 and n_v_heads = n_heads build the layer of before: the same parameters (names,
// order, values from one seed) and the same output.
TEST(GvaHeads, DefaultIsTheSharedHeadLayer) {
  for (const std::string kind : {"gdn", "delta_net"}) {
    Generator gen0(5), gen1(5);
    auto unset = make_mixer(kind, gva_config(0), gen0), equal = make_mixer(kind, gva_config(2), gen1);
    const auto a = unset->named_parameters(), b = equal->named_parameters();
    ASSERT_EQ(a.size(), b.size()) << kind;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first) << kind;
      EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << kind << " " << a[i].first;
    }
    EXPECT_EQ(dynamic_cast<const LinearMixer&>(*unset).value_heads(), 2) << kind;
    NoGradGuard no_grad;
    Tensor x = random_input(2, 9, 16, 6);
    EXPECT_EQ(unset->forward(x).to_vector(), equal->forward(x).to_vector()) << kind;
  }
}

TEST(GvaHeads, Errors) {
  Generator gen(1);
  for (const std::string kind : {"linear_attn", "simple_gla", "retention"})
    expect_error([&] { make_mixer(kind, gva_config(4), gen); },
                 {"LinearMixer(" + kind +
                  "): n_v_heads: expected n_heads 2 (value heads apart from key heads exist in "
                  "gdn and delta_net only), got 4"});
  expect_error([&] { make_mixer("gdn", gva_config(3), gen); },
               {"LinearMixer(gdn): n_v_heads: expected a positive multiple of n_heads 2, got 3"});
  expect_error([&] { make_mixer("delta_net", gva_config(-2), gen); },
               {"LinearMixer(delta_net): n_v_heads: expected a positive multiple of n_heads 2, got -2"});
}

// ---- model level ------------------------------------------------------------------------------

HybridLMConfig model_config() {
  HybridLMConfig c;
  c.vocab_size = 11;
  c.layers = {"gdn", "attn", "delta_net"};
  c.mixer.d_model = 16;
  c.mixer.n_heads = 2;
  c.mixer.n_v_heads = 4;
  c.mixer.chunk_size = 4;
  c.init_std = 0.2;
  return c;
}

Tensor random_ids(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> ids(static_cast<size_t>(B * T));
  for (int64_t& id : ids) id = gen.randint(vocab);
  return Tensor::from_vector(ids, {B, T});
}

bool is_block_or_final_norm(const std::string& name) {
  return name == "norm.weight" || name.ends_with(".attn_norm.weight") || name.ends_with(".mlp_norm.weight");
}

// Zero-centred norms scale by 1 + w: a model with them equals, bit for bit, the plain-norm model
// (same seed, so every other weight is equal) whose norm weights hold 1 + w; so do the norm
// weights' gradients. The mixers' o_norm stays plain (ones at initialization in both).
TEST(ZeroCenteredNorms, EqualPlainNormsHoldingOnePlusWeight) {
  HybridLMConfig zc = model_config(), plain = model_config();
  zc.norm_zero_centered = true;
  Generator gen_zc(3), gen_plain(3);
  HybridLM zc_model(zc, gen_zc), plain_model(plain, gen_plain);
  EXPECT_TRUE(zc_model.config().mixer.norm_zero_centered);
  auto zc_params = zc_model.named_parameters(), plain_params = plain_model.named_parameters();
  ASSERT_EQ(zc_params.size(), plain_params.size());
  Generator gen(4);
  size_t norms = 0;
  for (size_t i = 0; i < zc_params.size(); ++i) {
    auto& [name, p] = zc_params[i];
    ASSERT_EQ(name, plain_params[i].first);
    if (name.ends_with("o_norm.weight")) {
      for (float v : p.to_vector()) ASSERT_EQ(v, 1.0f) << name;
    } else if (is_block_or_final_norm(name)) {
      ++norms;
      for (float v : p.to_vector()) ASSERT_EQ(v, 0.0f) << name;
      p.copy_(Tensor::randn(p.shape(), gen, DType::f32, 0, 0.3));
      plain_params[i].second.copy_(p.detach() + 1.0);
    } else {
      ASSERT_EQ(p.to_vector(), plain_params[i].second.to_vector()) << name;
    }
  }
  EXPECT_EQ(norms, 7u);  // attn_norm and mlp_norm of 3 layers, norm
  const Tensor ids = random_ids(2, 9, zc.vocab_size, 5);
  Tensor a = zc_model.forward(ids);
  backward(sum(a * a));
  Tensor b = plain_model.forward(ids);
  backward(sum(b * b));
  EXPECT_EQ(a.to_vector(), b.to_vector());
  for (size_t i = 0; i < zc_params.size(); ++i)
    EXPECT_EQ(zc_params[i].second.grad().to_vector(), plain_params[i].second.grad().to_vector()) << zc_params[i].first;
}

// intermediate_size sets the SwiGLU width of every layer; 0 keeps the one of mlp_ratio.
TEST(IntermediateSize, SetsTheMlpWidth) {
  for (int64_t width : {int64_t{40}, int64_t{0}}) {
    HybridLMConfig c = model_config();
    c.intermediate_size = width;
    Generator gen(6);
    HybridLM model(c, gen);
    const int64_t F = width > 0 ? width : swiglu_hidden_size(16, c.mlp_ratio);
    int64_t mlps = 0;
    for (const auto& [name, p] : model.named_parameters()) {
      if (name.ends_with("mlp.gate_proj.weight") || name.ends_with("mlp.up_proj.weight")) {
        EXPECT_EQ(p.shape(), Shape({F, 16})) << name;
        ++mlps;
      }
      if (name.ends_with("mlp.down_proj.weight")) {
        EXPECT_EQ(p.shape(), Shape({16, F})) << name;
      }
    }
    EXPECT_EQ(mlps, 6);
    NoGradGuard no_grad;
    EXPECT_EQ(model.forward(random_ids(1, 5, c.vocab_size, 7)).shape(), Shape({1, 5, c.vocab_size}));
  }
  EXPECT_EQ(swiglu_hidden_size(16, 4.0, 40), 40);
  EXPECT_EQ(swiglu_hidden_size(16, 4.0, 0), swiglu_hidden_size(16, 4.0));
  expect_error([] { swiglu_hidden_size(16, 4.0, -1); },
               {"swiglu_hidden_size: intermediate_size: expected >= 0 (0 = from mlp_ratio), got -1"});
}

// A model with grouped value heads generates as it trains: step() in pieces equals forward().
TEST(GvaModel, StepReproducesForward) {
  const HybridLMConfig c = model_config();
  Generator gen(8);
  HybridLM model(c, gen);
  const Tensor ids = random_ids(2, 11, c.vocab_size, 9);
  NoGradGuard no_grad;
  const Tensor expected = model.forward(ids);
  HybridLMState state = model.make_states(2);
  std::vector<Tensor> logits{model.step(slice(ids, 1, 0, 6), state)};
  for (int64_t t = 6; t < 11; ++t) logits.push_back(model.step(slice(ids, 1, t, t + 1), state));
  EXPECT_LT(relative_error(concat(logits, 1), expected), 1e-5);
}

// model_from_weights compares o_proj's columns with n_v_heads x V for gdn and delta_net, and
// the MLP's rows with intermediate_size when it is set.
TEST(GvaModel, ModelFromWeightsChecksValueHeadsAndIntermediateSize) {
  const std::string yaml =
      "model: {d_model: 16, n_layers: 3, n_heads: 2, layers: \"gdn,attn,delta_net\", intermediate_size: 40,\n"
      "        norm_zero_centered: true, linear: {n_v_heads: 4}}\n"
      "data: {path: x.txt}\n";
  ModelWeights w{.path = "gva.h5", .config = parse_config(yaml, "gva.yaml"), .checkpoint = {}};
  Generator gen(3);
  HybridLM source(hybrid_lm_config(w.config.model, 13), gen);
  for (const auto& [name, t] : source.named_parameters()) w.checkpoint.model.emplace_back(name, t.detach().clone());
  std::unique_ptr<HybridLM> loaded = model_from_weights(w);
  const auto a = source.named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;

  ModelWeights shared_heads = w;
  shared_heads.config.model.linear.n_v_heads = 2;
  expect_error([&] { model_from_weights(shared_heads); },
               {"model_from_weights: 'gva.h5': model.n_heads 2 x value head dim 8 (model.head_dim x model.expand_v, "
                "gdn layer) does not match tensor 'layers.0.attn.o_proj.weight' [16, 32]: expected 16 columns, found "
                "32"});
  ModelWeights more_heads = w;
  more_heads.config.model.linear.n_v_heads = 8;
  expect_error([&] { model_from_weights(more_heads); },
               {"model.linear.n_v_heads 8 x value head dim 8 (model.head_dim x model.expand_v, gdn layer) does not "
                "match tensor 'layers.0.attn.o_proj.weight' [16, 32]: expected 64 columns, found 32"});
  ModelWeights wider = w;
  wider.config.model.intermediate_size = 48;
  expect_error([&] { model_from_weights(wider); },
               {"model.intermediate_size 48 does not match tensor 'layers.0.mlp.gate_proj.weight' [40, 16]: expected "
                "48 rows (the SwiGLU hidden width), found 40"});
}

}  // namespace
}  // namespace lat
