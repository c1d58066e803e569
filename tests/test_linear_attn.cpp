// chunk_linear_attn and fused_recurrent_linear_attn, with and without Katharopoulos'
// normalizer, against the float64 reference naive_linear_attn: outputs, final states
// (with the normalizer [B, H, K, V + 1], z last) and every input gradient with random
// upstream gradients on o and final_state; finite differences of the reference;
// chaining; errors. Letters as in include/lat/linear_attention.h.
#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using testing::Case;
using testing::Gate;

struct LinearCase {
  Case shape;
  bool normalize = false;
};

std::string linear_case_name(const LinearCase& c) {
  return testing::case_name(c.shape) + (c.normalize ? "_norm" : "");
}

// Every T in {1, 2, 63, 64, 65, 200} with (16,16) and (48,80), with/without initial
// state and normalizer; (64,64), (128,128) and T = 1000 on a subset. The normalizer
// runs on positive (feature-mapped) q, k and state, as after elu+1. Not normalized with
// T = 1 and no initial state: there o = v (q.k) / (q.k + 1e-6), so dq is 1e-6 of the
// other gradients, below float32 resolution (NormalizedSingleTokenReturnsValue covers it).
std::vector<LinearCase> sweep() {
  std::vector<LinearCase> cases;
  uint64_t seed = 1;
  for (int64_t T : {1, 2, 63, 64, 65, 200})
    for (auto [K, V] : {std::pair<int64_t, int64_t>{16, 16}, {48, 80}})
      for (bool normalize : {false, true})
        for (bool h0 : {false, true})
          if (!(normalize && T == 1 && !h0))
            cases.push_back({{2, T, 2, K, V, Gate::none, h0, normalize, seed++}, normalize});
  for (int64_t T : {65, 200}) cases.push_back({{1, T, 2, 64, 64, Gate::none, true, true, seed++}, true});
  cases.push_back({{1, 1000, 1, 64, 64, Gate::none, true, false, seed++}, false});
  cases.push_back({{1, 1000, 1, 48, 80, Gate::none, false, true, seed++}, true});
  // More chunks than one kernel block (32), with blocks cutting through a (b, h).
  cases.push_back({{2, 700, 2, 16, 16, Gate::none, true, true, seed++}, true});
  cases.push_back({{1, 64, 1, 128, 128, Gate::none, true, false, seed++}, false});
  cases.push_back({{1, 200, 1, 128, 128, Gate::none, true, true, seed++}, true});
  return cases;
}

class LinearAttnSweep : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearAttnSweep, ChunkAndRecurrentMatchFloat64Reference) {
  const LinearCase& c = GetParam();
  int64_t state_v = c.normalize ? c.shape.V + 1 : c.shape.V;
  testing::Inputs in = testing::make_inputs(c.shape, state_v);
  testing::Result ref = testing::run(testing::linear_attn_naive(c.normalize), in, DType::f64);
  {
    SCOPED_TRACE("chunk_linear_attn");
    testing::expect_close(testing::run(testing::linear_attn_chunk(c.normalize), in, DType::f32), ref, testing::kTol);
  }
  {
    SCOPED_TRACE("fused_recurrent_linear_attn");
    testing::expect_close(testing::run(testing::linear_attn_recurrent(c.normalize), in, DType::f32), ref,
                          testing::kTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearAttnSweep, ::testing::ValuesIn(sweep()),
                         [](const ::testing::TestParamInfo<LinearCase>& info) { return linear_case_name(info.param); });

TEST(LinearAttn, OddChunkSizesMatchReference) {
  for (bool normalize : {false, true}) {
    Case c{1, 45, 2, 6, 10, Gate::none, true, normalize, 7};
    testing::Inputs in = testing::make_inputs(c, normalize ? c.V + 1 : c.V);
    testing::Result ref = testing::run(testing::linear_attn_naive(normalize), in, DType::f64);
    for (int chunk_size : {1, 5, 16, 45, 100}) {
      SCOPED_TRACE(std::to_string(chunk_size) + (normalize ? " normalized" : ""));
      testing::expect_close(testing::run(testing::linear_attn_chunk(normalize, chunk_size), in, DType::f32), ref,
                            testing::kTol);
    }
  }
}

// The reference's own gradients against central differences (float64), both forms.
TEST(LinearAttn, ReferenceGradCheck) {
  for (bool normalize : {false, true}) {
    SCOPED_TRACE(normalize ? "normalized" : "plain");
    Generator gen(8);
    Tensor q = Tensor::uniform({1, 4, 2, 3}, gen, 0.1, 1.0, DType::f64).set_requires_grad(true);
    Tensor k = Tensor::uniform({1, 4, 2, 3}, gen, 0.1, 1.0, DType::f64).set_requires_grad(true);
    Tensor v = Tensor::randn({1, 4, 2, 2}, gen, DType::f64).set_requires_grad(true);
    Tensor h0 = Tensor::uniform({1, 2, 3, normalize ? 3 : 2}, gen, 0.0, 1.0, DType::f64).set_requires_grad(true);
    auto f = [normalize](const std::vector<Tensor>& x) {
      LinearAttentionOutput out = naive_linear_attn(x[0], x[1], x[2], {}, normalize, x[3], true);
      return concat({out.o.reshape({-1}), out.final_state.reshape({-1})}, 0);
    };
    GradCheckResult result = grad_check(f, {q, k, v, h0});
    ASSERT_EQ(result.rel_error.size(), 4u);
    EXPECT_LT(result.max_rel_error, 1e-6);
  }
}

// The normalizer's known answer: one token, no initial state: o = v exactly up to eps,
// since S = k v^T, z = k and o = scale (q.k) v / (scale q.k + 1e-6).
TEST(LinearAttn, NormalizedSingleTokenReturnsValue) {
  Tensor q = Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {1, 1, 1, 2});
  Tensor k = Tensor::from_vector(std::vector<float>{3.0f, 1.0f}, {1, 1, 1, 2});
  Tensor v = Tensor::from_vector(std::vector<float>{0.5f, -2.0f, 4.0f}, {1, 1, 1, 3});
  for (const Tensor& o : {chunk_linear_attn(q, k, v, 1.0f, true).o, fused_recurrent_linear_attn(q, k, v, 1.0f, true).o}) {
    std::vector<float> got = o.to_vector();
    double factor = 5.0 / (5.0 + 1e-6);
    EXPECT_NEAR(got[0], 0.5 * factor, 1e-6);
    EXPECT_NEAR(got[1], -2.0 * factor, 1e-6);
    EXPECT_NEAR(got[2], 4.0 * factor, 1e-6);
  }
}

// T tokens in one call equal two calls of T/2 chained through the final state (with
// the normalizer the z column chains too): outputs, final state and all gradients.
TEST(LinearAttn, ChainingMatchesOneCall) {
  for (bool normalize : {false, true}) {
    SCOPED_TRACE(normalize ? "normalized" : "plain");
    Case c{2, 150, 2, 12, 20, Gate::none, true, normalize, 3};
    testing::Inputs in = testing::make_inputs(c, normalize ? c.V + 1 : c.V);
    auto chained = [normalize](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&, const Tensor& h0) {
      int64_t half = q.size(1) / 2, T = q.size(1);
      LinearAttentionOutput a = chunk_linear_attn(slice(q, 1, 0, half), slice(k, 1, 0, half), slice(v, 1, 0, half),
                                                  {}, normalize, h0, true);
      LinearAttentionOutput b = chunk_linear_attn(slice(q, 1, half, T), slice(k, 1, half, T), slice(v, 1, half, T),
                                                  {}, normalize, a.final_state, true);
      return LinearAttentionOutput{concat({a.o, b.o}, 1), b.final_state};
    };
    testing::expect_close(testing::run(chained, in, DType::f32),
                          testing::run(testing::linear_attn_chunk(normalize), in, DType::f32), 1e-5);
  }
}

TEST(LinearAttn, BadInputsThrowClearErrors) {
  Generator gen(2);
  Tensor q = Tensor::randn({2, 3, 1, 4}, gen), k = Tensor::randn({2, 3, 1, 4}, gen);
  Tensor v = Tensor::randn({2, 3, 1, 5}, gen);
  using testing::expect_error;
  expect_error([&] { chunk_linear_attn(q, Tensor::randn({2, 3, 2, 4}, gen), v); },
               {"chunk_linear_attn", "k", "[2, 3, 1, 4]", "[2, 3, 2, 4]"});
  expect_error([&] { chunk_linear_attn(q, k, Tensor::randn({2, 3, 5}, gen)); }, {"chunk_linear_attn", "v", "rank 4"});
  expect_error([&] { chunk_linear_attn(q, k, v, {}, true, Tensor::zeros({2, 1, 4, 5})); },
               {"chunk_linear_attn", "initial_state", "[2, 1, 4, 6]", "V + 1", "[2, 1, 4, 5]"});
  expect_error([&] { fused_recurrent_linear_attn(q, k, v, {}, false, Tensor::zeros({2, 1, 4, 6})); },
               {"fused_recurrent_linear_attn", "initial_state", "[2, 1, 4, 5]", "[2, 1, 4, 6]"});
  expect_error([&] { chunk_linear_attn(q, k, Tensor::randn({2, 3, 1, 257}, gen)); },
               {"chunk_linear_attn", "V", "1..256", "257"});
  expect_error([&] { chunk_linear_attn(q, k, v.to(DType::f64)); }, {"chunk_linear_attn", "v", "f32", "f64"});
  Tensor state = Tensor::zeros({2, 1, 4, 5});
  expect_error([&] { recurrent_step_linear_attn(q.reshape({2, 3, 4}), q.reshape({2, 3, 4}), v.reshape({2, 3, 5}), 1.0f,
                                                true, state); },
               {"recurrent_step_linear_attn", "state", "[2, 3, 4, 6]", "[2, 1, 4, 5]"});
}

}  // namespace
}  // namespace lat
