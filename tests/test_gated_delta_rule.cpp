// chunk_gated_delta_rule and fused_recurrent_gated_delta_rule against the float64
// reference naive_gated_delta_rule: outputs, final states and every input gradient (q, k,
// v, g, beta, initial_state) with random upstream gradients on o and final_state; finite
// differences of the reference; chaining of segments; recurrent_step against
// fused_recurrent; errors. Letters as in include/lat/linear_attention.h.
#include <gtest/gtest.h>

#include <cmath>

#include "layers/linear_attention/common.h"
#include "tests/bitwise.h"
#include "tests/expect_error.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using testing::Case;
using testing::DeltaCase;
using testing::Gate;

// The sweep: every T in {1, 2, 63, 64, 65, 200} with (16,16) and (48,80), each gate and
// with/without initial state; (64,64), (128,128), T = 1000, the in-kernel L2 norm, other
// chunk sizes and the extreme head dims K = 256 and K = 1 on a subset.
std::vector<DeltaCase> sweep() {
  std::vector<DeltaCase> cases;
  uint64_t seed = 1;
  for (const Case& c : testing::sweep_grid({Gate::zero, Gate::mild, Gate::strong}, {Gate::mild, Gate::strong}, seed))
    cases.push_back({c});
  cases.push_back({{1, 1000, 1, 64, 64, Gate::mild, true, false, seed++}});
  cases.push_back({{1, 1000, 1, 48, 80, Gate::zero, false, false, seed++}});
  cases.push_back({{1, 1000, 1, 16, 16, Gate::strong, true, false, seed++}});
  cases.push_back({{1, 1000, 1, 128, 128, Gate::mild, true, false, seed++}});
  cases.push_back({{1, 63, 1, 128, 128, Gate::zero, true, false, seed++}});
  cases.push_back({{1, 200, 1, 128, 128, Gate::strong, false, false, seed++}});
  cases.push_back({{1, 1, 2, 16, 16, Gate::mild, true, false, seed++}, true});
  cases.push_back({{2, 65, 1, 16, 16, Gate::mild, true, false, seed++}, true});
  cases.push_back({{1, 200, 2, 48, 80, Gate::strong, false, false, seed++}, true});
  cases.push_back({{1, 64, 1, 64, 64, Gate::zero, true, false, seed++}, true});
  cases.push_back({{1, 100, 2, 16, 24, Gate::mild, true, false, seed++}, false, 16});
  cases.push_back({{1, 100, 1, 24, 16, Gate::strong, true, false, seed++}, true, 32});
  cases.push_back({{1, 70, 1, 256, 8, Gate::mild, true, false, seed++}});  // the largest K
  cases.push_back({{2, 70, 2, 1, 3, Gate::strong, true, false, seed++}});  // the smallest K
  return cases;
}

testing::DeltaOp chunk_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    return chunk_gated_delta_rule(q, k, v, g, beta, {}, h0, true, c.l2norm_in_kernel, c.chunk_size);
  };
}
testing::DeltaOp recurrent_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    return fused_recurrent_gated_delta_rule(q, k, v, g, beta, {}, h0, true, c.l2norm_in_kernel);
  };
}
testing::DeltaOp naive_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    return naive_gated_delta_rule(q, k, v, g, beta, {}, h0, true, c.l2norm_in_kernel);
  };
}

class GatedDeltaRuleSweep : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(GatedDeltaRuleSweep, ChunkAndRecurrentMatchFloat64Reference) {
  const DeltaCase& c = GetParam();
  testing::expect_chunk_and_recurrent_match_reference(c, naive_op(c), chunk_op(c), recurrent_op(c), testing::kTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatedDeltaRuleSweep, ::testing::ValuesIn(sweep()), testing::delta_param_name);

// Chunk sizes that do not divide T, are not multiples of the 16-float vectors, or exceed T.
TEST(GatedDeltaRule, OddChunkSizesMatchReference) {
  const DeltaCase base{{1, 50, 2, 8, 12, Gate::mild, true, false, 99}};
  testing::DeltaInputs in = testing::make_delta_inputs(base);
  testing::DeltaResult ref = testing::run_delta(naive_op(base), in, DType::f64);
  for (int chunk_size : {1, 7, 50, 128}) {
    SCOPED_TRACE(chunk_size);
    DeltaCase c = base;
    c.chunk_size = chunk_size;
    testing::expect_delta_close(testing::run_delta(chunk_op(c), in, DType::f32), ref, testing::kTol, "chunk_odd_sizes");
  }
}

// A chunk larger than the call runs as T rounded up to 16 rows (layers/linear_attention/
// common.h, chunk_rows): chunk_size 1024 over 37 tokens is bit for bit chunk_size 48, output,
// final state and every gradient, with and without packed sequences' spans.
TEST(GatedDeltaRule, ChunkRowsAreTheCallRoundedTo16WhenShorterThanAChunk) {
  EXPECT_EQ(linear_attention::chunk_rows(1024, 37), 48);
  EXPECT_EQ(linear_attention::chunk_rows(1024, 48), 48);
  EXPECT_EQ(linear_attention::chunk_rows(64, 1000), 64);
  EXPECT_EQ(linear_attention::chunk_rows(64, 1), 16);
  EXPECT_EQ(linear_attention::chunk_rows(7, 3), 7);  // never above chunk_size
  EXPECT_EQ(linear_attention::chunk_rows(40, 33), 40);
}

TEST(GatedDeltaRule, ChunkLargerThanTheCallRunsAsTheCallRoundedTo16) {
  const DeltaCase base{{2, 37, 2, 16, 24, Gate::mild, true, false, 7}};
  testing::DeltaInputs in = testing::make_delta_inputs(base);
  DeltaCase huge = base, rounded = base;
  huge.chunk_size = 1024;
  rounded.chunk_size = 48;
  const testing::DeltaResult a = testing::run_delta(chunk_op(huge), in, DType::f32);
  const testing::DeltaResult b = testing::run_delta(chunk_op(rounded), in, DType::f32);
  const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> pairs = {
      {"o", {a.base.o, b.base.o}},    {"final_state", {a.base.final_state, b.base.final_state}},
      {"dq", {a.base.dq, b.base.dq}}, {"dk", {a.base.dk, b.base.dk}},
      {"dv", {a.base.dv, b.base.dv}}, {"dg", {a.base.dg, b.base.dg}},
      {"dbeta", {a.dbeta, b.dbeta}},  {"d_initial_state", {a.base.d_initial_state, b.base.d_initial_state}}};
  for (const auto& [name, t] : pairs) EXPECT_EQ(testing::differing_bits(t.first, t.second), 0) << name;
}

// Finite differences of the float64 reference, with and without the in-kernel L2 norm
// (g away from 0 and beta inside (0, 1), so the +-eps probes stay valid inputs).
TEST(GatedDeltaRule, ReferenceMatchesFiniteDifferences) {
  for (bool l2 : {false, true}) {
    SCOPED_TRACE(l2 ? "l2norm_in_kernel" : "plain");
    Generator gen(5);
    const int64_t B = 1, T = 5, H = 2, K = 3, V = 4;
    Tensor q = Tensor::randn({B, T, H, K}, gen, DType::f64), k = Tensor::randn({B, T, H, K}, gen, DType::f64);
    if (!l2) k = k * rsqrt(sum(k * k, -1, true));
    Tensor v = Tensor::randn({B, T, H, V}, gen, DType::f64);
    Tensor g = Tensor::uniform({B, T, H}, gen, -1.0, -0.05, DType::f64);
    Tensor beta = Tensor::uniform({B, T, H}, gen, 0.1, 0.9, DType::f64);
    Tensor h0 = Tensor::randn({B, H, K, V}, gen, DType::f64);
    std::vector<Tensor> inputs{q, k, v, g, beta, h0};
    for (Tensor& t : inputs) t.set_requires_grad(true);
    auto f = [l2](const std::vector<Tensor>& x) {
      LinearAttentionOutput out = naive_gated_delta_rule(x[0], x[1], x[2], x[3], x[4], 0.7, x[5], true, l2);
      return concat({out.o.reshape({-1}), out.final_state.reshape({-1})}, 0);
    };
    GradCheckResult r = grad_check(f, inputs);
    for (size_t i = 0; i < r.rel_error.size(); ++i) EXPECT_LT(r.rel_error[i], 1e-6) << "input " << i;
  }
}

TEST(GatedDeltaRule, ChunkChainsThroughFinalState) { testing::expect_chaining(Gate::mild, chunk_op(DeltaCase{})); }

TEST(GatedDeltaRule, RecurrentChainsThroughFinalState) {
  testing::expect_chaining(Gate::mild, recurrent_op(DeltaCase{}));
}

// Strong decay over a long sequence: finite outputs and gradients, chunk equals recurrent.
TEST(GatedDeltaRule, StrongDecayLongSequenceStaysFinite) {
  const DeltaCase c{{1, 4096, 1, 16, 16, Gate::strong, true, false, 77}};
  testing::DeltaInputs in = testing::make_delta_inputs(c);
  testing::DeltaResult chunk = testing::run_delta(chunk_op(c), in, DType::f32);
  testing::DeltaResult recurrent = testing::run_delta(recurrent_op(c), in, DType::f32);
  for (const Tensor& t : {chunk.base.o, chunk.base.final_state, chunk.base.dq, chunk.base.dk, chunk.base.dv,
                          chunk.base.dg, chunk.dbeta, chunk.base.d_initial_state})
    EXPECT_TRUE(testing::all_finite(t));
  testing::expect_delta_close(chunk, recurrent, testing::kTol, "chunk_vs_recurrent_long");
}

// g = -inf (a full reset of the state) is a valid log-decay: outputs and gradients stay
// finite and match the reference.
TEST(GatedDeltaRule, InfiniteDecayResetsTheState) {
  const DeltaCase c{{1, 150, 2, 16, 16, Gate::mild, true, false, 55}};
  testing::DeltaInputs in = testing::make_delta_inputs(c);
  for (int64_t t : {0, 5, 63, 64, 100, 149}) in.base.g.set({0, t, t % 2}, -INFINITY);
  testing::DeltaResult ref = testing::run_delta(naive_op(c), in, DType::f64);
  testing::expect_delta_close(testing::run_delta(chunk_op(c), in, DType::f32), ref, testing::kTol, "chunk_reset");
  testing::expect_delta_close(testing::run_delta(recurrent_op(c), in, DType::f32), ref, testing::kTol,
                              "recurrent_reset");
}

// recurrent_step_gated_delta_rule token by token reproduces fused_recurrent (same f32 math).
TEST(GatedDeltaRule, RecurrentStepMatchesFusedRecurrent) {
  for (bool l2 : {false, true}) {
    SCOPED_TRACE(l2 ? "l2norm_in_kernel" : "plain");
    const DeltaCase c{{2, 70, 3, 12, 20, Gate::mild, true, false, 41}, l2};
    testing::DeltaInputs in = testing::make_delta_inputs(c);
    const testing::Inputs& b = in.base;
    const float scale = 0.4f;
    LinearAttentionOutput ref =
        fused_recurrent_gated_delta_rule(b.q, b.k, b.v, b.g, in.beta, scale, b.initial_state, true, l2);
    auto step = [&](const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                    const Tensor& beta_t, Tensor& state) {
      return recurrent_step_gated_delta_rule(q_t, k_t, v_t, g_t, beta_t, scale, state, l2);
    };
    testing::expect_steps_match(c, in, ref, step);
  }
}

TEST(GatedDeltaRule, BadInputsThrowClearErrors) {
  const DeltaCase c{{1, 4, 2, 8, 6, Gate::mild, true, false, 3}};
  testing::DeltaInputs in = testing::make_delta_inputs(c);
  const testing::Inputs& b = in.base;
  using testing::expect_error;
  for (const char* name : {"chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"}) {
    SCOPED_TRACE(name);
    const bool chunk = std::string(name) == "chunk_gated_delta_rule";
    auto call = [chunk](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const Tensor& h0) {
      if (chunk) return chunk_gated_delta_rule(q, k, v, g, beta, {}, h0, true);
      return fused_recurrent_gated_delta_rule(q, k, v, g, beta, {}, h0, true);
    };
    Generator gen(2);
    expect_error([&] { call(b.q, Tensor::randn({1, 4, 2, 7}, gen), b.v, b.g, in.beta, b.initial_state); },
                 {name, "k", "expected shape [1, 4, 2, 8]", "got [1, 4, 2, 7]"});
    expect_error([&] { call(b.q, b.k, Tensor::randn({1, 5, 2, 6}, gen), b.g, in.beta, b.initial_state); },
                 {name, "v", "expected shape [1, 4, 2, 6]", "got [1, 5, 2, 6]"});
    expect_error([&] { call(b.q.reshape({4, 2, 8}), b.k, b.v, b.g, in.beta, b.initial_state); },
                 {name, "q", "rank 4", "[4, 2, 8]"});
    Tensor positive = b.g.clone();
    positive.set({0, 2, 1}, 0.5);
    expect_error([&] { call(b.q, b.k, b.v, positive, in.beta, b.initial_state); },
                 {name, "g", "<= 0", "0.5", "[0, 2, 1]"});
    expect_error([&] { call(b.q, b.k, b.v, b.g.reshape({1, 8}), in.beta, b.initial_state); },
                 {name, "g", "[1, 4, 2]", "got [1, 8]"});
    expect_error([&] { call(b.q, b.k, b.v, Tensor(), in.beta, b.initial_state); }, {name, "g", "undefined"});
    expect_error([&] { call(b.q, b.k, b.v, b.g, Tensor::full({1, 4, 2}, 1.5), b.initial_state); },
                 {name, "beta", "[0, 1]", "1.5"});
    expect_error([&] { call(b.q, b.k, b.v, b.g, in.beta.reshape({4, 2}), b.initial_state); },
                 {name, "beta", "[1, 4, 2]", "got [4, 2]"});
    expect_error([&] { call(b.q, b.k, b.v, b.g, in.beta, Tensor::zeros({1, 2, 6, 8})); },
                 {name, "initial_state", "[1, 2, 8, 6]", "got [1, 2, 6, 8]"});
    expect_error([&] { call(b.q.to(DType::f64), b.k, b.v, b.g, in.beta, b.initial_state); }, {name, "q", "f32"});
  }
  expect_error([&] { chunk_gated_delta_rule(b.q, b.k, b.v, b.g, in.beta, {}, {}, false, false, 0); },
               {"chunk_gated_delta_rule", "chunk_size", "> 0", "got 0"});
  Tensor state = Tensor::zeros({1, 2, 8, 6});
  Tensor q_t = Tensor::zeros({1, 2, 8}), v_t = Tensor::zeros({1, 2, 6}), g_t = Tensor::zeros({1, 2});
  expect_error([&] { recurrent_step_gated_delta_rule(q_t, q_t, v_t, Tensor::full({1, 2}, 0.1), g_t, 1.0f, state); },
               {"recurrent_step_gated_delta_rule", "g_t", "<= 0"});
  expect_error([&] { recurrent_step_gated_delta_rule(q_t, q_t, v_t, g_t, Tensor::zeros({2}), 1.0f, state); },
               {"recurrent_step_gated_delta_rule", "beta_t", "[1, 2]"});
  Tensor bad_state = Tensor::zeros({1, 2, 6, 8});
  expect_error([&] { recurrent_step_gated_delta_rule(q_t, q_t, v_t, g_t, g_t, 1.0f, bad_state); },
               {"recurrent_step_gated_delta_rule", "state", "[1, 2, 8, 6]"});
}

}  // namespace
}  // namespace lat
