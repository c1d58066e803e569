// The softmax-attention layer's options (output_gate, qk_norm, rope_fraction, its own head
// count and head size) against a float64 reference written here in plain loops from the
// formulas (projections, per-head RMSNorm, partial RoPE, causal softmax with grouped-query
// heads, the sigmoid gate): outputs, every gradient against central finite differences of
// the reference, step() against forward(), packed sequences against separate calls, partial
// rotary_embedding, and the layer on CUDA against the CPU (skipped without a GPU).
//
// Letters: B batch, T tokens, H query heads, Hkv key/value heads, D head size, R rotated
// dims of a head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "lat/cuda.h"
#include "lat/grad_check.h"
#include "lat/lat.h"
#include "layers/attention.h"
#include "layers/fused/rope.h"
#include "tests/expect_error.h"
#include "train/run/device.h"

namespace lat {
namespace {

using testing::expect_error;

// ---- float64 reference -------------------------------------------------------------------

using ParamValues = std::map<std::string, std::vector<double>>;

struct Dims {
  int64_t d_model, H, Hkv, D, R;
  bool output_gate, qk_norm, zero_centered;
  double theta, eps;
};

Dims dims_of(const Attention& layer) {
  const AttentionConfig& c = layer.config();
  return {c.d_model,     c.attn_n_heads, c.n_kv_heads,         c.attn_head_dim, layer.rotary_dim(),
          c.output_gate, c.qk_norm,      c.norm_zero_centered, c.rope_theta,    c.norm_eps};
}

ParamValues values_of(const Module& m) {
  ParamValues P;
  for (auto& [name, p] : m.named_parameters()) P[name] = p.to(DType::f64).to_vector<double>();
  return P;
}

// y [out] = w [out, in] x [in].
std::vector<double> matvec(const std::vector<double>& w, const double* x, int64_t in) {
  const int64_t out = static_cast<int64_t>(w.size()) / in;
  std::vector<double> y(static_cast<size_t>(out), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t c = 0; c < in; ++c) y[o] += w[o * in + c] * x[c];
  return y;
}

// v [D] / rms(v) * scale, scale = weight or 1 + weight.
void rms_norm_head(double* v, int64_t D, const std::vector<double>& weight, bool zero_centered, double eps) {
  double ms = 0;
  for (int64_t i = 0; i < D; ++i) ms += v[i] * v[i];
  const double r = 1.0 / std::sqrt(ms / static_cast<double>(D) + eps);
  for (int64_t i = 0; i < D; ++i) v[i] *= r * (zero_centered ? 1.0 + weight[i] : weight[i]);
}

// Turns the pairs (v_i, v_{i+R/2}), i < R/2, by position * theta^(-2i/R); v[R:] untouched.
void rope_head(double* v, int64_t R, int64_t position, double theta) {
  const int64_t half = R / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * std::pow(theta, -2.0 * static_cast<double>(i) / R);
    const double a = v[i], b = v[i + half];
    v[i] = a * std::cos(angle) - b * std::sin(angle);
    v[i + half] = b * std::cos(angle) + a * std::sin(angle);
  }
}

// The whole layer on x [B, T, d_model] (row-major), each row a sequence from position 0.
std::vector<double> reference_layer(const Dims& d, const ParamValues& P, const std::vector<double>& x, int64_t B,
                                    int64_t T) {
  const int64_t H = d.H, Hkv = d.Hkv, D = d.D, dm = d.d_model, group = H / Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> y(static_cast<size_t>(B * T * dm));
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> q(T * H * D), g(T * H * D), k(T * Hkv * D), v(T * Hkv * D);
    for (int64_t t = 0; t < T; ++t) {
      const double* xt = x.data() + (b * T + t) * dm;
      const std::vector<double> qa = matvec(P.at("q_proj.weight"), xt, dm);
      const std::vector<double> ka = matvec(P.at("k_proj.weight"), xt, dm);
      const std::vector<double> va = matvec(P.at("v_proj.weight"), xt, dm);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D; ++i) {
          q[(t * H + h) * D + i] = qa[d.output_gate ? h * 2 * D + i : h * D + i];
          if (d.output_gate) g[(t * H + h) * D + i] = qa[h * 2 * D + D + i];
        }
      std::copy(ka.begin(), ka.end(), k.begin() + t * Hkv * D);
      std::copy(va.begin(), va.end(), v.begin() + t * Hkv * D);
      for (int64_t h = 0; h < H; ++h) {
        if (d.qk_norm) rms_norm_head(&q[(t * H + h) * D], D, P.at("q_norm.weight"), d.zero_centered, d.eps);
        rope_head(&q[(t * H + h) * D], d.R, t, d.theta);
      }
      for (int64_t h = 0; h < Hkv; ++h) {
        if (d.qk_norm) rms_norm_head(&k[(t * Hkv + h) * D], D, P.at("k_norm.weight"), d.zero_centered, d.eps);
        rope_head(&k[(t * Hkv + h) * D], d.R, t, d.theta);
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> o(H * D, 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t j = h / group;
        std::vector<double> s(t + 1);
        for (int64_t u = 0; u <= t; ++u) {
          s[u] = 0;
          for (int64_t i = 0; i < D; ++i) s[u] += q[(t * H + h) * D + i] * k[(u * Hkv + j) * D + i];
          s[u] *= scale;
        }
        const double m = *std::max_element(s.begin(), s.end());
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - m));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t i = 0; i < D; ++i) o[h * D + i] += s[u] / z * v[(u * Hkv + j) * D + i];
        if (d.output_gate)
          for (int64_t i = 0; i < D; ++i) o[h * D + i] *= 1.0 / (1.0 + std::exp(-g[(t * H + h) * D + i]));
      }
      const std::vector<double> yt = matvec(P.at("o_proj.weight"), o.data(), H * D);
      std::copy(yt.begin(), yt.end(), y.begin() + (b * T + t) * dm);
    }
  }
  return y;
}

// ---- layers under test ------------------------------------------------------------------

struct Options {
  bool output_gate = true;
  bool qk_norm = true;
  bool zero_centered = true;
  double rope_fraction = 0.5;
  int64_t n_kv_heads = 2;
  int64_t attn_head_dim = 8;
  int64_t window = 0;
};

// d_model 12 and 2 model heads (head size 6) beside 4 attention heads of attn_head_dim.
AttentionConfig options_config(const Options& o) {
  AttentionConfig c;
  c.d_model = 12;
  c.n_heads = 2;
  c.attn_n_heads = 4;
  c.attn_head_dim = o.attn_head_dim;
  c.n_kv_heads = o.n_kv_heads;
  c.output_gate = o.output_gate;
  c.qk_norm = o.qk_norm;
  c.norm_zero_centered = o.zero_centered;
  c.rope_fraction = o.rope_fraction;
  c.window_size = o.window;
  c.rope_theta = 1000.0;
  c.init_std = 0.3;  // far from GPT-2's 0.02, so the softmax is peaky and the gate far from 1/2
  c.out_init_std = 0.3;
  return c;
}

// Norm weights away from their init (scale 1), so a swapped or ignored weight shows.
void perturb_norm_weights(const Attention& layer) {
  Generator gen(77);
  for (auto& [name, p] : layer.named_parameters())
    if (name == "q_norm.weight" || name == "k_norm.weight")
      p.copy_(p + Tensor::randn(p.shape(), gen, DType::f32, 0, 0.3));
}

std::string describe(const Options& o) {
  return "output_gate " + std::to_string(o.output_gate) + " qk_norm " + std::to_string(o.qk_norm) + " zero_centered " +
         std::to_string(o.zero_centered) + " rope_fraction " + std::to_string(o.rope_fraction) + " Hkv " +
         std::to_string(o.n_kv_heads) + " D " + std::to_string(o.attn_head_dim);
}

// ---- the layer against the reference -------------------------------------------------------

TEST(AttentionOptions, ForwardMatchesFloat64Reference) {
  std::vector<Options> cases;
  const std::vector<int64_t> kv_heads{2, 1, 4};
  int n = 0;
  for (bool gate : {false, true})
    for (bool qk : {false, true})
      for (double fraction : {1.0, 0.5, 0.25}) {
        cases.push_back({.output_gate = gate,
                         .qk_norm = qk,
                         .zero_centered = n % 2 == 0,
                         .rope_fraction = fraction,
                         .n_kv_heads = kv_heads[n % 3]});
        ++n;
      }
  // An odd head size is fine when the rotated part is even: floor(5 * 0.5) = 2.
  cases.push_back({.rope_fraction = 0.5, .attn_head_dim = 5});
  for (const Options& o : cases) {
    SCOPED_TRACE(describe(o));
    Generator gen(21);
    Attention layer(options_config(o), gen);
    perturb_norm_weights(layer);
    const int64_t B = 2, T = 19;
    Tensor x = Tensor::randn({B, T, 12}, gen);
    const Tensor y = layer.forward(x);
    const std::vector<double> ref = reference_layer(dims_of(layer), values_of(layer),
                                                    x.to(DType::f64).to_vector<double>(), B, T);
    EXPECT_LT(relative_error(y, Tensor::from_vector(ref, {B, T, 12})), 1e-5);
  }
}

// The layer's (float32, tape) gradients of sum(y * w) for x and every parameter, gate rows
// of q_proj and q_norm / k_norm included, against central differences of the reference.
TEST(AttentionOptions, GradientsMatchFiniteDifferencesOfTheReference) {
  for (const Options& o : {Options{}, Options{.zero_centered = false, .rope_fraction = 0.25, .n_kv_heads = 1}}) {
    SCOPED_TRACE(describe(o));
    Generator gen(22);
    Attention layer(options_config(o), gen);
    perturb_norm_weights(layer);
    const int64_t B = 2, T = 5;
    Tensor x = Tensor::randn({B, T, 12}, gen).set_requires_grad(true);
    const Tensor w = Tensor::randn({B, T, 12}, gen);
    backward(sum(layer.forward(x) * w));

    const Dims d = dims_of(layer);
    const std::vector<double> w64 = w.to(DType::f64).to_vector<double>();
    ParamValues P = values_of(layer);
    std::vector<double> x64 = x.detach().to(DType::f64).to_vector<double>();
    auto objective = [&] {
      const std::vector<double> y = reference_layer(d, P, x64, B, T);
      double s = 0;
      for (size_t i = 0; i < y.size(); ++i) s += y[i] * w64[i];
      return s;
    };
    const double eps = 1e-5;
    auto numeric_grad = [&](std::vector<double>& values) {
      std::vector<double> g(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        const double keep = values[i];
        values[i] = keep + eps;
        const double up = objective();
        values[i] = keep - eps;
        const double down = objective();
        values[i] = keep;
        g[i] = (up - down) / (2 * eps);
      }
      return g;
    };
    EXPECT_LT(relative_error(x.grad(), Tensor::from_vector(numeric_grad(x64), x.shape())), 1e-4) << "dx";
    for (auto& [name, p] : layer.named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_LT(relative_error(p.grad(), Tensor::from_vector(numeric_grad(P[name]), p.shape())), 1e-4) << name;
    }
  }
}

TEST(AttentionOptions, ParameterNamesShapesAndInit) {
  Generator gen(23);
  Attention layer(options_config(Options{}), gen);
  const std::vector<NamedTensor> p = layer.named_parameters();
  const std::vector<std::pair<std::string, Shape>> expected{{"q_proj.weight", {64, 12}}, {"k_proj.weight", {16, 12}},
                                                            {"v_proj.weight", {16, 12}}, {"o_proj.weight", {12, 32}},
                                                            {"q_norm.weight", {8}},      {"k_norm.weight", {8}}};
  ASSERT_EQ(p.size(), expected.size());
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].first, expected[i].first);
    EXPECT_EQ(p[i].second.shape(), expected[i].second) << p[i].first;
  }
  EXPECT_EQ(layer.rotary_dim(), 4);
  // Zero-centred norms start at weight 0 (scale 1); plain ones at 1.
  EXPECT_EQ(sum(p[4].second * p[4].second).item(), 0.0);
  Attention plain(options_config({.zero_centered = false}), gen);
  EXPECT_EQ(sum(plain.named_parameters()[5].second).item(), 8.0);

  // Without the options the layout is the one older checkpoints have; the head count and
  // size fall back to the model's (d_model 12 / n_heads 2 = 6).
  AttentionConfig c = options_config({.output_gate = false, .qk_norm = false, .rope_fraction = 1.0, .n_kv_heads = 0});
  c.attn_n_heads = 0;
  c.attn_head_dim = 0;
  Attention old(c, gen);
  const std::vector<NamedTensor> q = old.named_parameters();
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[0].second.shape(), Shape({12, 12}));
  EXPECT_EQ(q[3].second.shape(), Shape({12, 12}));
  EXPECT_EQ(old.config().attn_n_heads, 2);
  EXPECT_EQ(old.config().attn_head_dim, 6);
  EXPECT_EQ(old.config().n_kv_heads, 2);
  EXPECT_EQ(old.rotary_dim(), 6);
}

// Feeds x [B, T, d] through step() in pieces of the given sizes and concatenates the outputs.
Tensor run_steps(const Attention& layer, const Tensor& x, const std::vector<int64_t>& pieces) {
  auto state = layer.make_state(x.size(0));
  std::vector<Tensor> outs;
  int64_t t = 0;
  for (int64_t n : pieces) {
    outs.push_back(layer.step(slice(x, 1, t, t + n), *state));
    t += n;
  }
  return concat(outs, 1);
}

TEST(AttentionOptions, StepMatchesForward) {
  for (const Options& o : {Options{}, Options{.qk_norm = false, .rope_fraction = 0.25, .window = 5},
                           Options{.output_gate = false, .n_kv_heads = 1, .window = 3}}) {
    SCOPED_TRACE(describe(o));
    Generator gen(24);
    Attention layer(options_config(o), gen);
    perturb_norm_weights(layer);
    const int64_t B = 2, T = 23;
    Tensor x = Tensor::randn({B, T, 12}, gen);
    const Tensor y = layer.forward(x);
    EXPECT_LT(relative_error(run_steps(layer, x, std::vector<int64_t>(T, 1)), y), 1e-5) << "token by token";
    EXPECT_LT(relative_error(run_steps(layer, x, {9, 1, 1, 6, 1, 5}), y), 1e-5) << "prefill then steps";
  }
}

// x [2, 15] as one row of 30 tokens cut into sequences (a 1-token one, one across the row
// start 15 that the layer adds): each sequence normed, rotated, gated and attended as if
// alone, forward and backward.
TEST(AttentionOptions, PackedSequencesEqualSeparateCalls) {
  for (const Options& o : {Options{.rope_fraction = 0.25}, Options{.qk_norm = false, .window = 4}}) {
    SCOPED_TRACE(describe(o));
    Generator gen(25);
    Attention layer(options_config(o), gen);
    perturb_norm_weights(layer);
    const int64_t B = 2, T = 15, dm = 12;
    const std::vector<int64_t> cuts{0, 1, 7, 15, 22, 30};
    Tensor x = Tensor::randn({B, T, dm}, gen).set_requires_grad(true);
    const Tensor w = Tensor::randn({B, T, dm}, gen);
    const Tensor packed = layer.forward(x, Tensor::from_vector(std::vector<int64_t>{0, 1, 7, 22, 30}, {5}));
    backward(sum(packed * w));
    std::vector<Tensor> packed_grads{x.grad()};
    for (auto& [name, p] : layer.named_parameters()) packed_grads.push_back(p.grad());
    layer.zero_grad();

    Tensor x1 = x.detach().set_requires_grad(true);
    const Tensor flat = x1.reshape({1, B * T, dm});
    std::vector<Tensor> parts;
    for (size_t n = 0; n + 1 < cuts.size(); ++n) parts.push_back(layer.forward(slice(flat, 1, cuts[n], cuts[n + 1])));
    const Tensor separate = concat(parts, 1).reshape({B, T, dm});
    backward(sum(separate * w));
    EXPECT_LT(relative_error(packed, separate), 1e-6);
    EXPECT_LT(relative_error(packed_grads[0], x1.grad()), 1e-6) << "dx";
    size_t i = 1;
    for (auto& [name, p] : layer.named_parameters())
      EXPECT_LT(relative_error(packed_grads[i++], p.grad()), 1e-5) << name;
  }
}

TEST(AttentionOptions, BadConfigThrows) {
  Generator gen(26);
  AttentionConfig c = options_config({.rope_fraction = 1.5});
  expect_error([&] { Attention(c, gen); }, {"Attention: rope_fraction: expected a value in (0, 1], got 1.5"});
  c = options_config({.rope_fraction = 0.0});
  expect_error([&] { Attention(c, gen); }, {"Attention: rope_fraction: expected a value in (0, 1], got 0"});
  c = options_config({.rope_fraction = 0.25, .attn_head_dim = 6});
  expect_error([&] { Attention(c, gen); },
               {"Attention: rope_fraction: rotates floor(head_dim 6 * 0.25) = 1 dims, expected an even number >= 2"});
  c = options_config({.rope_fraction = 0.5, .attn_head_dim = 6});
  expect_error([&] { Attention(c, gen); }, {"floor(head_dim 6 * 0.5) = 3 dims, expected an even number >= 2"});
  c = options_config({.rope_fraction = 1.0, .attn_head_dim = 7});
  expect_error([&] { Attention(c, gen); },
               {"Attention: head_dim: expected a positive even size (RoPE rotates pairs), got 7"});
  c = options_config({.n_kv_heads = 3});
  expect_error([&] { Attention(c, gen); }, {"Attention: n_kv_heads: expected a divisor of n_heads 4, got 3"});
  c = options_config({});
  c.attn_n_heads = -1;
  expect_error([&] { Attention(c, gen); },
               {"Attention: attn_n_heads: expected a positive count (0 = n_heads), got -1"});
  c = options_config({});
  c.norm_eps = 0;
  expect_error([&] { Attention(c, gen); }, {"Attention: norm_eps: expected a positive value (qk_norm), got 0"});
}

// ---- partial rotary_embedding ----------------------------------------------------------------

TEST(RotaryEmbeddingPartial, MatchesFloat64Reference) {
  Generator gen(27);
  const int64_t B = 2, T = 7, H = 3, D = 10, R = 4, offset = 5;
  const double theta = 300.0;
  const Tensor x = Tensor::randn({B, T, H, D}, gen, DType::f64);
  const Tensor y = rotary_embedding(x, theta, offset, {}, R);
  std::vector<double> ref = x.to_vector<double>();
  for (int64_t row = 0; row < B * T * H; ++row) rope_head(&ref[row * D], R, offset + (row / H) % T, theta);
  EXPECT_LT(relative_error(y, Tensor::from_vector(ref, x.shape())), 1e-14);
  // The tail passes through bit for bit.
  EXPECT_EQ(relative_error(slice(y, 3, R, D), slice(x, 3, R, D)), 0.0);
  EXPECT_LT(relative_error(rotary_embedding(x.to(DType::f32), theta, offset, {}, R), y), 1e-6);
  // rotary_dim = D is the default, and an odd D is fine when the rotated part is even.
  EXPECT_EQ(relative_error(rotary_embedding(x, theta, offset, {}, D), rotary_embedding(x, theta, offset)), 0.0);
  const Tensor odd = Tensor::randn({1, 4, 2, 5}, gen, DType::f64);
  std::vector<double> odd_ref = odd.to_vector<double>();
  for (int64_t row = 0; row < 8; ++row) rope_head(&odd_ref[row * 5], 2, row / 2, theta);
  EXPECT_LT(relative_error(rotary_embedding(odd, theta, 0, {}, 2), Tensor::from_vector(odd_ref, odd.shape())), 1e-14);
}

TEST(RotaryEmbeddingPartial, GradCheckPackedAndErrors) {
  Generator gen(28);
  const Tensor cu = Tensor::from_vector(std::vector<int64_t>{0, 2, 3, 6}, {4});
  GradCheckResult r = grad_check(
      [&](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 100.0, 2, cu, 2); },
      {Tensor::randn({1, 6, 2, 6}, gen, DType::f64).set_requires_grad(true)});
  EXPECT_LT(r.max_rel_error, 1e-8);
  // Packed: each sequence rotates from position_offset, as alone.
  const Tensor x = Tensor::randn({1, 6, 2, 6}, gen, DType::f64);
  const Tensor packed = rotary_embedding(x, 100.0, 2, cu, 4);
  const std::vector<int64_t> starts{0, 2, 3, 6};
  for (size_t n = 0; n + 1 < starts.size(); ++n)
    EXPECT_EQ(relative_error(slice(packed, 1, starts[n], starts[n + 1]),
                             rotary_embedding(slice(x, 1, starts[n], starts[n + 1]), 100.0, 2, {}, 4)),
              0.0);
  const Tensor z = Tensor::zeros({1, 2, 2, 10});
  expect_error([&] { rotary_embedding(z, 1e4, 0, {}, 3); },
               {"rotary_embedding: rotary_dim: expected an even size in [2, D = 10], got 3"});
  expect_error([&] { rotary_embedding(z, 1e4, 0, {}, 12); },
               {"rotary_embedding: rotary_dim: expected an even size in [2, D = 10], got 12"});
  expect_error([&] { rotary_embedding(z, 1e4, 0, {}, 0); },
               {"rotary_embedding: rotary_dim: expected an even size in [2, D = 10], got 0"});
}

// ---- CUDA against the CPU ----------------------------------------------------------------------

#define LAT_REQUIRE_CUDA()                                                                                     \
  do {                                                                                                         \
    if (cuda_device_count() == 0)                                                                              \
      GTEST_SKIP() << (cuda_built() ? "no CUDA device visible" : "lat was built without CUDA (LAT_CUDA=OFF)"); \
  } while (0)

TEST(AttentionOptionsCuda, PartialRotaryMatchesCpu) {
  LAT_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  Generator gen(29);
  const Tensor cu = Tensor::from_vector(std::vector<int64_t>{0, 3, 4, 9}, {4});
  for (int64_t R : {2, 4, 10}) {
    SCOPED_TRACE(R);
    const Tensor x = Tensor::randn({1, 9, 3, 10}, gen), w = Tensor::randn({1, 9, 3, 10}, gen);
    auto run_on = [&](Device device) {
      Tensor leaf = x.to(device).detach().set_requires_grad(true);
      Tensor y = rotary_embedding(leaf, 500.0, 3, cu, R);
      backward(sum(y * w.to(device)));
      return std::vector<Tensor>{y.detach().to(Device::cpu()), leaf.grad().to(Device::cpu())};
    };
    const std::vector<Tensor> cpu = run_on(Device::cpu()), on_gpu = run_on(gpu);
    EXPECT_LT(relative_error(on_gpu[0], cpu[0]), 1e-6) << "y";
    EXPECT_LT(relative_error(on_gpu[1], cpu[1]), 1e-6) << "dx";
    // The passed-through tail and its gradient are copies, exact on both devices.
    EXPECT_EQ(relative_error(slice(on_gpu[0], 3, R, 10), slice(x, 3, R, 10)), 0.0);
    EXPECT_EQ(relative_error(slice(on_gpu[1], 3, R, 10), slice(w, 3, R, 10)), 0.0);
  }
}

// The whole layer with its options on the GPU, batched and packed: output, dx and every
// parameter gradient as on the CPU.
TEST(AttentionOptionsCuda, LayerMatchesCpu) {
  LAT_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  for (const Options& o : {Options{}, Options{.output_gate = false, .zero_centered = false, .rope_fraction = 0.25}}) {
    for (bool packed : {false, true}) {
      SCOPED_TRACE(describe(o) + (packed ? " packed" : ""));
      Generator gen_cpu(30), gen_gpu(30), gen(31);
      Attention cpu_layer(options_config(o), gen_cpu), gpu_layer(options_config(o), gen_gpu);
      perturb_norm_weights(cpu_layer);
      perturb_norm_weights(gpu_layer);
      move_parameters(gpu_layer, gpu);
      const int64_t B = 2, T = 11;
      const Tensor x = Tensor::randn({B, T, 12}, gen), w = Tensor::randn({B, T, 12}, gen);
      const Tensor cu = packed ? Tensor::from_vector(std::vector<int64_t>{0, 1, 5, 16, 22}, {5}) : Tensor();
      Tensor x_cpu = x.detach().set_requires_grad(true), x_gpu = x.to(gpu).detach().set_requires_grad(true);
      const Tensor y_cpu = cpu_layer.forward(x_cpu, cu);
      backward(sum(y_cpu * w));
      const Tensor y_gpu = gpu_layer.forward(x_gpu, cu);
      backward(sum(y_gpu * w.to(gpu)));
      EXPECT_LT(relative_error(y_gpu.detach().to(Device::cpu()), y_cpu.detach()), 1e-5) << "y";
      EXPECT_LT(relative_error(x_gpu.grad().to(Device::cpu()), x_cpu.grad()), 1e-4) << "dx";
      const auto cpu_params = cpu_layer.named_parameters(), gpu_params = gpu_layer.named_parameters();
      for (size_t i = 0; i < cpu_params.size(); ++i)
        EXPECT_LT(relative_error(gpu_params[i].second.grad().to(Device::cpu()), cpu_params[i].second.grad()), 1e-4)
            << cpu_params[i].first;
    }
  }
}

}  // namespace
}  // namespace lat
