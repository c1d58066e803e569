// chunk_delta_rule and fused_recurrent_delta_rule (DeltaNet: the gated delta rule without
// g) against the float64 reference naive_gated_delta_rule with g undefined: outputs, final
// states and every input gradient (q, k, v, beta, initial_state) with random upstream
// gradients on o and final_state; finite differences of the reference; equality with the
// gated op at g = 0; chaining; recurrent_step against fused_recurrent; errors.
// Letters as in include/lat/linear_attention.h.
#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using testing::Case;
using testing::DeltaCase;
using testing::Gate;

// The sweep: every T in {1, 2, 63, 64, 65, 200} with (16,16) and (48,80), with/without
// initial state; (64,64), (128,128), T = 1000, the in-kernel L2 norm and other chunk sizes
// on a subset.
std::vector<DeltaCase> sweep() {
  std::vector<DeltaCase> cases;
  uint64_t seed = 1001;
  for (const Case& c : testing::sweep_grid({Gate::none}, {Gate::none}, seed)) cases.push_back({c});
  cases.push_back({{1, 1000, 1, 64, 64, Gate::none, true, false, seed++}});
  cases.push_back({{1, 1000, 1, 16, 16, Gate::none, false, false, seed++}});
  cases.push_back({{1, 1000, 1, 48, 80, Gate::none, true, false, seed++}});
  cases.push_back({{1, 63, 1, 128, 128, Gate::none, false, false, seed++}});
  cases.push_back({{1, 200, 1, 128, 128, Gate::none, true, false, seed++}});
  cases.push_back({{1, 1, 2, 16, 16, Gate::none, true, false, seed++}, true});
  cases.push_back({{2, 65, 1, 48, 80, Gate::none, true, false, seed++}, true});
  cases.push_back({{1, 200, 2, 16, 16, Gate::none, false, false, seed++}, true});
  cases.push_back({{1, 90, 2, 20, 12, Gate::none, true, false, seed++}, false, 16});
  cases.push_back({{1, 90, 1, 12, 20, Gate::none, true, false, seed++}, true, 32});
  return cases;
}

// The ops under test take no g; the shared helpers pass an undefined one.
testing::DeltaOp chunk_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&, const Tensor& beta, const Tensor& h0) {
    return chunk_delta_rule(q, k, v, beta, {}, h0, true, c.l2norm_in_kernel, c.chunk_size);
  };
}
testing::DeltaOp recurrent_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&, const Tensor& beta, const Tensor& h0) {
    return fused_recurrent_delta_rule(q, k, v, beta, {}, h0, true, c.l2norm_in_kernel);
  };
}
testing::DeltaOp naive_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&, const Tensor& beta, const Tensor& h0) {
    return naive_gated_delta_rule(q, k, v, Tensor(), beta, {}, h0, true, c.l2norm_in_kernel);
  };
}

class DeltaRuleSweep : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(DeltaRuleSweep, ChunkAndRecurrentMatchFloat64Reference) {
  const DeltaCase& c = GetParam();
  testing::expect_chunk_and_recurrent_match_reference(c, naive_op(c), chunk_op(c), recurrent_op(c), testing::kTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DeltaRuleSweep, ::testing::ValuesIn(sweep()), testing::delta_param_name);

// Finite differences of the float64 reference without g, with and without the L2 norm.
TEST(DeltaRule, ReferenceMatchesFiniteDifferences) {
  for (bool l2 : {false, true}) {
    SCOPED_TRACE(l2 ? "l2norm_in_kernel" : "plain");
    Generator gen(6);
    const int64_t B = 2, T = 4, H = 1, K = 3, V = 2;
    Tensor q = Tensor::randn({B, T, H, K}, gen, DType::f64), k = Tensor::randn({B, T, H, K}, gen, DType::f64);
    if (!l2) k = k * rsqrt(sum(k * k, -1, true));
    Tensor v = Tensor::randn({B, T, H, V}, gen, DType::f64);
    Tensor beta = Tensor::uniform({B, T, H}, gen, 0.1, 0.9, DType::f64);
    Tensor h0 = Tensor::randn({B, H, K, V}, gen, DType::f64);
    std::vector<Tensor> inputs{q, k, v, beta, h0};
    for (Tensor& t : inputs) t.set_requires_grad(true);
    auto f = [l2](const std::vector<Tensor>& x) {
      LinearAttentionOutput out = naive_gated_delta_rule(x[0], x[1], x[2], Tensor(), x[3], 1.3, x[4], true, l2);
      return concat({out.o.reshape({-1}), out.final_state.reshape({-1})}, 0);
    };
    GradCheckResult r = grad_check(f, inputs);
    for (size_t i = 0; i < r.rel_error.size(); ++i) EXPECT_LT(r.rel_error[i], 1e-6) << "input " << i;
  }
}

// The delta rule is the gated delta rule at g = 0 (the same kernel without the gate).
TEST(DeltaRule, EqualsGatedDeltaRuleAtZeroGate) {
  const DeltaCase c{{2, 100, 2, 16, 24, Gate::zero, true, false, 17}};
  testing::DeltaInputs in = testing::make_delta_inputs(c);
  auto gated = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                  const Tensor& h0) { return chunk_gated_delta_rule(q, k, v, g, beta, {}, h0, true); };
  testing::DeltaResult expected = testing::run_delta(gated, in, DType::f32);
  expected.base.dg = Tensor();  // the delta rule has no g
  testing::expect_delta_close(testing::run_delta(chunk_op(DeltaCase{}), in, DType::f32), expected, 1e-6,
                              "delta_vs_gated_g0");
}

TEST(DeltaRule, ChunkChainsThroughFinalState) { testing::expect_chaining(Gate::none, chunk_op(DeltaCase{})); }

TEST(DeltaRule, RecurrentChainsThroughFinalState) { testing::expect_chaining(Gate::none, recurrent_op(DeltaCase{})); }

// recurrent_step_delta_rule token by token reproduces fused_recurrent (same f32 math).
TEST(DeltaRule, RecurrentStepMatchesFusedRecurrent) {
  for (bool l2 : {false, true}) {
    SCOPED_TRACE(l2 ? "l2norm_in_kernel" : "plain");
    const DeltaCase c{{2, 70, 3, 20, 12, Gate::none, true, false, 43}, l2};
    testing::DeltaInputs in = testing::make_delta_inputs(c);
    const testing::Inputs& b = in.base;
    const float scale = 0.6f;
    LinearAttentionOutput ref = fused_recurrent_delta_rule(b.q, b.k, b.v, in.beta, scale, b.initial_state, true, l2);
    auto step = [&](const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& /*g_t*/,
                    const Tensor& beta_t, Tensor& state) {
      return recurrent_step_delta_rule(q_t, k_t, v_t, beta_t, scale, state, l2);
    };
    testing::expect_steps_match(c, in, ref, step);
  }
}

TEST(DeltaRule, BadInputsThrowClearErrors) {
  const DeltaCase c{{1, 4, 2, 8, 6, Gate::none, true, false, 3}};
  testing::DeltaInputs in = testing::make_delta_inputs(c);
  const testing::Inputs& b = in.base;
  using testing::expect_error;
  for (const char* name : {"chunk_delta_rule", "fused_recurrent_delta_rule"}) {
    SCOPED_TRACE(name);
    const bool chunk = std::string(name) == "chunk_delta_rule";
    auto call = [chunk](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& h0) {
      if (chunk) return chunk_delta_rule(q, k, v, beta, {}, h0, true);
      return fused_recurrent_delta_rule(q, k, v, beta, {}, h0, true);
    };
    Generator gen(2);
    expect_error([&] { call(b.q, Tensor::randn({1, 3, 2, 8}, gen), b.v, in.beta, b.initial_state); },
                 {name, "k", "expected shape [1, 4, 2, 8]", "got [1, 3, 2, 8]"});
    expect_error([&] { call(b.q, b.k, Tensor::randn({1, 4, 3, 6}, gen), in.beta, b.initial_state); },
                 {name, "v", "expected shape [1, 4, 2, 6]", "got [1, 4, 3, 6]"});
    expect_error([&] { call(b.q, b.k, b.v.reshape({8, 6}), in.beta, b.initial_state); },
                 {name, "v", "rank 4", "[8, 6]"});
    expect_error([&] { call(b.q, b.k, b.v, Tensor(), b.initial_state); }, {name, "beta", "undefined"});
    expect_error([&] { call(b.q, b.k, b.v, Tensor::full({1, 4, 2}, -0.5), b.initial_state); },
                 {name, "beta", "[0, 1]", "-0.5"});
    expect_error([&] { call(b.q, b.k, b.v, in.beta, Tensor::zeros({1, 2, 8})); },
                 {name, "initial_state", "[1, 2, 8, 6]", "got [1, 2, 8]"});
  }
  Tensor state = Tensor::zeros({1, 2, 8, 6});
  Tensor q_t = Tensor::zeros({1, 2, 8}), v_t = Tensor::zeros({1, 2, 6}), beta_t = Tensor::zeros({1, 2});
  expect_error([&] { recurrent_step_delta_rule(q_t, Tensor::zeros({1, 2, 7}), v_t, beta_t, 1.0f, state); },
               {"recurrent_step_delta_rule", "k_t", "[1, 2, 8]"});
  expect_error([&] { recurrent_step_delta_rule(q_t, q_t, v_t, Tensor::full({1, 2}, 2.0), 1.0f, state); },
               {"recurrent_step_delta_rule", "beta_t", "[0, 1]"});
}

}  // namespace
}  // namespace lat
