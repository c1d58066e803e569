// The pieces of the float64 re-implementations of the linear mixers that the mixer tests
// share (test_mixers.cpp, test_gva_heads.cpp, test_mamba2.cpp, test_kda_mixer.cpp, test_mla.cpp): written from the formulas with core ops, so
// that a layer's float32 output and gradients can be checked against float64 autograd.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lat/grad_check.h"
#include "lat/lat.h"
#include "layers/mixer.h"

namespace lat::testing {

/// x [B, T, d_model] ~ N(0, 1), reproducible from `seed`.
inline Tensor random_input(int64_t B, int64_t T, int64_t d_model, uint64_t seed) {
  Generator gen(seed);
  return Tensor::randn({B, T, d_model}, gen);
}

/// Non-trivial o_norm weights (they start at ones), so that a norm weight that is ignored shows.
inline void perturb_norm_weights(Mixer& m) {
  Generator gen(7);
  for (auto& [name, p] : m.named_parameters())
    if (name == "o_norm.weight") p.copy_(Tensor::ones(p.shape()) + Tensor::randn(p.shape(), gen, DType::f32, 0, 0.2));
}

/// A float64 leaf copy of t that requires grad.
inline Tensor f64_leaf(const Tensor& t) {
  Tensor c = t.detach().to(DType::f64);
  c.set_requires_grad(true);
  return c;
}

/// x W^T for a Linear weight W [out, in].
inline Tensor linear(const Tensor& x, const Tensor& w) { return matmul(x, w, false, true); }

/// Causal depthwise conv + SiLU from shifted slices: y_t = silu(sum_w weight[:, 0, w] x_{t-W+1+w});
/// x [B, T, D], weight [D, 1, W].
inline Tensor conv_silu(const Tensor& x, const Tensor& weight) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), W = weight.size(2);
  Tensor xe = W > 1 ? concat({Tensor::zeros({B, W - 1, D}, DType::f64), x}, 1) : x;
  Tensor acc;
  for (int64_t w = 0; w < W; ++w) {
    Tensor term = slice(xe, 1, w, w + T) * slice(weight, 2, w, w + 1).reshape({D});
    acc = acc.defined() ? acc + term : term;
  }
  return silu(acc);
}

/// RMSNorm over the last axis with a plain weight.
inline Tensor rms_norm_ref(const Tensor& x, const Tensor& w, double eps) {
  return x * rsqrt(mean(x * x, -1, true) + eps) * w;
}

/// fla's l2norm over the last axis: x / sqrt(sum x^2 + 1e-6).
inline Tensor l2norm_ref(const Tensor& x) { return x * rsqrt(sum(x * x, -1, true) + 1e-6); }

/// A layer's parameters by name, as float64 leaves for a reference implementation.
using ParamMap = std::map<std::string, Tensor>;

/// Runs `m` forward and backward on x [2, 37, d_model] (and a random output weighting) and
/// `reference(P, x64)` (the layer re-implemented in float64 on float64 copies of the same
/// parameters) likewise; expects the output within 1e-5 and dx and every parameter's gradient
/// within 1e-4 relative error (float32 kernels against float64 autograd).
template <class Reference>
void expect_matches_float64_reference(Mixer& m, int64_t d_model, const Reference& reference) {
  const int64_t B = 2, T = 37;
  Tensor x = random_input(B, T, d_model, 8).set_requires_grad(true);
  Generator gen(9);
  Tensor w = Tensor::randn({B, T, d_model}, gen);
  Tensor y = m.forward(x);
  backward(sum(y * w));

  ParamMap P;
  for (auto& [name, p] : m.named_parameters()) P[name] = f64_leaf(p);
  Tensor x64 = f64_leaf(x);
  Tensor y64 = reference(P, x64);
  backward(sum(y64 * w.to(DType::f64)));

  EXPECT_LT(relative_error(y, y64), 1e-5) << "output";
  EXPECT_LT(relative_error(x.grad(), x64.grad()), 1e-4) << "dx";
  for (auto& [name, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_LT(relative_error(p.grad(), P[name].grad()), 1e-4) << name;
  }
}

/// `m` on packed sequences (x [2, 37, d_model] with cu_seqlens {0, 1, 3, 20, 21, 40, 74}; the
/// row start 37 cuts [21, 40) into [21, 37) and [37, 40)) against `m` on each sequence alone:
/// output and dx within 1e-6, every parameter's gradient within 1e-5 (Mixer::forward's contract).
inline void expect_packed_matches_separate(Mixer& m, int64_t d_model) {
  const int64_t B = 2, T = 37, D = d_model;
  const std::vector<int64_t> offsets{0, 1, 3, 20, 21, 40, 74};
  const std::vector<int64_t> cuts{0, 1, 3, 20, 21, 37, 40, 74};
  Tensor x = random_input(B, T, D, 12).set_requires_grad(true);
  Generator gen(13);
  Tensor w = Tensor::randn({B, T, D}, gen);
  Tensor packed = m.forward(x, Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())}));
  ASSERT_EQ(packed.shape(), Shape({B, T, D}));
  backward(sum(packed * w));
  std::vector<Tensor> packed_grads;
  for (auto& [name, p] : m.named_parameters()) packed_grads.push_back(p.grad());
  m.zero_grad();

  Tensor x1 = x.detach().set_requires_grad(true);
  Tensor flat = x1.reshape({1, B * T, D});
  std::vector<Tensor> parts;
  for (size_t n = 0; n + 1 < cuts.size(); ++n) parts.push_back(m.forward(slice(flat, 1, cuts[n], cuts[n + 1])));
  Tensor separate = concat(parts, 1).reshape({B, T, D});
  backward(sum(separate * w));

  EXPECT_LT(relative_error(packed, separate), 1e-6) << "output";
  EXPECT_LT(relative_error(x.grad(), x1.grad()), 1e-6) << "dx";
  size_t i = 0;
  for (auto& [name, p] : m.named_parameters()) EXPECT_LT(relative_error(packed_grads[i++], p.grad()), 1e-5) << name;
}

/// Feeds x [B, T, d_model] through m.step() in pieces of the given sizes (summing to T), from
/// a fresh state; the outputs, concatenated along T.
inline Tensor run_steps(const Mixer& m, const Tensor& x, const std::vector<int64_t>& pieces) {
  auto state = m.make_state(x.size(0));
  std::vector<Tensor> outputs;
  int64_t t = 0;
  for (int64_t n : pieces) {
    outputs.push_back(m.step(slice(x, 1, t, t + n), *state));
    t += n;
  }
  EXPECT_EQ(t, x.size(1));
  return concat(outputs, 1);
}

/// step() in pieces reproduces forward() on x [B, 37, d_model] within 1e-5: one token at a
/// time (the one-token step), and a 20-token prompt (longer than a chunk: the chunk op from a
/// state), a 5-token piece (the fused recurrent op), then single tokens.
inline void expect_steps_reproduce_forward(const Mixer& m, const Tensor& x) {
  NoGradGuard no_grad;
  const int64_t T = x.size(1);
  const Tensor expected = m.forward(x);
  std::vector<int64_t> prompt_then_tokens{20, 5};
  prompt_then_tokens.resize(T - 23, 1);
  for (const std::vector<int64_t>& pieces : {std::vector<int64_t>(T, 1), prompt_then_tokens})
    EXPECT_LT(relative_error(run_steps(m, x, pieces), expected), 1e-5) << pieces.size() << " pieces";
}

/// A prefill of x [B, T, d_model] minus its last token, split at each of `cuts`, gives the
/// outputs of one unsplit prefill within 1e-5, and the state after it gives the same last token.
inline void expect_split_prefill_equals_one_pass(const Mixer& m, const Tensor& x, const std::vector<int64_t>& cuts) {
  NoGradGuard no_grad;
  const int64_t T = x.size(1);
  auto whole = m.make_state(x.size(0));
  const Tensor expected = m.step(slice(x, 1, 0, T - 1), *whole);
  const Tensor expected_last = m.step(slice(x, 1, T - 1, T), *whole);
  for (int64_t cut : cuts) {
    auto state = m.make_state(x.size(0));
    const Tensor first = m.step(slice(x, 1, 0, cut), *state);
    const Tensor second = m.step(slice(x, 1, cut, T - 1), *state);
    EXPECT_LT(relative_error(concat({first, second}, 1), expected), 1e-5) << "cut " << cut;
    EXPECT_LT(relative_error(m.step(slice(x, 1, T - 1, T), *state), expected_last), 1e-5) << "cut " << cut;
  }
}

}  // namespace lat::testing
