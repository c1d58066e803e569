// Layers of layers/: Module naming, Linear, Embedding, RMSNorm, SwiGLU, RoPE and the short
// convolution, against float64 references written out here, finite differences
// (lat::grad_check) and known answers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lat/lat.h"
#include "layers/embedding.h"
#include "layers/fused/rope.h"
#include "layers/fused/short_conv.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/rms_norm.h"
#include "layers/swiglu.h"
#include "tests/expect_error.h"

namespace lat {
namespace {

using testing::expect_error;

// A float64 copy of t (a new leaf), requiring grad when asked.
Tensor f64(const Tensor& t, bool requires_grad = false) {
  Tensor c = t.detach().to(DType::f64);
  if (requires_grad) c.set_requires_grad(true);
  return c;
}

// ---- Module -------------------------------------------------------------------------------

class Leaf : public Module {
 public:
  explicit Leaf(Generator& gen) {
    register_parameter("weight", Tensor::randn({3, 2}, gen));
    register_parameter("bias", Tensor::zeros({3}));
  }
};

class Block : public Module {
 public:
  explicit Block(Generator& gen) {
    register_parameter("scale", Tensor::ones({2}));
    register_module("attn", std::make_unique<Leaf>(gen));
    register_parameter("gain", Tensor::ones({1}));
    register_module("mlp", std::make_unique<Leaf>(gen));
  }
};

class Model : public Module {
 public:
  explicit Model(Generator& gen) {
    register_module("embeddings", std::make_unique<Leaf>(gen));
    auto& layers = register_module("layers", std::make_unique<ModuleList>());
    for (int i = 0; i < 2; ++i) layers.append(std::make_unique<Block>(gen));
    register_parameter("norm", Tensor::ones({2}));
  }
  using Module::register_parameter;
};

TEST(Module, NamedParametersInRegistrationOrder) {
  Generator gen(1);
  Model model(gen);
  std::vector<std::string> names;
  for (auto& [name, t] : model.named_parameters()) names.push_back(name);
  std::vector<std::string> expected = {"embeddings.weight", "embeddings.bias"};
  for (std::string i : {"0", "1"})
    for (std::string n : {"scale", "attn.weight", "attn.bias", "gain", "mlp.weight", "mlp.bias"})
      expected.push_back("layers." + i + "." + n);
  expected.push_back("norm");
  EXPECT_EQ(names, expected);
  EXPECT_EQ(model.parameters().size(), expected.size());
  EXPECT_EQ(model.num_parameters(), 9 + 2 * (2 + 9 + 1 + 9) + 2);
  for (const Tensor& t : model.parameters()) {
    EXPECT_TRUE(t.requires_grad());
    EXPECT_TRUE(t.is_leaf());
    EXPECT_EQ(t.dtype(), DType::f32);
  }
}

TEST(Module, HandlesShareTheParameters) {
  // Writing into a handle from named_parameters() changes the module (checkpoint loading).
  Generator gen(2);
  Model model(gen);
  model.named_parameters()[0].second.fill_(0.5);
  EXPECT_EQ(model.named_parameters()[0].second.at({1, 1}), 0.5);
}

TEST(Module, ZeroGradDropsGradients) {
  Generator gen(3);
  Model model(gen);
  std::vector<Tensor> params = model.parameters();
  backward(sum(params[0] * 2.0) + sum(params.back()));
  EXPECT_TRUE(params[0].grad().defined());
  EXPECT_EQ(params[0].grad().at({0, 0}), 2.0);
  model.zero_grad();
  for (const Tensor& t : model.parameters()) EXPECT_FALSE(t.grad().defined());
}

TEST(Module, BadRegistrationsThrow) {
  Generator gen(4);
  Model model(gen);
  expect_error([&] { model.register_parameter("norm", Tensor::ones({2})); },
               {"Module::register: name: 'norm' is already registered"});  // taken
  expect_error([&] { model.register_parameter("a.b", Tensor::ones({2})); },
               {"Module::register: name: expected no '.' (dots join the levels), got 'a.b'"});  // dotted
  expect_error([&] { model.register_parameter("", Tensor::ones({2})); },
               {"Module::register: name: expected a non-empty name"});  // empty
  expect_error([&] { model.register_parameter("w", Tensor::ones({2}, DType::f64)); },
               {"Module::register_parameter: w: expected f32, got f64"});  // not f32
  expect_error([&] { model.register_parameter("u", Tensor()); },
               {"Module::register_parameter: u: undefined tensor"});  // undefined
}

// ---- Linear -----------------------------------------------------------------------------

TEST(Linear, ForwardAndGradientsMatchFloat64) {
  Generator gen(5);
  for (bool bias : {false, true}) {
    Linear lin(5, 3, gen, 0.5, bias);
    if (bias) lin.bias().detach().copy_(Tensor::randn({3}, gen));
    Tensor x = Tensor::randn({2, 4, 5}, gen).set_requires_grad(true);
    Tensor w = Tensor::randn({2, 4, 3}, gen);
    Tensor y = lin.forward(x);
    ASSERT_EQ(y.shape(), Shape({2, 4, 3}));
    backward(sum(y * w));
    // Float64 reference by loops: y = x W^T + b, dx = dy W, dW = dy^T x, db = sum dy.
    std::vector<double> xv = x.to_vector<double>(), wv = lin.weight().to_vector<double>(),
                        gv = w.to_vector<double>();
    std::vector<double> bv = bias ? lin.bias().to_vector<double>() : std::vector<double>(3, 0.0);
    std::vector<double> y_ref(24), dx_ref(40, 0.0), dw_ref(15, 0.0), db_ref(3, 0.0);
    for (int r = 0; r < 8; ++r)
      for (int o = 0; o < 3; ++o) {
        double s = bv[o];
        for (int i = 0; i < 5; ++i) {
          s += xv[r * 5 + i] * wv[o * 5 + i];
          dx_ref[r * 5 + i] += gv[r * 3 + o] * wv[o * 5 + i];
          dw_ref[o * 5 + i] += gv[r * 3 + o] * xv[r * 5 + i];
        }
        y_ref[r * 3 + o] = s;
        db_ref[o] += gv[r * 3 + o];
      }
    EXPECT_LT(relative_error(y, Tensor::from_vector(y_ref, {2, 4, 3})), 1e-6);
    EXPECT_LT(relative_error(x.grad(), Tensor::from_vector(dx_ref, {2, 4, 5})), 1e-6);
    EXPECT_LT(relative_error(lin.weight().grad(), Tensor::from_vector(dw_ref, {3, 5})), 1e-6);
    if (bias) {
      EXPECT_LT(relative_error(lin.bias().grad(), Tensor::from_vector(db_ref, {3})), 1e-6);
    }
  }
}

TEST(Linear, NamesShapesAndInit) {
  Generator gen(6);
  Linear lin(64, 128, gen, 0.02, true);
  auto params = lin.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[0].second.shape(), Shape({128, 64}));
  EXPECT_EQ(params[1].first, "bias");
  std::vector<float> w = lin.weight().to_vector();
  double sq = 0;
  for (float v : w) sq += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(sq / w.size()), 0.02, 0.001);  // 8192 draws of N(0, 0.02^2)
  EXPECT_EQ(Linear(4, 4, gen).named_parameters().size(), 1u);  // no bias by default
  expect_error([&] { lin.forward(Tensor::zeros({2, 63})); },
               {"Linear::forward: x: expected shape [..., 64], got [2, 63]"});
}

// ---- Embedding ----------------------------------------------------------------------------

TEST(Embedding, LooksUpRowsAndScatterAddsGradients) {
  Generator gen(7);
  Embedding emb(10, 4, gen);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 7, 3, 0, 9, 3}, {2, 3});
  Tensor y = emb.forward(ids);
  ASSERT_EQ(y.shape(), Shape({2, 3, 4}));
  std::vector<int64_t> idv = {3, 7, 3, 0, 9, 3};
  for (int p = 0; p < 6; ++p)
    for (int d = 0; d < 4; ++d) EXPECT_EQ(y.at({p / 3, p % 3, d}), emb.weight().at({idv[p], d}));
  backward(sum(y));
  Tensor g = emb.weight().grad();
  EXPECT_EQ(g.at({3, 1}), 3.0);  // id 3 appears three times
  EXPECT_EQ(g.at({7, 0}), 1.0);
  EXPECT_EQ(g.at({5, 2}), 0.0);  // unused row
  EXPECT_EQ(emb.named_parameters()[0].first, "weight");
  expect_error([&] { emb.forward(Tensor::from_vector(std::vector<int64_t>{10}, {1})); },
               {"embedding: ids: id 10 at position [0] is out of range [0, 10)"});
}

// ---- RMSNorm ------------------------------------------------------------------------------

TEST(RMSNorm, ForwardAndGradientsMatchFloat64) {
  Generator gen(8);
  RMSNorm norm(6, 1e-6);
  EXPECT_EQ(norm.weight().to_vector(), std::vector<float>(6, 1.0f));  // initialized to ones
  norm.weight().detach().copy_(Tensor::randn({6}, gen, DType::f32, 1.0, 0.3));
  Tensor x = Tensor::randn({3, 5, 6}, gen).set_requires_grad(true);
  Tensor w = Tensor::randn({3, 5, 6}, gen);
  Tensor y = norm.forward(x);
  backward(sum(y * w));
  // Reference: the formula in float64 by loops, and its gradients by finite differences.
  std::vector<double> xv = x.to_vector<double>(), gv = norm.weight().to_vector<double>();
  std::vector<double> y_ref(xv.size());
  for (int r = 0; r < 15; ++r) {
    double ms = 0;
    for (int d = 0; d < 6; ++d) ms += xv[r * 6 + d] * xv[r * 6 + d] / 6.0;
    for (int d = 0; d < 6; ++d) y_ref[r * 6 + d] = xv[r * 6 + d] / std::sqrt(ms + 1e-6) * gv[d];
  }
  EXPECT_LT(relative_error(y, Tensor::from_vector(y_ref, {3, 5, 6})), 1e-6);
  Tensor x64 = f64(x, true), g64 = f64(norm.weight(), true), w64 = f64(w);
  backward(sum(rms_norm(x64, g64, 1e-6) * w64));
  EXPECT_LT(relative_error(x.grad(), x64.grad()), 1e-5);
  EXPECT_LT(relative_error(norm.weight().grad(), g64.grad()), 1e-5);
  GradCheckResult r = grad_check(
      [&](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-6); },
      {f64(x, true).reshape({15, 6}).detach().set_requires_grad(true), f64(norm.weight(), true)});
  EXPECT_LT(r.max_rel_error, 1e-6);
}

// ---- SwiGLU -------------------------------------------------------------------------------

TEST(SwiGLU, HiddenSizeRoundsUpToMultipleOf32) {
  EXPECT_EQ(swiglu_hidden_size(128, 4.0), 352);  // 341.33 -> 352
  EXPECT_EQ(swiglu_hidden_size(96, 4.0), 256);   // exactly 256
  EXPECT_EQ(swiglu_hidden_size(128, 3.0), 256);  // exactly 256
  EXPECT_EQ(swiglu_hidden_size(8, 1.0), 32);     // 5.33 -> 32
  expect_error([&] { swiglu_hidden_size(128, 0.0); },
               {"swiglu_hidden_size: mlp_ratio: expected a positive value, got 0"});
}

// The SwiGLU computation in any float dtype, from its three weights.
Tensor swiglu_reference(const Tensor& x, const Tensor& wg, const Tensor& wu, const Tensor& wd) {
  return matmul(silu(matmul(x, wg, false, true)) * matmul(x, wu, false, true), wd, false, true);
}

TEST(SwiGLU, NamesForwardAndGradientsMatchFloat64) {
  Generator gen(9);
  SwiGLU mlp(16, swiglu_hidden_size(16, 4.0), gen, 0.3, 0.1);
  auto params = mlp.named_parameters();
  ASSERT_EQ(params.size(), 3u);
  EXPECT_EQ(params[0].first, "gate_proj.weight");
  EXPECT_EQ(params[1].first, "up_proj.weight");
  EXPECT_EQ(params[2].first, "down_proj.weight");
  EXPECT_EQ(params[0].second.shape(), Shape({64, 16}));  // 2/3 * 4 * 16 = 42.7 -> 64
  EXPECT_EQ(params[2].second.shape(), Shape({16, 64}));

  Tensor x = Tensor::randn({2, 3, 16}, gen).set_requires_grad(true);
  Tensor w = Tensor::randn({2, 3, 16}, gen);
  Tensor y = mlp.forward(x);
  backward(sum(y * w));
  std::vector<Tensor> ref_in = {f64(x, true), f64(params[0].second, true), f64(params[1].second, true),
                                f64(params[2].second, true)};
  Tensor y_ref = swiglu_reference(ref_in[0], ref_in[1], ref_in[2], ref_in[3]);
  backward(sum(y_ref * f64(w)));
  EXPECT_LT(relative_error(y, y_ref), 1e-5);
  EXPECT_LT(relative_error(x.grad(), ref_in[0].grad()), 1e-5);
  for (int i = 0; i < 3; ++i)
    EXPECT_LT(relative_error(params[i].second.grad(), ref_in[i + 1].grad()), 1e-5) << params[i].first;

  // The reference itself against finite differences, on a tiny shape.
  std::vector<Tensor> tiny = {Tensor::randn({2, 4}, gen, DType::f64).set_requires_grad(true),
                              Tensor::randn({6, 4}, gen, DType::f64).set_requires_grad(true),
                              Tensor::randn({6, 4}, gen, DType::f64).set_requires_grad(true),
                              Tensor::randn({4, 6}, gen, DType::f64).set_requires_grad(true)};
  GradCheckResult r = grad_check(
      [](const std::vector<Tensor>& in) { return swiglu_reference(in[0], in[1], in[2], in[3]); }, tiny);
  EXPECT_LT(r.max_rel_error, 1e-6);
}

// ---- RoPE ---------------------------------------------------------------------------------

TEST(RotaryEmbedding, MatchesTheFormula) {
  Generator gen(10);
  const int64_t B = 2, T = 5, H = 3, D = 8, offset = 7;
  const double theta = 500.0;
  Tensor x = Tensor::randn({B, T, H, D}, gen, DType::f64);
  Tensor y = rotary_embedding(x, theta, offset);
  double max_err = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          double angle = static_cast<double>(t + offset) * std::pow(theta, -2.0 * i / D);
          double x1 = x.at({b, t, h, i}), x2 = x.at({b, t, h, i + D / 2});
          max_err = std::max(max_err, std::abs(y.at({b, t, h, i}) - (x1 * std::cos(angle) - x2 * std::sin(angle))));
          max_err = std::max(max_err,
                             std::abs(y.at({b, t, h, i + D / 2}) - (x2 * std::cos(angle) + x1 * std::sin(angle))));
        }
  EXPECT_LT(max_err, 1e-12);
  Tensor y32 = rotary_embedding(x.to(DType::f32), theta, offset);
  EXPECT_LT(relative_error(y32, y), 1e-6);
}

// The angles are kept per (theta, rotated width) and grown for later positions between
// calls: calls that alternate bases and widths, jump far ahead and come back rotate by the
// formula every time, in f64 and f32.
TEST(RotaryEmbedding, KeptAnglesServeEveryBaseWidthAndOffset) {
  Generator gen(24);
  const int64_t B = 1, T = 4, H = 2, D = 8;
  struct Call {
    double theta;
    int64_t offset, R;
  };
  for (const Call& call : {Call{500.0, 7, 8}, Call{1e4, 0, 8}, Call{500.0, 3000, 8}, Call{500.0, 2, 4},
                           Call{500.0, 7, 8}, Call{1e4, 5000, 4}}) {
    SCOPED_TRACE("theta " + std::to_string(call.theta) + " offset " + std::to_string(call.offset) + " R " +
                 std::to_string(call.R));
    Tensor x = Tensor::randn({B, T, H, D}, gen, DType::f64);
    Tensor y = rotary_embedding(x, call.theta, call.offset, {}, call.R);
    double max_err = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < call.R / 2; ++i) {
          double angle = static_cast<double>(t + call.offset) * std::pow(call.theta, -2.0 * i / call.R);
          double x1 = x.at({0, t, h, i}), x2 = x.at({0, t, h, i + call.R / 2});
          max_err = std::max(max_err, std::abs(y.at({0, t, h, i}) - (x1 * std::cos(angle) - x2 * std::sin(angle))));
          max_err = std::max(max_err,
                             std::abs(y.at({0, t, h, i + call.R / 2}) - (x2 * std::cos(angle) + x1 * std::sin(angle))));
        }
        for (int64_t i = call.R; i < D; ++i)
          max_err = std::max(max_err, std::abs(y.at({0, t, h, i}) - x.at({0, t, h, i})));
      }
    EXPECT_LT(max_err, 1e-12);
    EXPECT_LT(relative_error(rotary_embedding(x.to(DType::f32), call.theta, call.offset, {}, call.R), y), 1e-6);
  }
}

TEST(RotaryEmbedding, ScoresDependOnRelativePositionOnly) {
  // <R(p) q, R(p') k> depends on p - p' only (Su et al. 2021, eq. 16).
  Generator gen(11);
  Tensor q = Tensor::randn({1, 1, 1, 16}, gen, DType::f64);
  Tensor k = Tensor::randn({1, 1, 1, 16}, gen, DType::f64);
  auto score = [&](int64_t pq, int64_t pk) {
    return sum(rotary_embedding(q, 10000.0, pq) * rotary_embedding(k, 10000.0, pk)).item();
  };
  EXPECT_NEAR(score(5, 2), score(1003, 1000), 1e-10);
  EXPECT_NEAR(score(0, 0), sum(q * k).item(), 1e-12);
}

TEST(RotaryEmbedding, OffsetContinuesTheSequence) {
  Generator gen(12);
  Tensor x = Tensor::randn({2, 9, 2, 6}, gen);
  Tensor full = rotary_embedding(x, 10000.0, 0);
  Tensor tail = rotary_embedding(slice(x, 1, 4, 9), 10000.0, 4);
  EXPECT_EQ(relative_error(tail, slice(full, 1, 4, 9)), 0.0);
}

TEST(RotaryEmbedding, GradCheckAndErrors) {
  Generator gen(13);
  GradCheckResult r = grad_check([](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 100.0, 3); },
                                 {Tensor::randn({2, 3, 2, 4}, gen, DType::f64).set_requires_grad(true)});
  EXPECT_LT(r.max_rel_error, 1e-8);
  expect_error([&] { rotary_embedding(Tensor::zeros({1, 2, 2, 5})); },
               {"rotary_embedding: x: expected an even head dim D, got 5"});  // odd D
  expect_error([&] { rotary_embedding(Tensor::zeros({2, 2, 4})); },
               {"rotary_embedding: x: expected shape [B, T, H, D], got [2, 2, 4]"});  // rank 3
  expect_error([&] { rotary_embedding(Tensor::zeros({1, 2, 2, 4}), 0.0); },
               {"rotary_embedding: theta: expected a positive base, got 0"});  // theta
  expect_error([&] { rotary_embedding(Tensor::zeros({1, 2, 2, 4}), 1e4, -1); },
               {"rotary_embedding: position_offset: expected >= 0, got -1"});
}

// Packed sequences (cu_seqlens) as one row: positions restart at each sequence, so the row
// rotates exactly as the sequences do one call each, forward and backward.
TEST(RotaryEmbedding, PositionsRestartAtEachPackedSequence) {
  Generator gen(19);
  const std::vector<int64_t> lengths{3, 1, 5};
  Tensor cu = Tensor::from_vector(std::vector<int64_t>{0, 3, 4, 9}, {4});
  Tensor x = Tensor::randn({1, 9, 2, 6}, gen).set_requires_grad(true);
  Tensor w = Tensor::randn({1, 9, 2, 6}, gen);
  Tensor packed = rotary_embedding(x, 500.0, 2, cu);
  backward(sum(packed * w));
  Tensor x1 = x.detach().set_requires_grad(true);
  std::vector<Tensor> parts;
  int64_t t0 = 0;
  for (int64_t L : lengths) {
    parts.push_back(rotary_embedding(slice(x1, 1, t0, t0 + L), 500.0, 2));
    t0 += L;
  }
  Tensor separate = concat(parts, 1);
  backward(sum(separate * w));
  EXPECT_EQ(relative_error(packed, separate), 0.0);
  EXPECT_EQ(relative_error(x.grad(), x1.grad()), 0.0);
  // Token 3 opens a sequence: with no offset it is at position 0, so it turns by 0.
  EXPECT_EQ(relative_error(slice(rotary_embedding(x.detach(), 500.0, 0, cu), 1, 3, 4), slice(x.detach(), 1, 3, 4)),
            0.0);
  GradCheckResult r = grad_check([&](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 100.0, 0, cu); },
                                 {Tensor::randn({1, 9, 2, 4}, gen, DType::f64).set_requires_grad(true)});
  EXPECT_LT(r.max_rel_error, 1e-8);
  expect_error(
      [&] {
        rotary_embedding(Tensor::zeros({2, 9, 2, 4}), 1e4, 0, cu);
      },
      {"rotary_embedding", "cu_seqlens", "B == 1", "B=2"});
  expect_error(
      [&] {
        rotary_embedding(Tensor::zeros({1, 8, 2, 4}), 1e4, 0, cu);
      },
      {"rotary_embedding", "cu_seqlens", "c_N = T = 8", "c_3 = 9"});
}

// ---- short convolution ----------------------------------------------------------------------

// y[b, t, c] = silu(sum_w weight[c, 0, w] * x[b, t - (W-1) + w, c]), earlier inputs from the
// state (or zeros), by loops in float64.
std::vector<double> short_conv_reference(const Tensor& x, const Tensor& weight, const Tensor& state) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), W = weight.size(2);
  std::vector<double> y(static_cast<size_t>(B * T * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < D; ++c) {
        double pre = 0;
        for (int64_t w = 0; w < W; ++w) {
          int64_t s = t - (W - 1) + w;
          double in = s >= 0 ? x.at({b, s, c}) : (state.defined() ? state.at({b, W - 1 + s, c}) : 0.0);
          pre += weight.at({c, 0, w}) * in;
        }
        y[(b * T + t) * D + c] = pre / (1.0 + std::exp(-pre));
      }
  return y;
}

TEST(ShortConv, ForwardMatchesFloat64Loops) {
  Generator gen(14);
  for (int64_t T : {1, 3, 17}) {
    Tensor x = Tensor::randn({2, T, 5}, gen, DType::f64);
    Tensor weight = Tensor::randn({5, 1, 4}, gen, DType::f64);
    Tensor state = Tensor::randn({2, 3, 5}, gen, DType::f64);
    EXPECT_LT(relative_error(short_conv(x, weight), Tensor::from_vector(short_conv_reference(x, weight, {}), x.shape())),
              1e-13) << "T " << T;
    EXPECT_LT(relative_error(short_conv(x, weight, state),
                             Tensor::from_vector(short_conv_reference(x, weight, state), x.shape())),
              1e-13) << "T " << T;
    Tensor y32 = short_conv(x.to(DType::f32), weight.to(DType::f32), state.to(DType::f32));
    EXPECT_LT(relative_error(y32, short_conv(x, weight, state)), 1e-6);
  }
}

TEST(ShortConv, GradCheck) {
  Generator gen(15);
  for (int64_t W : {1, 2, 4}) {
    std::vector<Tensor> inputs = {Tensor::randn({2, 5, 3}, gen, DType::f64).set_requires_grad(true),
                                  Tensor::randn({3, 1, W}, gen, DType::f64).set_requires_grad(true),
                                  Tensor::randn({2, W - 1, 3}, gen, DType::f64).set_requires_grad(true)};
    GradCheckResult r = grad_check(
        [](const std::vector<Tensor>& in) { return short_conv(in[0], in[1], in[2]); }, inputs);
    EXPECT_LT(r.max_rel_error, 1e-7) << "W " << W;
    GradCheckResult r0 = grad_check([](const std::vector<Tensor>& in) { return short_conv(in[0], in[1]); },
                                    {inputs[0], inputs[1]});
    EXPECT_LT(r0.max_rel_error, 1e-7) << "W " << W << " without state";
  }
}

TEST(ShortConv, Float32GradientsMatchFloat64) {
  Generator gen(16);
  Tensor x = Tensor::randn({3, 70, 48}, gen).set_requires_grad(true);
  Tensor weight = Tensor::randn({48, 1, 4}, gen, DType::f32, 0.0, 0.5).set_requires_grad(true);
  Tensor w = Tensor::randn({3, 70, 48}, gen);
  backward(sum(short_conv(x, weight) * w));
  Tensor x64 = f64(x, true), weight64 = f64(weight, true);
  backward(sum(short_conv(x64, weight64) * f64(w)));
  EXPECT_LT(relative_error(x.grad(), x64.grad()), 1e-5);
  EXPECT_LT(relative_error(weight.grad(), weight64.grad()), 1e-5);
}

TEST(ShortConv, StepMatchesForwardTokenByToken) {
  Generator gen(17);
  ShortConvolution conv(12, 4, gen);
  EXPECT_EQ(conv.named_parameters()[0].first, "weight");
  EXPECT_EQ(conv.weight().shape(), Shape({12, 1, 4}));
  const int64_t B = 2, T = 11;
  Tensor x = Tensor::randn({B, T, 12}, gen);
  Tensor y = conv.forward(x);
  Tensor state = conv.initial_state(B);
  ASSERT_EQ(state.shape(), Shape({B, 3, 12}));
  std::vector<Tensor> steps;
  for (int64_t t = 0; t < T; ++t) steps.push_back(conv.step(slice(x, 1, t, t + 1), state));
  EXPECT_LT(relative_error(concat(steps, 1), y), 1e-6);
  // The state now holds the last three inputs, oldest first.
  EXPECT_EQ(relative_error(state, slice(x, 1, T - 3, T)), 0.0);
}

TEST(ShortConv, PrefillStateThenSteps) {
  // short_conv with an initial state and short_conv_final_state chain like one long call.
  Generator gen(18);
  Tensor weight = Tensor::randn({6, 1, 4}, gen);
  Tensor x = Tensor::randn({1, 9, 6}, gen);
  Tensor y = short_conv(x, weight);
  Tensor first = slice(x, 1, 0, 2), rest = slice(x, 1, 2, 9);  // a prefix shorter than W-1
  Tensor state = short_conv_final_state(first, 4);
  Tensor y_rest = short_conv(rest, weight, state);
  EXPECT_LT(relative_error(concat({short_conv(first, weight), y_rest}, 1), y), 1e-6);
  Tensor state2 = short_conv_final_state(rest, 4, state);
  EXPECT_EQ(relative_error(state2, slice(x, 1, 6, 9)), 0.0);
}

// ---- short convolution over packed sequences ----------------------------------------------

// A row of pieces shorter than the kernel (1, 2, 3 tokens with W = 4), one of exactly W
// and longer ones, packed with cu_seqlens.
const std::vector<int64_t> kPieces{1, 2, 3, 4, 1, 9, 2};

Tensor pieces_cu_seqlens() {
  std::vector<int64_t> offsets{0};
  for (int64_t L : kPieces) offsets.push_back(offsets.back() + L);
  return Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())});
}

// short_conv on each piece alone (zero history), concatenated over T.
Tensor short_conv_per_piece(const Tensor& x, const Tensor& weight) {
  std::vector<Tensor> y;
  int64_t t0 = 0;
  for (int64_t L : kPieces) {
    y.push_back(short_conv(slice(x, 1, t0, t0 + L), weight));
    t0 += L;
  }
  return concat(y, 1);
}

// No output reads a token of another piece, and no gradient flows to one: the packed call
// equals the pieces one call each, forward and every gradient (dx, dweight), in f64 and f32.
TEST(ShortConv, PackedPiecesEqualSeparateCalls) {
  Generator gen(22);
  const int64_t T = 22;
  for (DType dtype : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = Tensor::randn({1, T, 5}, gen, dtype).set_requires_grad(true);
    Tensor weight = Tensor::randn({5, 1, 4}, gen, dtype).set_requires_grad(true);
    Tensor w = Tensor::randn({1, T, 5}, gen, dtype);
    Tensor packed = short_conv(x, weight, {}, pieces_cu_seqlens());
    backward(sum(packed * w));
    Tensor x1 = x.detach().set_requires_grad(true), weight1 = weight.detach().set_requires_grad(true);
    Tensor separate = short_conv_per_piece(x1, weight1);
    backward(sum(separate * w));
    const double tol = dtype == DType::f64 ? 1e-13 : 1e-6;
    EXPECT_LT(relative_error(packed, separate), tol);
    EXPECT_LT(relative_error(x.grad(), x1.grad()), tol);
    EXPECT_LT(relative_error(weight.grad(), weight1.grad()), tol);
  }
}

TEST(ShortConv, PackedPiecesGradCheck) {
  Generator gen(23);
  for (int64_t W : {1, 2, 4, 6}) {
    std::vector<Tensor> inputs = {Tensor::randn({1, 22, 3}, gen, DType::f64).set_requires_grad(true),
                                  Tensor::randn({3, 1, W}, gen, DType::f64).set_requires_grad(true)};
    GradCheckResult r = grad_check(
        [](const std::vector<Tensor>& in) { return short_conv(in[0], in[1], {}, pieces_cu_seqlens()); }, inputs);
    EXPECT_LT(r.max_rel_error, 1e-7) << "W " << W;
  }
}

TEST(ShortConv, PackedPiecesBadArgumentsThrow) {
  Tensor weight = Tensor::zeros({3, 1, 4});
  expect_error(
      [&] {
        short_conv(Tensor::zeros({2, 11, 3}), weight, {}, pieces_cu_seqlens());
      },
      {"short_conv", "cu_seqlens", "B == 1", "B=2"});
  expect_error(
      [&] {
        short_conv(Tensor::zeros({1, 21, 3}), weight, {}, pieces_cu_seqlens());
      },
      {"short_conv", "cu_seqlens", "c_N = T = 21", "c_7 = 22"});
  expect_error(
      [&] {
        short_conv(Tensor::zeros({1, 22, 3}), weight, Tensor::zeros({1, 3, 3}), pieces_cu_seqlens());
      },
      {"short_conv: initial_state: expected none with cu_seqlens", "[1, 3, 3]"});
}

TEST(ShortConv, BadArgumentsThrow) {
  Tensor x = Tensor::zeros({2, 5, 3});
  expect_error([&] { short_conv(x, Tensor::zeros({4, 1, 4})); },
               {"short_conv: weight: expected shape [3, 1, W] with W >= 1, got [4, 1, 4]"});  // channels
  expect_error([&] { short_conv(x, Tensor::zeros({3, 4})); },
               {"short_conv: weight: expected shape [3, 1, W] with W >= 1, got [3, 4]"});  // weight rank
  expect_error([&] { short_conv(x, Tensor::zeros({3, 1, 4}), Tensor::zeros({2, 4, 3})); },
               {"short_conv: conv state: expected shape [2, 3, 3], got [2, 4, 3]"});  // state length
  expect_error([&] { short_conv(x, Tensor::zeros({3, 1, 4}, DType::f64)); },
               {"short_conv: weight: expected f32, got f64"});  // dtype
  Tensor state = Tensor::zeros({2, 3, 3});
  expect_error([&] { short_conv_step(x, Tensor::zeros({3, 1, 4}), state); },
               {"short_conv_step: x_t: expected one token [B, 1, D], got [2, 5, 3]"});  // more than one token
}

}  // namespace
}  // namespace lat
