// The linear-attention ops on CUDA (chunk_linear_attn, chunk_simple_gla, chunk_delta_rule,
// chunk_gated_delta_rule and the recurrent steps) against the CPU ops and the float64
// references: outputs, final states and every input gradient with random upstream
// gradients on o and final_state, over odd shapes (T = 1, 63, 65; K != V; K, V across the
// 64-wide tile edges up to 256), chunk sizes, gate regimes and with/without initial state.
// Seeds are fixed, so a failure reproduces; device buffers start as NaN under ctest
// (LAT_POISON=1). Skipped (GTEST_SKIP) when no CUDA device is visible.
#include <gtest/gtest.h>

#include <string>

#include "tests/expect_error.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using testing::Case;
using testing::DeltaCase;
using testing::Gate;

const Device kGpu = Device::cuda(0);

#define LAT_REQUIRE_CUDA()                                                                                   \
  do {                                                                                                       \
    if (cuda_device_count() == 0)                                                                            \
      GTEST_SKIP() << (cuda_built() ? "no CUDA device visible" : "lat was built without CUDA (LAT_CUDA=OFF)"); \
  } while (0)

/// The seed of every test's inputs.
constexpr uint64_t kSeed = 20240611;

Tensor to_gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : t; }
Tensor to_cpu(const Tensor& t) { return t.defined() ? t.to(Device::cpu()) : t; }

/// Runs `op` with its tensor arguments moved to the GPU and its results moved back (both
/// moves are tape ops, so gradients flow to the CPU leaves of the test helpers).
testing::Op on_gpu(const testing::Op& op) {
  return [op](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    LinearAttentionOutput out = op(to_gpu(q), to_gpu(k), to_gpu(v), to_gpu(g), to_gpu(h0));
    EXPECT_TRUE(out.o.device().is_cuda());
    return LinearAttentionOutput{to_cpu(out.o), to_cpu(out.final_state)};
  };
}

testing::DeltaOp on_gpu(const testing::DeltaOp& op) {
  return [op](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
              const Tensor& h0) {
    LinearAttentionOutput out = op(to_gpu(q), to_gpu(k), to_gpu(v), to_gpu(g), to_gpu(beta), to_gpu(h0));
    EXPECT_TRUE(out.o.device().is_cuda());
    return LinearAttentionOutput{to_cpu(out.o), to_cpu(out.final_state)};
  };
}

// ---- chunk_simple_gla and chunk_linear_attn ------------------------------------------------

struct DecayCase {
  Case shape;
  bool linear_attn = false;  // chunk_linear_attn (no gate) instead of chunk_simple_gla
  bool normalize = false;
  int chunk_size = 64;
};

std::string decay_case_name(const ::testing::TestParamInfo<DecayCase>& info) {
  const DecayCase& c = info.param;
  return std::string(c.linear_attn ? "linear_attn_" : "simple_gla_") + testing::case_name(c.shape) +
         (c.normalize ? "_norm" : "") + "_C" + std::to_string(c.chunk_size);
}

std::vector<DecayCase> decay_sweep() {
  std::vector<DecayCase> cases;
  for (int64_t T : {1, 63, 64, 65, 200})
    for (auto [K, V] : {std::pair<int64_t, int64_t>{16, 16}, {48, 80}})
      for (Gate gate : {Gate::zero, Gate::mild, Gate::strong})
        cases.push_back({{2, T, 2, K, V, gate, T != 64, false, 0}});
  cases.push_back({{1, 130, 2, 128, 128, Gate::mild, true, false, 0}});
  cases.push_back({{1, 70, 1, 256, 200, Gate::strong, true, false, 0}});
  cases.push_back({{1, 100, 2, 130, 70, Gate::mild, false, false, 0}, false, false, 16});
  cases.push_back({{1, 45, 1, 24, 40, Gate::mild, true, false, 0}, false, false, 1});
  for (bool normalize : {false, true})
    for (auto [K, V] : {std::pair<int64_t, int64_t>{16, 16}, {48, 64}, {64, 127}})
      cases.push_back({{2, 97, 2, K, V, Gate::none, true, normalize, 0}, true, normalize});
  cases.push_back({{1, 65, 1, 32, 20, Gate::none, true, true, 0}, true, true, 32});
  return cases;
}

class CudaDecaySweep : public ::testing::TestWithParam<DecayCase> {};

TEST_P(CudaDecaySweep, MatchesCpuAndFloat64Reference) {
  LAT_REQUIRE_CUDA();
  DecayCase c = GetParam();
  c.shape.seed = kSeed;
  c.shape.positive = c.normalize;  // the normalizer runs on feature-mapped (positive) q, k
  const int64_t state_v = c.normalize ? c.shape.V + 1 : c.shape.V;
  const testing::Inputs in = testing::make_inputs(c.shape, state_v);
  testing::Op chunk, naive;
  if (c.linear_attn) {
    chunk = testing::linear_attn_chunk(c.normalize, c.chunk_size);
    naive = testing::linear_attn_naive(c.normalize);
  } else {
    chunk = testing::simple_gla_chunk(c.chunk_size);
    naive = testing::simple_gla_naive();
  }
  const testing::Result ref = testing::run(naive, in, DType::f64);
  const testing::Result gpu = testing::run(on_gpu(chunk), in, DType::f32);
  {
    SCOPED_TRACE("cuda vs float64 reference");
    testing::expect_close(gpu, ref, testing::kTol);
  }
  {
    SCOPED_TRACE("cuda vs cpu");
    testing::expect_close(gpu, testing::run(chunk, in, DType::f32), testing::kTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaDecaySweep, ::testing::ValuesIn(decay_sweep()), decay_case_name);

// ---- chunk_delta_rule and chunk_gated_delta_rule ------------------------------------------

struct GdnCase {
  DeltaCase c;
  bool gated = true;
};

std::string gdn_case_name(const ::testing::TestParamInfo<GdnCase>& info) {
  return std::string(info.param.gated ? "gated_" : "delta_") + testing::delta_case_name(info.param.c);
}

std::vector<GdnCase> gdn_sweep() {
  std::vector<GdnCase> cases;
  for (int64_t T : {1, 63, 65, 200})
    for (auto [K, V] : {std::pair<int64_t, int64_t>{16, 16}, {48, 80}})
      for (Gate gate : {Gate::zero, Gate::mild, Gate::strong}) cases.push_back({{{2, T, 2, K, V, gate, T != 63}}});
  cases.push_back({{{1, 130, 2, 128, 128, Gate::mild, true}, true}});
  cases.push_back({{{1, 70, 1, 256, 96, Gate::strong, true}, true}});
  cases.push_back({{{1, 100, 2, 16, 24, Gate::mild, true}, false, 16}});
  cases.push_back({{{1, 100, 1, 24, 16, Gate::strong, true}, true, 32}});
  cases.push_back({{{2, 65, 1, 130, 70, Gate::mild, false}, true}});
  for (bool l2 : {false, true}) {
    cases.push_back({{{2, 90, 2, 16, 24, Gate::none, true}, l2}, false});
    cases.push_back({{{1, 129, 1, 64, 65, Gate::none, false}, l2}, false});
  }
  return cases;
}

class CudaGdnSweep : public ::testing::TestWithParam<GdnCase> {};

TEST_P(CudaGdnSweep, MatchesCpuAndFloat64Reference) {
  LAT_REQUIRE_CUDA();
  GdnCase gc = GetParam();
  gc.c.base.seed = kSeed;
  const DeltaCase c = gc.c;
  const testing::DeltaInputs in = testing::make_delta_inputs(c);
  testing::DeltaOp chunk;
  if (gc.gated) {
    chunk = [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                const Tensor& h0) {
      return chunk_gated_delta_rule(q, k, v, g, beta, {}, h0, true, c.l2norm_in_kernel, c.chunk_size);
    };
  } else {
    chunk = [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&, const Tensor& beta,
                const Tensor& h0) {
      return chunk_delta_rule(q, k, v, beta, {}, h0, true, c.l2norm_in_kernel, c.chunk_size);
    };
  }
  const testing::DeltaOp naive = [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                     const Tensor& beta, const Tensor& h0) {
    return naive_gated_delta_rule(q, k, v, g, beta, {}, h0, true, c.l2norm_in_kernel);
  };
  const testing::DeltaResult ref = testing::run_delta(naive, in, DType::f64);
  const testing::DeltaResult gpu = testing::run_delta(on_gpu(chunk), in, DType::f32);
  testing::expect_delta_close(gpu, ref, testing::kTol, "cuda");
  testing::expect_delta_close(gpu, testing::run_delta(chunk, in, DType::f32), testing::kTol, "cuda vs cpu");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGdnSweep, ::testing::ValuesIn(gdn_sweep()), gdn_case_name);

// ---- long sequences with strong decay ---------------------------------------------------------

TEST(CudaLinearAttention, StrongDecayOverLongSequencesStaysFinite) {
  LAT_REQUIRE_CUDA();
  const Case shape{1, 8192, 2, 32, 32, Gate::strong, true, false, kSeed};
  const testing::Inputs in = testing::make_inputs(shape, shape.V);
  const testing::Op gla = testing::simple_gla_chunk();
  const testing::Result gpu = testing::run(on_gpu(gla), in, DType::f32);
  for (const Tensor* t : {&gpu.o, &gpu.final_state, &gpu.dq, &gpu.dk, &gpu.dv, &gpu.dg, &gpu.d_initial_state})
    EXPECT_TRUE(testing::all_finite(*t));
  testing::expect_close(gpu, testing::run(gla, in, DType::f32), testing::kTol);

  const DeltaCase dc{{1, 4096, 2, 32, 32, Gate::strong, true, false, kSeed}, true};
  const testing::DeltaInputs din = testing::make_delta_inputs(dc);
  const testing::DeltaOp gdn = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                  const Tensor& beta, const Tensor& h0) {
    return chunk_gated_delta_rule(q, k, v, g, beta, {}, h0, true, true);
  };
  const testing::DeltaResult dgpu = testing::run_delta(on_gpu(gdn), din, DType::f32);
  EXPECT_TRUE(testing::all_finite(dgpu.base.dg));
  EXPECT_TRUE(testing::all_finite(dgpu.dbeta));
  testing::expect_delta_close(dgpu, testing::run_delta(gdn, din, DType::f32), testing::kTol, "long gdn cuda vs cpu");
}

// ---- the recurrent steps used for decoding -------------------------------------------------------

TEST(CudaLinearAttention, RecurrentStepsMatchCpu) {
  LAT_REQUIRE_CUDA();
  Generator gen(kSeed);
  const int64_t B = 2, H = 3, K = 40, V = 72;
  for (int kind = 0; kind < 6; ++kind) {
    SCOPED_TRACE("kind " + std::to_string(kind));
    const bool normalize = kind == 1, delta = kind >= 3, l2 = kind == 5;
    const int64_t Vs = normalize ? V + 1 : V;
    Tensor state_cpu = Tensor::uniform({B, H, K, Vs}, gen, 0.0, 1.0);
    Tensor state_gpu = state_cpu.to(kGpu);
    for (int step = 0; step < 5; ++step) {
      Tensor q = Tensor::uniform({B, H, K}, gen, 0.1, 1.0), k = Tensor::uniform({B, H, K}, gen, 0.1, 1.0);
      if (delta && !l2) k = k / sqrt(sum(k * k, -1, true));
      Tensor v = Tensor::randn({B, H, V}, gen), g = Tensor::uniform({B, H}, gen, -0.5, -0.01);
      Tensor beta = Tensor::uniform({B, H}, gen, 0.05, 0.95);
      Tensor o_cpu, o_gpu;
      switch (kind) {
        case 0:
        case 1:
          o_cpu = recurrent_step_linear_attn(q, k, v, 0.3f, normalize, state_cpu);
          o_gpu = recurrent_step_linear_attn(q.to(kGpu), k.to(kGpu), v.to(kGpu), 0.3f, normalize, state_gpu);
          break;
        case 2:
          o_cpu = recurrent_step_simple_gla(q, k, v, g, 0.3f, state_cpu);
          o_gpu = recurrent_step_simple_gla(q.to(kGpu), k.to(kGpu), v.to(kGpu), g.to(kGpu), 0.3f, state_gpu);
          break;
        case 3:
          o_cpu = recurrent_step_delta_rule(q, k, v, beta, 0.3f, state_cpu);
          o_gpu = recurrent_step_delta_rule(q.to(kGpu), k.to(kGpu), v.to(kGpu), beta.to(kGpu), 0.3f, state_gpu);
          break;
        default:
          o_cpu = recurrent_step_gated_delta_rule(q, k, v, g, beta, 0.3f, state_cpu, l2);
          o_gpu = recurrent_step_gated_delta_rule(q.to(kGpu), k.to(kGpu), v.to(kGpu), g.to(kGpu), beta.to(kGpu),
                                                  0.3f, state_gpu, l2);
      }
      EXPECT_LT(relative_error(o_gpu.to(Device::cpu()), o_cpu), 1e-5);
    }
    EXPECT_LT(relative_error(state_gpu.to(Device::cpu()), state_cpu), 1e-5);
  }
}

TEST(CudaLinearAttention, UnsupportedChunkSizeIsAClearError) {
  LAT_REQUIRE_CUDA();
  Tensor x = Tensor::zeros({1, 4, 1, 8}, DType::f32, kGpu), g = Tensor::zeros({1, 4, 1}, DType::f32, kGpu);
  testing::expect_error([&] { chunk_simple_gla(x, x, x, g, {}, {}, false, 128); },
                        {"chunk_simple_gla", "chunk_size", "1..64", "128"});
}

}  // namespace
}  // namespace lat
