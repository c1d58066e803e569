// chunk_simple_gla and fused_recurrent_simple_gla against the float64 reference
// naive_simple_gla: outputs, final states and every input gradient (q, k, v, g,
// initial_state) with random upstream gradients on o and final_state; finite
// differences of the reference; chaining of segments; strong decay over long sequences;
// errors. Letters as in include/lat/linear_attention.h.
#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using testing::Case;
using testing::Gate;

// The sweep: every T in {1, 2, 63, 64, 65, 200} with (16,16) and (48,80), each gate and
// with/without initial state; (64,64) and (128,128) and T = 1000 on a subset.
std::vector<Case> sweep() {
  uint64_t seed = 1;
  std::vector<Case> cases = testing::sweep_grid({Gate::zero, Gate::mild, Gate::strong}, {Gate::mild, Gate::strong},
                                                seed);
  cases.push_back({1, 1000, 1, 64, 64, Gate::mild, true, false, seed++});
  cases.push_back({1, 1000, 1, 48, 80, Gate::zero, false, false, seed++});
  cases.push_back({1, 1000, 1, 16, 16, Gate::strong, true, false, seed++});
  // More chunks than one kernel block (32), with blocks cutting through a (b, h).
  cases.push_back({2, 700, 2, 16, 16, Gate::mild, true, false, seed++});
  cases.push_back({2, 1000, 2, 16, 24, Gate::zero, false, false, seed++});
  cases.push_back({1, 63, 1, 128, 128, Gate::zero, true, false, seed++});
  cases.push_back({1, 130, 1, 128, 128, Gate::mild, false, false, seed++});
  cases.push_back({1, 200, 1, 128, 128, Gate::strong, true, false, seed++});
  return cases;
}

class SimpleGlaSweep : public ::testing::TestWithParam<Case> {};

TEST_P(SimpleGlaSweep, ChunkAndRecurrentMatchFloat64Reference) {
  const Case& c = GetParam();
  testing::Inputs in = testing::make_inputs(c, c.V);
  testing::Result ref = testing::run(testing::simple_gla_naive(), in, DType::f64);
  {
    SCOPED_TRACE("chunk_simple_gla");
    testing::expect_close(testing::run(testing::simple_gla_chunk(), in, DType::f32), ref, testing::kTol);
  }
  {
    SCOPED_TRACE("fused_recurrent_simple_gla");
    testing::expect_close(testing::run(testing::simple_gla_recurrent(), in, DType::f32), ref, testing::kTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SimpleGlaSweep, ::testing::ValuesIn(sweep()),
                         [](const ::testing::TestParamInfo<Case>& info) { return testing::case_name(info.param); });

TEST(SimpleGla, OddChunkSizesMatchReference) {
  Case c{1, 50, 2, 8, 12, Gate::mild, true, false, 99};
  testing::Inputs in = testing::make_inputs(c, c.V);
  auto naive = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    return naive_simple_gla(q, k, v, g, 0.3, h0, true);
  };
  testing::Result ref = testing::run(naive, in, DType::f64);
  for (int chunk_size : {1, 7, 16, 50, 128}) {
    SCOPED_TRACE(chunk_size);
    auto op = [chunk_size](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
      return chunk_simple_gla(q, k, v, g, 0.3f, h0, true, chunk_size);
    };
    testing::expect_close(testing::run(op, in, DType::f32), ref, testing::kTol);
  }
}

// The reference's own gradients against central differences (float64).
TEST(SimpleGla, ReferenceGradCheck) {
  Generator gen(5);
  Tensor q = Tensor::randn({1, 5, 2, 3}, gen, DType::f64).set_requires_grad(true);
  Tensor k = Tensor::randn({1, 5, 2, 3}, gen, DType::f64).set_requires_grad(true);
  Tensor v = Tensor::randn({1, 5, 2, 4}, gen, DType::f64).set_requires_grad(true);
  Tensor g = Tensor::uniform({1, 5, 2}, gen, -1.0, -0.1, DType::f64).set_requires_grad(true);
  Tensor h0 = Tensor::randn({1, 2, 3, 4}, gen, DType::f64).set_requires_grad(true);
  auto f = [](const std::vector<Tensor>& x) {
    LinearAttentionOutput out = naive_simple_gla(x[0], x[1], x[2], x[3], {}, x[4], true);
    return concat({out.o.reshape({-1}), out.final_state.reshape({-1})}, 0);
  };
  GradCheckResult result = grad_check(f, {q, k, v, g, h0});
  ASSERT_EQ(result.rel_error.size(), 5u);
  EXPECT_LT(result.max_rel_error, 1e-6);
}

// T tokens in one call equal two calls of T/2 chained through the final state: outputs,
// final state and all gradients (the second call's initial_state carries them back).
TEST(SimpleGla, ChainingMatchesOneCall) {
  Case c{2, 130, 2, 16, 24, Gate::mild, true, false, 3};
  testing::Inputs in = testing::make_inputs(c, c.V);
  auto chained = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    int64_t half = q.size(1) / 2, T = q.size(1);
    LinearAttentionOutput a = chunk_simple_gla(slice(q, 1, 0, half), slice(k, 1, 0, half), slice(v, 1, 0, half),
                                               slice(g, 1, 0, half), {}, h0, true);
    LinearAttentionOutput b = chunk_simple_gla(slice(q, 1, half, T), slice(k, 1, half, T), slice(v, 1, half, T),
                                               slice(g, 1, half, T), {}, a.final_state, true);
    return LinearAttentionOutput{concat({a.o, b.o}, 1), b.final_state};
  };
  testing::Result one = testing::run(testing::simple_gla_chunk(), in, DType::f32);
  testing::Result two = testing::run(chained, in, DType::f32);
  testing::expect_close(two, one, 1e-5);
}

// g = -20 on every step over 8192 tokens: every exponent stays <= 0, so outputs and
// gradients are finite, and the chunk op still matches the token-by-token op.
TEST(SimpleGla, StrongDecayLongSequenceIsFinite) {
  Case c{1, 8192, 1, 16, 16, Gate::strong, true, false, 11};
  testing::Inputs in = testing::make_inputs(c, c.V);
  testing::Result chunk = testing::run(testing::simple_gla_chunk(), in, DType::f32);
  for (const Tensor& t : {chunk.o, chunk.final_state, chunk.dq, chunk.dk, chunk.dv, chunk.dg, chunk.d_initial_state})
    EXPECT_TRUE(testing::all_finite(t));
  testing::expect_close(chunk, testing::run(testing::simple_gla_recurrent(), in, DType::f32), testing::kTol);
}

// Without backward the kernel keeps no scores or states past each block of chunks: the
// outputs must not change (36 chunks span two blocks).
TEST(SimpleGla, ForwardWithoutGradMatchesForwardWithGrad) {
  Case c{1, 1100, 2, 16, 16, Gate::mild, true, false, 41};
  testing::Inputs in = testing::make_inputs(c, c.V);
  LinearAttentionOutput plain = chunk_simple_gla(in.q, in.k, in.v, in.g, {}, in.initial_state, true);
  Tensor q = in.q.clone().set_requires_grad(true);
  LinearAttentionOutput recorded = chunk_simple_gla(q, in.k, in.v, in.g, {}, in.initial_state, true);
  clear_tape();
  EXPECT_EQ(relative_error(plain.o, recorded.o), 0.0);
  EXPECT_EQ(relative_error(plain.final_state, recorded.final_state), 0.0);
  LinearAttentionOutput recurrent = fused_recurrent_simple_gla(in.q, in.k, in.v, in.g, {}, in.initial_state, true);
  EXPECT_LT(relative_error(plain.o, recurrent.o), testing::kTol);
  EXPECT_LT(relative_error(plain.final_state, recurrent.final_state), testing::kTol);
}

TEST(SimpleGla, NoGradRecordsNothing) {
  Case c{1, 70, 2, 8, 8, Gate::mild, false, false, 4};
  testing::Inputs in = testing::make_inputs(c, c.V);
  in.q.set_requires_grad(true);
  NoGradGuard guard;
  LinearAttentionOutput out = chunk_simple_gla(in.q, in.k, in.v, in.g);
  EXPECT_EQ(tape_size(), 0u);
  EXPECT_FALSE(out.final_state.defined());
  EXPECT_FALSE(out.o.requires_grad());
}

TEST(SimpleGla, BadInputsThrowClearErrors) {
  Generator gen(1);
  Tensor q = Tensor::randn({1, 4, 2, 8}, gen), k = Tensor::randn({1, 4, 2, 8}, gen);
  Tensor v = Tensor::randn({1, 4, 2, 6}, gen), g = Tensor::full({1, 4, 2}, -0.1);
  using testing::expect_error;
  expect_error([&] { chunk_simple_gla(q, Tensor::randn({1, 4, 2, 7}, gen), v, g); },
               {"chunk_simple_gla", "k", "[1, 4, 2, 8]", "[1, 4, 2, 7]"});
  expect_error([&] { chunk_simple_gla(q, k, Tensor::randn({1, 5, 2, 6}, gen), g); },
               {"chunk_simple_gla", "v", "[1, 4, 2, 6]", "[1, 5, 2, 6]"});
  expect_error([&] { chunk_simple_gla(q.reshape({4, 2, 8}), k, v, g); }, {"chunk_simple_gla", "q", "rank 4"});
  expect_error([&] { chunk_simple_gla(q, k, v, Tensor::full({1, 4, 3}, -0.1)); },
               {"chunk_simple_gla", "g", "[1, 4, 2]", "[1, 4, 3]"});
  Tensor positive = g.clone();
  positive.set({0, 2, 1}, 0.5);
  expect_error([&] { chunk_simple_gla(q, k, v, positive); }, {"chunk_simple_gla", "g", "<= 0", "0.5", "[0, 2, 1]"});
  expect_error([&] { fused_recurrent_simple_gla(q, k, v, positive); }, {"fused_recurrent_simple_gla", "g", "0.5"});
  expect_error([&] { chunk_simple_gla(q, k, v, g, {}, Tensor::zeros({1, 2, 8, 7})); },
               {"chunk_simple_gla", "initial_state", "[1, 2, 8, 6]", "[1, 2, 8, 7]"});
  expect_error([&] { chunk_simple_gla(q, k, v, g, {}, {}, false, 0); }, {"chunk_simple_gla", "chunk_size", "0"});
  expect_error([&] { chunk_simple_gla(q.to(DType::f64), k, v, g); }, {"chunk_simple_gla", "q", "f32", "f64"});
  Tensor wide = Tensor::randn({1, 2, 1, 300}, gen);
  expect_error([&] { chunk_simple_gla(wide, wide, Tensor::randn({1, 2, 1, 4}, gen), Tensor::full({1, 2, 1}, -0.1)); },
               {"chunk_simple_gla", "K", "1..256", "300"});
  expect_error([&] { chunk_simple_gla(q, k, v, Tensor()); }, {"chunk_simple_gla", "g", "undefined"});
  Tensor state = Tensor::zeros({1, 2, 8, 6});
  expect_error([&] { recurrent_step_simple_gla(q, k, v, Tensor::full({1, 2}, -0.1), 1.0f, state); },
               {"recurrent_step_simple_gla", "q_t", "rank 3"});
  Tensor q_t = Tensor::randn({1, 2, 8}, gen), v_t = Tensor::randn({1, 2, 6}, gen);
  expect_error([&] { recurrent_step_simple_gla(q_t, q_t, v_t, Tensor::full({1, 2}, 0.1), 1.0f, state); },
               {"recurrent_step_simple_gla", "g_t", "<= 0"});
}

}  // namespace
}  // namespace lat
