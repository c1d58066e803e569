// chunk_kda and fused_recurrent_kda against the float64 reference naive_kda: outputs, final
// states and every input gradient (q, k, v, g, beta, initial_state) with random upstream
// gradients on o and final_state; finite differences of the reference; per-channel decay
// regimes down to g = -20; packed sequences; recurrent_step_kda against fused_recurrent;
// bf16 tile products; the CUDA kernels against the CPU ones and the reference (skipped
// without a device); errors. Letters as in include/lat/linear_attention.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "tests/expect_error.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using testing::Case;
using testing::DeltaCase;
using testing::Gate;

// The ops' flags, named at the call sites.
constexpr bool kFinalState = true, kNoFinalState = false, kNoL2Norm = false;

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
    return chunk_kda(q, k, v, g, beta, {}, h0, kFinalState, c.l2norm_in_kernel, c.chunk_size);
  };
}
testing::DeltaOp recurrent_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    return fused_recurrent_kda(q, k, v, g, beta, {}, h0, kFinalState, c.l2norm_in_kernel);
  };
}
testing::DeltaOp naive_op(const DeltaCase& c) {
  return [c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    return naive_kda(q, k, v, g, beta, {}, h0, kFinalState, c.l2norm_in_kernel);
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

// delta_param_name with the mixed per-channel regime (Gate::none here) named as such.
std::string kda_param_name(const ::testing::TestParamInfo<DeltaCase>& info) {
  std::string name = testing::delta_param_name(info);
  const std::string none = testing::gate_name(Gate::none);
  if (const size_t at = name.find(none); at != std::string::npos) name.replace(at, none.size(), "gmixed");
  return name;
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

INSTANTIATE_TEST_SUITE_P(Shapes, KdaSweep, ::testing::ValuesIn(sweep()), kda_param_name);

// Finite differences of the float64 reference in every input, with and without the
// in-kernel L2 norm (g away from 0 and beta inside (0, 1), so the +-eps probes stay valid).
TEST(Kda, ReferenceMatchesFiniteDifferences) {
  for (bool l2 : {false, true}) {
    SCOPED_TRACE(l2 ? "l2norm_in_kernel" : "plain");
    Generator gen(5);
    const int64_t B = 1, T = 5, H = 2, K = 3, V = 4;
    Tensor q = Tensor::randn({B, T, H, K}, gen, DType::f64), k = Tensor::randn({B, T, H, K}, gen, DType::f64);
    if (!l2) k = k * rsqrt(sum(k * k, -1, true));
    Tensor v = Tensor::randn({B, T, H, V}, gen, DType::f64);
    Tensor g = Tensor::uniform({B, T, H, K}, gen, -2.0, -0.05, DType::f64);
    Tensor beta = Tensor::uniform({B, T, H}, gen, 0.1, 0.9, DType::f64);
    Tensor h0 = Tensor::randn({B, H, K, V}, gen, DType::f64);
    std::vector<Tensor> inputs{q, k, v, g, beta, h0};
    for (Tensor& t : inputs) t.set_requires_grad(true);
    auto f = [l2](const std::vector<Tensor>& x) {
      LinearAttentionOutput out = naive_kda(x[0], x[1], x[2], x[3], x[4], 0.7, x[5], kFinalState, l2);
      return concat({out.o.reshape({-1}), out.final_state.reshape({-1})}, 0);
    };
    GradCheckResult r = grad_check(f, inputs);
    ASSERT_EQ(r.rel_error.size(), inputs.size());
    for (size_t i = 0; i < r.rel_error.size(); ++i) EXPECT_LT(r.rel_error[i], 1e-6) << "input " << i;
  }
}

// With one channel per key decaying by g = -20 every token and the next not at all (and the
// others mild), in every chunk: outputs and gradients finite and as close to the reference
// as in the sweep, and dg as accurate as dq and dk (within 10x of the larger), whose
// per-channel cumsums a cancelling formula would lose.
TEST(Kda, MixedDecaysInOneChunkKeepDgAccurate) {
  for (int chunk_size : {16, 32, 64}) {
    SCOPED_TRACE(chunk_size);
    const DeltaCase c{{2, 150, 2, 32, 24, Gate::none, true, false, 61}, false, chunk_size};
    testing::DeltaInputs in = make_kda_inputs(c);
    testing::DeltaResult ref = testing::run_delta(naive_op(c), in, DType::f64);
    for (const testing::DeltaOp& op : {chunk_op(c), recurrent_op(c)}) {
      testing::DeltaResult got = testing::run_delta(op, in, DType::f32);
      const testing::Result& a = got.base;
      for (const Tensor& t : {a.o, a.final_state, a.dq, a.dk, a.dv, a.dg, got.dbeta, a.d_initial_state})
        EXPECT_TRUE(testing::all_finite(t));
      testing::expect_delta_close(got, ref, testing::kTol, "mixed_decays");
      const double dq = relative_error(a.dq, ref.base.dq), dk = relative_error(a.dk, ref.base.dk);
      EXPECT_LE(relative_error(a.dg, ref.base.dg), 10.0 * std::max(dq, dk));
    }
  }
}

// g = -inf in some channels (a full reset of those rows of the state) is a valid log-decay.
TEST(Kda, InfiniteDecayResetsChannels) {
  const DeltaCase c{{1, 150, 2, 16, 16, Gate::mild, true, false, 55}};
  testing::DeltaInputs in = make_kda_inputs(c);
  for (int64_t t : {0, 5, 63, 64, 100, 149}) in.base.g.set({0, t, t % 2, t % 16}, -INFINITY);
  testing::DeltaResult ref = testing::run_delta(naive_op(c), in, DType::f64);
  testing::expect_delta_close(testing::run_delta(chunk_op(c), in, DType::f32), ref, testing::kTol, "chunk_reset");
  testing::expect_delta_close(testing::run_delta(recurrent_op(c), in, DType::f32), ref, testing::kTol,
                              "recurrent_reset");
}

// Packed sequences (cu_seqlens, boundaries inside chunks) equal one call per sequence from
// its own initial state: outputs, final states and every gradient.
TEST(Kda, PackedSequencesEqualSeparateCalls) {
  const std::vector<int64_t> lengths{5, 64, 70, 1, 33};
  std::vector<int64_t> offsets{0};
  for (int64_t L : lengths) offsets.push_back(offsets.back() + L);
  const int64_t N = static_cast<int64_t>(lengths.size()), T = offsets.back(), H = 2, K = 16, V = 24;
  testing::DeltaInputs in = make_kda_inputs({{1, T, H, K, V, Gate::none, true, false, 71}, false, 16});
  Generator gen(72);
  in.base.initial_state = Tensor::randn({N, H, K, V}, gen);
  in.base.d_final_state = Tensor::randn({N, H, K, V}, gen);
  const Tensor cu_seqlens = Tensor::from_vector(offsets, {N + 1});
  for (bool chunk : {true, false}) {
    SCOPED_TRACE(chunk ? "chunk" : "fused_recurrent");
    auto call = [chunk](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const Tensor& h0, const Tensor& cu) {
      if (chunk) return chunk_kda(q, k, v, g, beta, {}, h0, kFinalState, kNoL2Norm, 16, cu);
      return fused_recurrent_kda(q, k, v, g, beta, {}, h0, kFinalState, kNoL2Norm, cu);
    };
    auto packed = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                      const Tensor& h0) { return call(q, k, v, g, beta, h0, cu_seqlens); };
    auto separate = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const Tensor& h0) {
      std::vector<Tensor> o, ht;
      for (int64_t n = 0; n < N; ++n) {
        auto part = [&](const Tensor& x) { return slice(x, 1, offsets[n], offsets[n + 1]); };
        LinearAttentionOutput out =
            call(part(q), part(k), part(v), part(g), part(beta), slice(h0, 0, n, n + 1), Tensor());
        o.push_back(out.o);
        ht.push_back(out.final_state);
      }
      return LinearAttentionOutput{concat(o, 1), concat(ht, 0)};
    };
    testing::expect_delta_close(testing::run_delta(packed, in, DType::f32),
                                testing::run_delta(separate, in, DType::f32), 1e-5, "packed");
  }
}

// Under bf16 compute precision the chunk kernel's tile products take bf16 inputs: every
// tensor within 2u sqrt(max(K, V, 64)) of the float64 reference (test_bf16_chunk.cpp's
// normwise bound), dg within 10x of dq's, dk's and dv's errors, and bf16 really in use.
TEST(Kda, Bf16ChunkWithinTheBounds) {
  if (!bf16_supported(Device::cpu())) GTEST_SKIP() << "this CPU has no AVX512-BF16: bf16 runs in fp32";
  for (Gate gate : {Gate::none, Gate::mild, Gate::strong}) {
    const DeltaCase c{{2, 200, 2, 64, 64, gate, true, false, 81}};
    SCOPED_TRACE(testing::delta_case_name(c));
    testing::DeltaInputs in = make_kda_inputs(c);
    auto bf16 = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                    const Tensor& h0) {
      const PrecisionGuard guard(Precision::bf16);
      return chunk_kda(q, k, v, g, beta, {}, h0, kFinalState);
    };
    const testing::DeltaResult got = testing::run_delta(bf16, in, DType::f32);
    const testing::DeltaResult ref = testing::run_delta(naive_op(c), in, DType::f64);
    const double bound = 2.0 * 0x1p-8 * std::sqrt(64.0);
    auto err = [&](const char* name, const Tensor& a, const Tensor& b) {
      const double e = relative_error(a, b);
      EXPECT_LE(e, bound) << name;
      return e;
    };
    const testing::Result &a = got.base, &b = ref.base;
    const double o = err("o", a.o, b.o), dq = err("dq", a.dq, b.dq), dk = err("dk", a.dk, b.dk),
                 dv = err("dv", a.dv, b.dv), dg = err("dg", a.dg, b.dg);
    err("final_state", a.final_state, b.final_state);
    err("dbeta", got.dbeta, ref.dbeta);
    err("d_initial_state", a.d_initial_state, b.d_initial_state);
    EXPECT_LE(dg, 10.0 * std::max({dq, dk, dv}));
    EXPECT_GT(o, testing::kTol) << "an error of fp32's size: bf16 not in use";
  }
}

// recurrent_step_kda token by token reproduces fused_recurrent (same f32 math).
TEST(Kda, RecurrentStepMatchesFusedRecurrent) {
  for (bool l2 : {false, true}) {
    SCOPED_TRACE(l2 ? "l2norm_in_kernel" : "plain");
    const DeltaCase c{{2, 70, 3, 12, 20, Gate::none, true, false, 41}, l2};
    testing::DeltaInputs in = make_kda_inputs(c);
    const testing::Inputs& b = in.base;
    const float scale = 0.4f;
    LinearAttentionOutput ref = fused_recurrent_kda(b.q, b.k, b.v, b.g, in.beta, scale, b.initial_state, kFinalState, l2);
    auto step = [&](const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t, const Tensor& beta_t,
                    Tensor& state) { return recurrent_step_kda(q_t, k_t, v_t, g_t, beta_t, scale, state, l2); };
    testing::expect_steps_match(c, in, ref, step);
  }
}

// output_final_state = false changes nothing else, and one call equals two calls chained
// through final_state -> initial_state (outputs, final state and every gradient).
TEST(Kda, FinalStateOptionalAndChains) {
  const DeltaCase c{{2, 150, 2, 16, 24, Gate::none, true, false, 31}, false, 32};
  testing::DeltaInputs in = make_kda_inputs(c);
  const testing::Inputs& b = in.base;
  for (bool chunk : {true, false}) {
    SCOPED_TRACE(chunk ? "chunk" : "fused_recurrent");
    const testing::DeltaOp op = chunk ? chunk_op(c) : recurrent_op(c);
    auto without = [&](const Tensor& h0) {
      return chunk ? chunk_kda(b.q, b.k, b.v, b.g, in.beta, {}, h0, kNoFinalState, kNoL2Norm, 32)
                   : fused_recurrent_kda(b.q, b.k, b.v, b.g, in.beta, {}, h0, kNoFinalState);
    };
    LinearAttentionOutput alone = without(b.initial_state);
    EXPECT_FALSE(alone.final_state.defined());
    EXPECT_EQ(alone.o.to_vector<float>(), op(b.q, b.k, b.v, b.g, in.beta, b.initial_state).o.to_vector<float>());
    auto two_halves = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                          const Tensor& h0) {
      auto half = [](const Tensor& x, int64_t i) { return slice(x, 1, i * 75, (i + 1) * 75); };
      LinearAttentionOutput first = op(half(q, 0), half(k, 0), half(v, 0), half(g, 0), half(beta, 0), h0);
      LinearAttentionOutput second =
          op(half(q, 1), half(k, 1), half(v, 1), half(g, 1), half(beta, 1), first.final_state);
      return LinearAttentionOutput{concat({first.o, second.o}, 1), second.final_state};
    };
    testing::expect_delta_close(testing::run_delta(two_halves, in, DType::f32),
                                testing::run_delta(op, in, DType::f32), 1e-5, "chaining");
  }
}

// ---- CUDA (chunk_kda_cuda.cu, recurrent_cuda.cu): skipped without a device ---------------

#define LAT_REQUIRE_CUDA()                                                                                   \
  do {                                                                                                       \
    if (cuda_device_count() == 0)                                                                            \
      GTEST_SKIP() << (cuda_built() ? "no CUDA device visible" : "lat was built without CUDA (LAT_CUDA=OFF)"); \
  } while (0)

Tensor to_device(const Tensor& t, const Device& device) { return t.defined() ? t.to(device) : t; }

/// Runs `op` with its tensor arguments moved to the GPU and its results moved back (both
/// moves are tape ops, so the gradients reach the CPU leaves of run_delta).
testing::DeltaOp on_gpu(const testing::DeltaOp& op) {
  return [op](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
              const Tensor& h0) {
    const Device gpu = Device::cuda(0), cpu = Device::cpu();
    LinearAttentionOutput out = op(to_device(q, gpu), to_device(k, gpu), to_device(v, gpu), to_device(g, gpu),
                                   to_device(beta, gpu), to_device(h0, gpu));
    EXPECT_TRUE(out.o.device().is_cuda());
    return LinearAttentionOutput{to_device(out.o, cpu), to_device(out.final_state, cpu)};
  };
}

// Odd T (1, 63, 65, 200), K != V, K and V across 64 up to K = 256 (the CUDA limit), every
// per-key regime (the mixed one: channels at 0, -0.05, -20 and U(-3, 0) in one chunk), the
// in-kernel L2 norm, chunk sizes 16, 32 and 64.
std::vector<DeltaCase> cuda_sweep() {
  return {{{2, 1, 2, 16, 16, Gate::none, true, false, 101}},
          {{2, 63, 2, 16, 16, Gate::mild, false, false, 102}},
          {{2, 65, 2, 48, 80, Gate::strong, true, false, 103}},
          {{2, 200, 2, 48, 80, Gate::none, true, false, 104}},
          {{1, 130, 1, 96, 72, Gate::zero, true, false, 105}},
          {{1, 70, 1, 256, 40, Gate::none, true, false, 106}},
          {{2, 90, 2, 16, 24, Gate::none, true, false, 107}, true},
          {{1, 100, 2, 24, 16, Gate::mild, true, false, 108}, false, 16},
          {{1, 77, 2, 32, 16, Gate::none, false, false, 109}, true, 32}};
}

class CudaKdaSweep : public ::testing::TestWithParam<DeltaCase> {};

// chunk_kda and fused_recurrent_kda on CUDA: outputs, final states and all six gradients
// within the sweep's tolerance of the CPU ops and of the float64 reference.
TEST_P(CudaKdaSweep, MatchesCpuAndFloat64Reference) {
  LAT_REQUIRE_CUDA();
  const DeltaCase& c = GetParam();
  testing::DeltaInputs in = make_kda_inputs(c);
  const testing::DeltaResult ref = testing::run_delta(naive_op(c), in, DType::f64);
  for (bool chunk : {true, false}) {
    SCOPED_TRACE(chunk ? "chunk" : "fused_recurrent");
    const testing::DeltaOp op = chunk ? chunk_op(c) : recurrent_op(c);
    const testing::DeltaResult gpu = testing::run_delta(on_gpu(op), in, DType::f32);
    const std::string label = chunk ? "cuda chunk" : "cuda fused_recurrent";
    testing::expect_delta_close(gpu, ref, testing::kTol, label);
    testing::expect_delta_close(gpu, testing::run_delta(op, in, DType::f32), testing::kTol, label + " vs cpu");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaKdaSweep, ::testing::ValuesIn(cuda_sweep()), kda_param_name);

// One channel at g = -20 every token beside one at 0, in every chunk, and g = -inf resets:
// everything finite, as close to the reference as the CPU kernel, dg within 10x of dq, dk.
TEST(KdaCuda, MixedAndInfiniteDecaysKeepDgAccurate) {
  LAT_REQUIRE_CUDA();
  for (int chunk_size : {16, 64}) {
    SCOPED_TRACE(chunk_size);
    const DeltaCase c{{1, 150, 2, 32, 24, Gate::none, true, false, 61}, false, chunk_size};
    testing::DeltaInputs in = make_kda_inputs(c);
    for (int64_t t : {0, 63, 64, 149}) in.base.g.set({0, t, t % 2, 3}, -INFINITY);
    const testing::DeltaResult ref = testing::run_delta(naive_op(c), in, DType::f64);
    const testing::DeltaResult got = testing::run_delta(on_gpu(chunk_op(c)), in, DType::f32);
    const testing::Result& a = got.base;
    for (const Tensor& t : {a.o, a.final_state, a.dq, a.dk, a.dv, a.dg, got.dbeta, a.d_initial_state})
      EXPECT_TRUE(testing::all_finite(t));
    testing::expect_delta_close(got, ref, testing::kTol, "cuda mixed_decays");
    const double dq = relative_error(a.dq, ref.base.dq), dk = relative_error(a.dk, ref.base.dk);
    EXPECT_LE(relative_error(a.dg, ref.base.dg), 10.0 * std::max(dq, dk));
  }
}

// Packed sequences (cu_seqlens, boundaries inside chunks, one state per sequence) on CUDA
// equal the same call on the CPU: outputs, final states and every gradient.
TEST(KdaCuda, PackedSequencesMatchCpu) {
  LAT_REQUIRE_CUDA();
  const std::vector<int64_t> offsets{0, 5, 69, 70, 103};
  const int64_t N = 4, T = offsets.back(), H = 2, K = 16, V = 24;
  testing::DeltaInputs in = make_kda_inputs({{1, T, H, K, V, Gate::none, true, false, 73}});
  Generator gen(74);
  in.base.initial_state = Tensor::randn({N, H, K, V}, gen);
  in.base.d_final_state = Tensor::randn({N, H, K, V}, gen);
  const Tensor cu_seqlens = Tensor::from_vector(offsets, {N + 1});
  for (bool chunk : {true, false}) {
    SCOPED_TRACE(chunk ? "chunk" : "fused_recurrent");
    const testing::DeltaOp packed = [chunk, &cu_seqlens](const Tensor& q, const Tensor& k, const Tensor& v,
                                                         const Tensor& g, const Tensor& beta, const Tensor& h0) {
      if (chunk) return chunk_kda(q, k, v, g, beta, {}, h0, kFinalState, kNoL2Norm, 16, cu_seqlens);
      return fused_recurrent_kda(q, k, v, g, beta, {}, h0, kFinalState, kNoL2Norm, cu_seqlens);
    };
    testing::expect_delta_close(testing::run_delta(on_gpu(packed), in, DType::f32),
                                testing::run_delta(packed, in, DType::f32), testing::kTol, "cuda packed");
  }
}

// recurrent_step_kda on CUDA equals the CPU step token by token (outputs and the state in
// place), with and without the in-kernel L2 norm.
TEST(KdaCuda, RecurrentStepMatchesCpu) {
  LAT_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  for (bool l2 : {false, true}) {
    SCOPED_TRACE(l2 ? "l2norm_in_kernel" : "plain");
    const DeltaCase c{{2, 12, 3, 40, 72, Gate::none, true, false, 43}, l2};
    testing::DeltaInputs in = make_kda_inputs(c);
    const testing::Inputs& b = in.base;
    Tensor state_cpu = b.initial_state.clone(), state_gpu = b.initial_state.to(gpu);
    for (int64_t t = 0; t < c.base.T; ++t) {
      const Tensor q = testing::token_at(b.q, t), k = testing::token_at(b.k, t), v = testing::token_at(b.v, t);
      const Tensor g = testing::token_at(b.g, t), beta = testing::token_at(in.beta, t);
      const Tensor o_cpu = recurrent_step_kda(q, k, v, g, beta, 0.3f, state_cpu, l2);
      const Tensor o_gpu =
          recurrent_step_kda(q.to(gpu), k.to(gpu), v.to(gpu), g.to(gpu), beta.to(gpu), 0.3f, state_gpu, l2);
      EXPECT_LT(relative_error(o_gpu.to(Device::cpu()), o_cpu), 1e-5) << "token " << t;
    }
    EXPECT_LT(relative_error(state_gpu.to(Device::cpu()), state_cpu), 1e-5);
  }
}

// What the CUDA kernels cannot run is refused with a one-line error before any kernel runs.
TEST(KdaCuda, UnsupportedShapesAreClearErrors) {
  LAT_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  using testing::expect_error;
  Tensor wide = Tensor::zeros({1, 4, 1, 257}, DType::f32, gpu), x = Tensor::zeros({1, 4, 1, 8}, DType::f32, gpu);
  Tensor beta = Tensor::zeros({1, 4, 1}, DType::f32, gpu);
  expect_error([&] { chunk_kda(wide, wide, x, wide, beta); }, {"chunk_kda", "q", "K in 1..256", "K=257"});
  expect_error([&] { fused_recurrent_kda(x, x, wide, x, beta); },
               {"fused_recurrent_kda", "v", "V in 1..256", "V=257"});
  expect_error([&] { chunk_kda(x, x, x, x, beta, {}, {}, kNoFinalState, kNoL2Norm, 128); },
               {"chunk_kda", "chunk_size", "1..64", "128"});
  Tensor state = Tensor::zeros({1, 1, 8, 8}, DType::f32, gpu), q_t = Tensor::zeros({1, 1, 8}, DType::f32, gpu);
  const Tensor beta_t = Tensor::zeros({1, 1}, DType::f32, gpu), g_t_on_cpu = Tensor::zeros({1, 1, 8});
  expect_error([&] { recurrent_step_kda(q_t, q_t, q_t, g_t_on_cpu, beta_t, 1.0f, state); },
               {"recurrent_step_kda", "g_t", "expected device cuda:0 (as q_t)", "got cpu"});
}

TEST(Kda, BadInputsThrowClearErrors) {
  const DeltaCase c{{1, 4, 2, 8, 6, Gate::mild, true, false, 3}};
  testing::DeltaInputs in = make_kda_inputs(c);
  const testing::Inputs& b = in.base;
  using testing::expect_error;
  for (const char* name : {"chunk_kda", "fused_recurrent_kda"}) {
    SCOPED_TRACE(name);
    const bool chunk = std::string(name) == "chunk_kda";
    auto call = [chunk](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const Tensor& h0) {
      if (chunk) return chunk_kda(q, k, v, g, beta, {}, h0, kFinalState);
      return fused_recurrent_kda(q, k, v, g, beta, {}, h0, kFinalState);
    };
    Generator gen(2);
    expect_error([&] { call(b.q, Tensor::randn({1, 4, 2, 7}, gen), b.v, b.g, in.beta, b.initial_state); },
                 {name, "k", "expected shape [1, 4, 2, 8]", "got [1, 4, 2, 7]"});
    expect_error([&] { call(b.q, b.k, b.v, Tensor::zeros({1, 4, 2}), in.beta, b.initial_state); },
                 {name, "g", "expected shape [1, 4, 2, 8] [B, T, H, K]", "got [1, 4, 2]"});
    expect_error([&] { call(b.q, b.k, b.v, Tensor(), in.beta, b.initial_state); }, {name, "g", "undefined"});
    Tensor positive = b.g.clone();
    positive.set({0, 2, 1, 5}, 0.5);
    expect_error([&] { call(b.q, b.k, b.v, positive, in.beta, b.initial_state); },
                 {name, "g", "<= 0", "0.5", "[0, 2, 1, 5]"});
    expect_error([&] { call(b.q, b.k, b.v, b.g.to(DType::f64), in.beta, b.initial_state); },
                 {name, "g", "f32 (as q)"});
    expect_error([&] { call(b.q, b.k, b.v, b.g, Tensor::full({1, 4, 2}, 1.5), b.initial_state); },
                 {name, "beta", "[0, 1]", "1.5"});
    expect_error([&] { call(b.q, b.k, b.v, b.g, in.beta, Tensor::zeros({1, 2, 6, 8})); },
                 {name, "initial_state", "[1, 2, 8, 6]", "got [1, 2, 6, 8]"});
  }
  expect_error([&] { chunk_kda(b.q, b.k, b.v, b.g, in.beta, {}, {}, kNoFinalState, kNoL2Norm, 0); },
               {"chunk_kda", "chunk_size", "> 0", "got 0"});
  Tensor state = Tensor::zeros({1, 2, 8, 6});
  Tensor q_t = Tensor::zeros({1, 2, 8}), v_t = Tensor::zeros({1, 2, 6}), beta_t = Tensor::zeros({1, 2});
  expect_error([&] { recurrent_step_kda(q_t, q_t, v_t, Tensor::full({1, 2, 8}, 0.1), beta_t, 1.0f, state); },
               {"recurrent_step_kda", "g_t", "<= 0"});
  expect_error([&] { recurrent_step_kda(q_t, q_t, v_t, Tensor::zeros({1, 2}), beta_t, 1.0f, state); },
               {"recurrent_step_kda", "g_t", "[1, 2, 8] [B, H, K]", "got [1, 2]"});
  expect_error([&] { recurrent_step_kda(q_t, q_t, v_t, q_t, Tensor::zeros({2}), 1.0f, state); },
               {"recurrent_step_kda", "beta_t", "[1, 2]"});
}

}  // namespace
}  // namespace lat
