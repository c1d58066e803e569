// The token-by-token forms of linear attention and simple_gla: fused_recurrent_* (one
// tape node whose backward recomputes states from a checkpoint every 64 tokens) across
// checkpoint boundaries against the float64 reference, gradients from final_state alone,
// chaining, and recurrent_step_* (in-place decoding) against fused_recurrent_*.
// Letters as in include/lat/linear_attention.h.
#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using testing::Case;
using testing::Gate;

// x[:, t] without the T axis: [B, T, H, D] -> [B, H, D], [B, T, H] -> [B, H].
Tensor token(const Tensor& x, int64_t t) {
  Shape s = x.shape();
  s.erase(s.begin() + 1);
  return slice(x, 1, t, t + 1).reshape(s);
}

// Backward recomputes each block of 64 tokens from its checkpoint: lengths on and
// around the block boundaries.
TEST(FusedRecurrent, CheckpointBoundariesMatchReference) {
  uint64_t seed = 40;
  for (int64_t T : {63, 64, 65, 128, 129, 191}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    Case gla{2, T, 2, 8, 12, Gate::mild, T % 2 == 1, false, seed++};
    testing::Inputs in = testing::make_inputs(gla, gla.V);
    testing::expect_close(testing::run(testing::simple_gla_recurrent(), in, DType::f32),
                          testing::run(testing::simple_gla_naive(), in, DType::f64), testing::kTol);
    Case linear{2, T, 1, 12, 8, Gate::none, T % 2 == 0, true, seed++};
    testing::Inputs lin = testing::make_inputs(linear, linear.V + 1);
    testing::expect_close(testing::run(testing::linear_attn_recurrent(true), lin, DType::f32),
                          testing::run(testing::linear_attn_naive(true), lin, DType::f64), testing::kTol);
  }
}

// A loss on the final state alone: o receives a zero gradient; k, v, g and the initial
// state get the gradient that flows back through the states, q (read out only) none.
TEST(FusedRecurrent, GradientFromFinalStateOnly) {
  Case c{1, 70, 2, 6, 5, Gate::mild, true, false, 9};
  testing::Inputs in = testing::make_inputs(c, c.V);
  in.d_o = Tensor::zeros(in.d_o.shape());
  testing::Result ref = testing::run(testing::simple_gla_naive(), in, DType::f64);
  testing::Result got = testing::run(testing::simple_gla_recurrent(), in, DType::f32);
  testing::expect_close(got, ref, testing::kTol);
  EXPECT_EQ(sum(got.dq * got.dq).item(), 0.0);
  EXPECT_GT(sum(got.dk * got.dk).item(), 0.0);
  EXPECT_GT(sum(got.dg * got.dg).item(), 0.0);
}

// Two chained calls equal one call, outputs and gradients.
TEST(FusedRecurrent, ChainingMatchesOneCall) {
  Case c{2, 100, 2, 8, 6, Gate::mild, true, false, 12};
  testing::Inputs in = testing::make_inputs(c, c.V);
  auto chained = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    int64_t half = 37, T = q.size(1);
    LinearAttentionOutput a = fused_recurrent_simple_gla(slice(q, 1, 0, half), slice(k, 1, 0, half),
                                                         slice(v, 1, 0, half), slice(g, 1, 0, half), {}, h0, true);
    LinearAttentionOutput b = fused_recurrent_simple_gla(slice(q, 1, half, T), slice(k, 1, half, T),
                                                         slice(v, 1, half, T), slice(g, 1, half, T), {},
                                                         a.final_state, true);
    return LinearAttentionOutput{concat({a.o, b.o}, 1), b.final_state};
  };
  testing::expect_close(testing::run(chained, in, DType::f32),
                        testing::run(testing::simple_gla_recurrent(), in, DType::f32), 1e-5);
}

TEST(FusedRecurrent, NoFinalStateUnlessRequested) {
  Case c{1, 3, 1, 4, 4, Gate::mild, false, false, 1};
  testing::Inputs in = testing::make_inputs(c, c.V);
  EXPECT_FALSE(fused_recurrent_simple_gla(in.q, in.k, in.v, in.g).final_state.defined());
  EXPECT_FALSE(fused_recurrent_linear_attn(in.q, in.k, in.v).final_state.defined());
}

TEST(RecurrentStep, SimpleGlaReproducesFusedRecurrent) {
  Case c{2, 20, 3, 8, 5, Gate::mild, true, false, 21};
  testing::Inputs in = testing::make_inputs(c, c.V);
  LinearAttentionOutput full = fused_recurrent_simple_gla(in.q, in.k, in.v, in.g, 0.5f, in.initial_state, true);
  Tensor state = in.initial_state.clone();
  for (int64_t t = 0; t < c.T; ++t) {
    Tensor o_t = recurrent_step_simple_gla(token(in.q, t), token(in.k, t), token(in.v, t), token(in.g, t), 0.5f, state);
    EXPECT_LT(relative_error(o_t, token(full.o, t)), 1e-6) << "t=" << t;
  }
  EXPECT_LT(relative_error(state, full.final_state), 1e-6);
}

TEST(RecurrentStep, LinearAttnReproducesFusedRecurrent) {
  for (bool normalize : {false, true}) {
    SCOPED_TRACE(normalize ? "normalized" : "plain");
    Case c{2, 17, 2, 6, 9, Gate::none, true, normalize, 5};
    testing::Inputs in = testing::make_inputs(c, normalize ? c.V + 1 : c.V);
    LinearAttentionOutput full = fused_recurrent_linear_attn(in.q, in.k, in.v, 0.7f, normalize, in.initial_state, true);
    Tensor state = in.initial_state.clone();
    for (int64_t t = 0; t < c.T; ++t) {
      Tensor o_t = recurrent_step_linear_attn(token(in.q, t), token(in.k, t), token(in.v, t), 0.7f, normalize, state);
      EXPECT_LT(relative_error(o_t, token(full.o, t)), 1e-6) << "t=" << t;
    }
    EXPECT_LT(relative_error(state, full.final_state), 1e-6);
  }
}

// Decoding from a zero state with the step equals the chunk op's prefill output.
TEST(RecurrentStep, MatchesChunkOutputs) {
  Case c{1, 70, 2, 16, 16, Gate::mild, false, false, 31};
  testing::Inputs in = testing::make_inputs(c, c.V);
  LinearAttentionOutput chunk = chunk_simple_gla(in.q, in.k, in.v, in.g, {}, {}, true);
  Tensor state = Tensor::zeros({c.B, c.H, c.K, c.V});
  float scale = 0.25f;  // K^-0.5, the chunk op's default
  for (int64_t t = 0; t < c.T; ++t) {
    Tensor o_t = recurrent_step_simple_gla(token(in.q, t), token(in.k, t), token(in.v, t), token(in.g, t), scale, state);
    EXPECT_LT(relative_error(o_t, token(chunk.o, t)), 1e-5) << "t=" << t;
  }
  EXPECT_LT(relative_error(state, chunk.final_state), 1e-5);
}

TEST(RecurrentStep, BadInputsThrowClearErrors) {
  Generator gen(3);
  Tensor q_t = Tensor::randn({2, 3, 4}, gen), v_t = Tensor::randn({2, 3, 5}, gen);
  Tensor g_t = Tensor::full({2, 3}, -0.2), state = Tensor::zeros({2, 3, 4, 5});
  using testing::expect_error;
  expect_error([&] { recurrent_step_simple_gla(q_t, Tensor::randn({2, 3, 6}, gen), v_t, g_t, 1.0f, state); },
               {"recurrent_step_simple_gla", "k_t", "[2, 3, 4]", "[2, 3, 6]"});
  expect_error([&] { recurrent_step_simple_gla(q_t, q_t, Tensor::randn({2, 2, 5}, gen), g_t, 1.0f, state); },
               {"recurrent_step_simple_gla", "v_t", "[2, 3, V]", "[2, 2, 5]"});
  expect_error([&] { recurrent_step_simple_gla(q_t, q_t, v_t, Tensor::full({2, 3}, 0.3), 1.0f, state); },
               {"recurrent_step_simple_gla", "g_t", "<= 0", "0.3", "[0, 0]"});
  expect_error([&] { recurrent_step_simple_gla(q_t, q_t, v_t, Tensor::full({3, 2}, -0.3), 1.0f, state); },
               {"recurrent_step_simple_gla", "g_t", "[2, 3]", "[3, 2]"});
  Tensor undefined;
  expect_error([&] { recurrent_step_linear_attn(q_t, q_t, v_t, 1.0f, false, undefined); },
               {"recurrent_step_linear_attn", "state", "undefined"});
  Tensor wrong = Tensor::zeros({2, 3, 4, 5});
  expect_error([&] { recurrent_step_linear_attn(q_t, q_t, v_t, 1.0f, true, wrong); },
               {"recurrent_step_linear_attn", "state", "[2, 3, 4, 6]", "[2, 3, 4, 5]"});
  expect_error([&] { recurrent_step_linear_attn(q_t.to(DType::f64), q_t, v_t, 1.0f, false, state); },
               {"recurrent_step_linear_attn", "q_t", "f32", "f64"});
}

}  // namespace
}  // namespace lat
