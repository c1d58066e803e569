// chunk_kda and fused_recurrent_kda against the float64 reference naive_kda: outputs, final
// states and every input gradient (q, k, v, g, beta, initial_state) with random upstream
// gradients on o and final_state; finite differences of the reference; per-channel decay
// regimes down to g = -20; packed sequences; recurrent_step_kda against fused_recurrent;
// bf16 tile products; errors. Letters as in include/lat/linear_attention.h.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/expect_error.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using testing::Case;
using testing::DeltaCase;
using testing::Gate;

// Seeded delta-rule inputs with g replaced by a per-key-channel gate [B, T, H, K] of the
// case's regime (zero: 0; mild: U(-0.1, -0.01); strong: -20; none: every channel of a token
// drawn from {0, -0.05, -20, U(-3, 0)} by channel index, so one chunk mixes all regimes).
testing::DeltaInputs make_kda_inputs(const DeltaCase& c) {
  testing::DeltaInputs in = testing::make_delta_inputs(c);
  const Case& b = c.base;
  Generator gen(b.seed * 31 + 5);
  const Shape shape{b.B, b.T, b.H, b.K};
  switch (b.gate) {
    case Gate::zero: in.base.g = Tensor::zeros(shape); break;
    case Gate::mild: in.base.g = Tensor::uniform(shape, gen, -0.1, -0.01); break;
    case Gate::strong: in.base.g = Tensor::full(shape, -20.0); break;
    case Gate::none: {
      in.base.g = Tensor::uniform(shape, gen, -3.0, 0.0);
      float* g = in.base.g.data<float>();
      for (int64_t i = 0; i < in.base.g.numel(); ++i) {
        const int64_t channel = i % b.K;
        if (channel % 4 == 0) g[i] = 0.0f;
        if (channel % 4 == 1) g[i] = -20.0f;
        if (channel % 4 == 2) g[i] = -0.05f;
      }
      break;
    }
  }
  return in;
}

testing::DeltaOp chunk_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    return chunk_kda(q, k, v, g, beta, {}, h0, true, c.l2norm_in_kernel, c.chunk_size);
  };
}
testing::DeltaOp recurrent_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    return fused_recurrent_kda(q, k, v, g, beta, {}, h0, true, c.l2norm_in_kernel);
  };
}
testing::DeltaOp naive_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    return naive_kda(q, k, v, g, beta, {}, h0, true, c.l2norm_in_kernel);
  };
}

// The sweep: T in {1, 2, 63, 64, 65, 200} x (K, V) in {(16, 16), (48, 80)} x the per-key
// regimes x with/without initial state, then K = V = 64, the in-kernel L2 norm, chunk sizes
// 16 and 32 with T not a multiple of them.
std::vector<DeltaCase> sweep() {
  std::vector<DeltaCase> cases;
  uint64_t seed = 1;
  for (const Case& c : testing::sweep_grid({Gate::none, Gate::mild, Gate::strong}, {Gate::none, Gate::mild}, seed))
    cases.push_back({c});
  cases.push_back({{1, 300, 1, 64, 64, Gate::none, true, false, seed++}});
  cases.push_back({{1, 1, 2, 16, 16, Gate::mild, true, false, seed++}, true});
  cases.push_back({{2, 65, 1, 16, 16, Gate::none, true, false, seed++}, true});
  cases.push_back({{1, 200, 2, 48, 80, Gate::zero, false, false, seed++}, true});
  cases.push_back({{1, 100, 2, 16, 24, Gate::none, true, false, seed++}, false, 16});
  cases.push_back({{1, 100, 1, 24, 16, Gate::mild, true, false, seed++}, true, 16});
  cases.push_back({{1, 77, 2, 32, 16, Gate::none, true, false, seed++}, true, 32});
  cases.push_back({{1, 70, 2, 1, 3, Gate::none, true, false, seed++}});  // the smallest K
  return cases;
}

class KdaSweep : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(KdaSweep, ChunkAndRecurrentMatchFloat64Reference) {
  const DeltaCase& c = GetParam();
  testing::DeltaInputs in = make_kda_inputs(c);
  testing::DeltaResult ref = testing::run_delta(naive_op(c), in, DType::f64);
  testing::expect_delta_close(testing::run_delta(chunk_op(c), in, DType::f32), ref, testing::kTol, "chunk");
  testing::expect_delta_close(testing::run_delta(recurrent_op(c), in, DType::f32), ref, testing::kTol,
                              "fused_recurrent");
}

INSTANTIATE_TEST_SUITE_P(Shapes, KdaSweep, ::testing::ValuesIn(sweep()), testing::delta_param_name);

// recurrent_step_kda token by token reproduces fused_recurrent (same f32 math).
TEST(Kda, RecurrentStepMatchesFusedRecurrent) {
  for (bool l2 : {false, true}) {
    SCOPED_TRACE(l2 ? "l2norm_in_kernel" : "plain");
    const DeltaCase c{{2, 70, 3, 12, 20, Gate::none, true, false, 41}, l2};
    testing::DeltaInputs in = make_kda_inputs(c);
    const testing::Inputs& b = in.base;
    const float scale = 0.4f;
    LinearAttentionOutput ref = fused_recurrent_kda(b.q, b.k, b.v, b.g, in.beta, scale, b.initial_state, true, l2);
    auto step = [&](const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t, const Tensor& beta_t,
                    Tensor& state) { return recurrent_step_kda(q_t, k_t, v_t, g_t, beta_t, scale, state, l2); };
    testing::expect_steps_match(c, in, ref, step);
  }
}

}  // namespace
}  // namespace lat
