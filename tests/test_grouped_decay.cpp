// Grouped q/k heads in the decayed family (chunk_simple_gla, chunk_linear_attn and their
// fused_recurrent_* and recurrent_step_* forms): q, k with Hk heads, Hk dividing v's H,
// must give what the same call gives with q and k repeated to H heads (head h reads q/k
// head h / (H / Hk), repeat_interleave): outputs, final states, and every gradient, dq
// and dk being the repeated call's summed over the heads of a group. The repeat and the
// sum are plain loops here, independent of the ops. Letters as in
// include/lat/linear_attention.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lat/precision.h"
#include "tests/expect_error.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using testing::Gate;

/// One grouped call: q, k [B, T, Hk, K], v [B, T, H, V]; g per the regime (strong: U(-20,
/// 0), so decays down to e^-20 per step mix with mild ones); cu_seqlens splits the one row
/// (B == 1) into sequences of `lengths` when given.
struct GroupedCase {
  int64_t B = 1, T = 1, H = 1, Hk = 1, K = 16, V = 16;
  Gate gate = Gate::mild;
  bool initial_state = false;
  int chunk_size = 64;
  std::vector<int64_t> lengths;  // packed sequences (B == 1), empty: none
  uint64_t seed = 0;
};

std::string grouped_name(const ::testing::TestParamInfo<GroupedCase>& info) {
  const GroupedCase& c = info.param;
  std::string name = "B" + std::to_string(c.B) + "T" + std::to_string(c.T) + "H" + std::to_string(c.H) + "Hk" +
                     std::to_string(c.Hk) + "K" + std::to_string(c.K) + "V" + std::to_string(c.V) + "_" +
                     testing::gate_name(c.gate) + "_C" + std::to_string(c.chunk_size);
  if (c.initial_state) name += "_h0";
  if (!c.lengths.empty()) name += "_packed";
  return name;
}

struct GroupedInputs {
  testing::Inputs in;  // q, k with Hk heads
  Tensor cu_seqlens;   // undefined unless packed
};

GroupedInputs make_grouped(const GroupedCase& c) {
  Generator gen(c.seed * 6007 + 5);
  GroupedInputs r;
  testing::Inputs& in = r.in;
  const int64_t states = c.lengths.empty() ? c.B : static_cast<int64_t>(c.lengths.size());
  in.q = Tensor::randn({c.B, c.T, c.Hk, c.K}, gen);
  in.k = Tensor::randn({c.B, c.T, c.Hk, c.K}, gen);
  in.v = Tensor::randn({c.B, c.T, c.H, c.V}, gen);
  switch (c.gate) {
    case Gate::none: break;
    case Gate::zero: in.g = Tensor::zeros({c.B, c.T, c.H}); break;
    case Gate::mild: in.g = Tensor::uniform({c.B, c.T, c.H}, gen, -0.1, -0.01); break;
    case Gate::strong: in.g = Tensor::uniform({c.B, c.T, c.H}, gen, -20.0, 0.0); break;
  }
  if (c.initial_state) in.initial_state = Tensor::randn({states, c.H, c.K, c.V}, gen);
  in.d_o = Tensor::randn({c.B, c.T, c.H, c.V}, gen);
  in.d_final_state = Tensor::randn({states, c.H, c.K, c.V}, gen);
  if (!c.lengths.empty()) {
    std::vector<int64_t> offsets{0};
    for (int64_t L : c.lengths) offsets.push_back(offsets.back() + L);
    r.cu_seqlens = Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())});
  }
  return r;
}

/// x [..., Hk, D] -> [..., Hk * R, D], head j copied to heads j*R .. j*R + R - 1.
Tensor repeat_plain(const Tensor& x, int64_t R) {
  Shape shape = x.shape();
  const int64_t Hk = shape[shape.size() - 2], D = shape.back(), rows = x.numel() / (Hk * D);
  shape[shape.size() - 2] = Hk * R;
  std::vector<float> src = x.to_vector<float>(), dst(rows * Hk * R * D);
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t h = 0; h < Hk * R; ++h)
      for (int64_t d = 0; d < D; ++d) dst[(row * Hk * R + h) * D + d] = src[(row * Hk + h / R) * D + d];
  return Tensor::from_vector(dst, shape);
}

/// The inverse direction for gradients: dx [..., Hk * R, D] -> [..., Hk, D], each group's
/// R heads summed (in double).
Tensor sum_groups_plain(const Tensor& dx, int64_t R) {
  Shape shape = dx.shape();
  const int64_t H = shape[shape.size() - 2], D = shape.back(), rows = dx.numel() / (H * D), Hk = H / R;
  shape[shape.size() - 2] = Hk;
  std::vector<double> src = dx.to_vector<double>(), dst(rows * Hk * D, 0.0);
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) dst[(row * Hk + h / R) * D + d] += src[(row * H + h) * D + d];
  return Tensor::from_vector(dst, shape).to(DType::f32);
}

/// The repeated call's result with dq, dk summed back to Hk heads.
testing::Result run_repeated(const testing::Op& op, const testing::Inputs& grouped, int64_t R) {
  testing::Inputs in = grouped;
  in.q = repeat_plain(grouped.q, R);
  in.k = repeat_plain(grouped.k, R);
  testing::Result r = testing::run(op, in, DType::f32);
  r.dq = sum_groups_plain(r.dq, R);
  r.dk = sum_groups_plain(r.dk, R);
  return r;
}

// fp32: the grouped kernel sums the heads' terms in another order than the repeated call's
// reduction, so the two agree to rounding, far inside DESIGN.md's 1e-4 against float64.
constexpr double kGroupedTol = 2e-6;

testing::Op chunk_gla(int chunk_size, const Tensor& cu) {
  return [=](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    return chunk_simple_gla(q, k, v, g, {}, h0, true, chunk_size, cu);
  };
}

testing::Op recurrent_gla(const Tensor& cu) {
  return [=](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    return fused_recurrent_simple_gla(q, k, v, g, {}, h0, true, cu);
  };
}

class GroupedDecay : public ::testing::TestWithParam<GroupedCase> {};

TEST_P(GroupedDecay, ChunkSimpleGlaEqualsRepeatedHeads) {
  const GroupedCase& c = GetParam();
  const GroupedInputs gi = make_grouped(c);
  const testing::Op op = chunk_gla(c.chunk_size, gi.cu_seqlens);
  const testing::Result grouped = testing::run(op, gi.in, DType::f32);
  ASSERT_EQ(grouped.dq.shape(), (Shape{c.B, c.T, c.Hk, c.K}));
  ASSERT_EQ(grouped.dk.shape(), (Shape{c.B, c.T, c.Hk, c.K}));
  testing::expect_close(grouped, run_repeated(op, gi.in, c.H / c.Hk), kGroupedTol);
  EXPECT_TRUE(testing::all_finite(grouped.dg));
}

TEST_P(GroupedDecay, FusedRecurrentSimpleGlaEqualsRepeatedHeads) {
  const GroupedCase& c = GetParam();
  const GroupedInputs gi = make_grouped(c);
  const testing::Op op = recurrent_gla(gi.cu_seqlens);
  testing::expect_close(testing::run(op, gi.in, DType::f32), run_repeated(op, gi.in, c.H / c.Hk), kGroupedTol);
}

TEST_P(GroupedDecay, ChunkMatchesFusedRecurrent) {
  const GroupedCase& c = GetParam();
  const GroupedInputs gi = make_grouped(c);
  testing::expect_close(testing::run(chunk_gla(c.chunk_size, gi.cu_seqlens), gi.in, DType::f32),
                        testing::run(recurrent_gla(gi.cu_seqlens), gi.in, DType::f32), testing::kTol);
}

// bf16 products: the grouped and the repeated call round the same inputs but sum the heads'
// terms in another order (and the group's P sum is rounded once), so they agree within
// bf16's norm-wise bound 2u sqrt(max(K, V, C)) (test_bf16_chunk.cpp), u = 2^-8.
TEST_P(GroupedDecay, ChunkSimpleGlaBf16CloseToRepeatedHeads) {
  const GroupedCase& c = GetParam();
  const GroupedInputs gi = make_grouped(c);
  const testing::Op fp32_op = chunk_gla(c.chunk_size, gi.cu_seqlens);
  const testing::Op op = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    const PrecisionGuard guard(Precision::bf16);
    return fp32_op(q, k, v, g, h0);
  };
  const double bound = 2.0 * 0x1p-8 * std::sqrt(static_cast<double>(std::max({c.K, c.V, int64_t{c.chunk_size}})));
  testing::expect_close(testing::run(op, gi.in, DType::f32), run_repeated(op, gi.in, c.H / c.Hk), bound);
}

std::vector<GroupedCase> grouped_cases() {
  std::vector<GroupedCase> cases;
  uint64_t seed = 1;
  // H = 4 with Hk = 1, 2, 4; T not a multiple of C; both gate regimes; initial state.
  for (int64_t Hk : {1, 2, 4})
    for (Gate gate : {Gate::mild, Gate::strong}) cases.push_back({2, 150, 4, Hk, 16, 24, gate, true, 64, {}, seed++});
  // R = 3 heads per group, which does not divide the 32-chunk block; many blocks.
  cases.push_back({2, 700, 6, 2, 16, 8, Gate::mild, true, 16, {}, seed++});
  cases.push_back({1, 333, 6, 1, 8, 16, Gate::strong, false, 20, {}, seed++});
  // More heads per group than chunks in a block.
  cases.push_back({1, 100, 40, 1, 8, 4, Gate::mild, true, 8, {}, seed++});
  // T = 1, and the Mamba-2 shape in small (K = d_state 32, V = head_dim 16, G = 1).
  cases.push_back({3, 1, 4, 2, 16, 16, Gate::mild, true, 64, {}, seed++});
  cases.push_back({2, 130, 8, 1, 32, 16, Gate::strong, true, 64, {}, seed++});
  // Packed sequences, a boundary inside a chunk, each with its initial state.
  cases.push_back({1, 150, 4, 2, 16, 16, Gate::mild, true, 32, {37, 1, 80, 32}, seed++});
  cases.push_back({1, 150, 4, 1, 16, 16, Gate::strong, true, 16, {100, 50}, seed++});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GroupedDecay, ::testing::ValuesIn(grouped_cases()), grouped_name);

TEST(GroupedDecay, ChunkLinearAttnEqualsRepeatedHeads) {
  for (bool normalize : {false, true}) {
    SCOPED_TRACE(normalize ? "normalized" : "plain");
    const GroupedCase c{2, 90, 6, 3, 8, 12, Gate::none, true, 32, {}, 41};
    GroupedInputs gi = make_grouped(c);
    if (normalize) {
      // Positive features and state, as the normalizer needs; the state carries z.
      Generator gen(43);
      gi.in.q = Tensor::uniform({c.B, c.T, c.Hk, c.K}, gen, 0.1, 1.0);
      gi.in.k = Tensor::uniform({c.B, c.T, c.Hk, c.K}, gen, 0.1, 1.0);
      gi.in.initial_state = Tensor::uniform({c.B, c.H, c.K, c.V + 1}, gen, 0.0, 1.0);
      gi.in.d_final_state = Tensor::randn({c.B, c.H, c.K, c.V + 1}, gen);
    }
    for (bool chunk : {true, false}) {
      SCOPED_TRACE(chunk ? "chunk_linear_attn" : "fused_recurrent_linear_attn");
      const testing::Op op = chunk ? testing::linear_attn_chunk(normalize, 32)
                                   : testing::linear_attn_recurrent(normalize);
      testing::expect_close(testing::run(op, gi.in, DType::f32), run_repeated(op, gi.in, c.H / c.Hk), kGroupedTol);
    }
  }
}

// Decoding steps with grouped q_t, k_t advance the state as the repeated ones do, and
// step by step they reproduce the chunk op's outputs and final state.
TEST(GroupedDecay, RecurrentStepEqualsRepeatedHeadsAndChunk) {
  const GroupedCase c{2, 20, 6, 2, 8, 4, Gate::strong, true, 8, {}, 51};
  const GroupedInputs gi = make_grouped(c);
  const testing::Inputs& in = gi.in;
  const int64_t R = c.H / c.Hk;
  Tensor grouped_state = in.initial_state.clone(), repeated_state = in.initial_state.clone();
  std::vector<float> outputs;
  for (int64_t t = 0; t < c.T; ++t) {
    auto token = [t](const Tensor& x) {
      Shape shape = x.shape();
      shape.erase(shape.begin() + 1);
      return slice(x, 1, t, t + 1).reshape(shape);
    };
    const Tensor q_t = token(in.q), k_t = token(in.k), v_t = token(in.v), g_t = token(in.g);
    const Tensor o = recurrent_step_simple_gla(q_t, k_t, v_t, g_t, 0.5f, grouped_state);
    const Tensor o_repeated = recurrent_step_simple_gla(repeat_plain(q_t, R), repeat_plain(k_t, R), v_t, g_t, 0.5f,
                                                        repeated_state);
    EXPECT_EQ(o.to_vector<float>(), o_repeated.to_vector<float>()) << "t=" << t;
    for (float x : o.to_vector<float>()) outputs.push_back(x);
  }
  EXPECT_EQ(grouped_state.to_vector<float>(), repeated_state.to_vector<float>());
  const LinearAttentionOutput chunk = chunk_simple_gla(in.q, in.k, in.v, in.g, 0.5f, in.initial_state, true, 8);
  const Tensor steps = permute(Tensor::from_vector(outputs, {c.T, c.B, c.H, c.V}), {1, 0, 2, 3});
  EXPECT_LT(relative_error(steps, chunk.o), testing::kTol);
  EXPECT_LT(relative_error(grouped_state, chunk.final_state), testing::kTol);
}

// CUDA: the chunk kernel and the step read q, k repeated to H heads on the tape; the
// results equal the CPU kernel's grouped ones. Skipped without a CUDA device.
TEST(GroupedDecay, CudaMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const Device gpu = Device::cuda(0);
  auto on = [](const Device& device, const Tensor& t) { return t.defined() ? t.to(device) : t; };
  const GroupedCase c{1, 70, 4, 2, 16, 8, Gate::strong, true, 16, {30, 40}, 61};
  const GroupedInputs gi = make_grouped(c);
  const testing::Op cpu = chunk_gla(c.chunk_size, gi.cu_seqlens);
  const testing::Op cuda = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    const LinearAttentionOutput out = cpu(on(gpu, q), on(gpu, k), on(gpu, v), on(gpu, g), on(gpu, h0));
    EXPECT_TRUE(out.o.device().is_cuda());
    return LinearAttentionOutput{on(Device::cpu(), out.o), on(Device::cpu(), out.final_state)};
  };
  testing::expect_close(testing::run(cuda, gi.in, DType::f32), testing::run(cpu, gi.in, DType::f32), testing::kTol);

  Generator gen(62);
  Tensor state = Tensor::randn({2, 4, 16, 8}, gen), state_gpu = state.to(gpu);
  const Tensor q_t = Tensor::randn({2, 2, 16}, gen), k_t = Tensor::randn({2, 2, 16}, gen);
  const Tensor v_t = Tensor::randn({2, 4, 8}, gen), g_t = Tensor::full({2, 4}, -0.3);
  const Tensor o = recurrent_step_simple_gla(q_t, k_t, v_t, g_t, 0.5f, state);
  const Tensor o_gpu = recurrent_step_simple_gla(q_t.to(gpu), k_t.to(gpu), v_t.to(gpu), g_t.to(gpu), 0.5f, state_gpu);
  EXPECT_LT(relative_error(o_gpu.to(Device::cpu()), o), 1e-5);
  EXPECT_LT(relative_error(state_gpu.to(Device::cpu()), state), 1e-5);
}

TEST(GroupedDecay, HeadCountNotDividingHIsRefused) {
  Generator gen(1);
  const Tensor q = Tensor::randn({1, 4, 3, 8}, gen), v = Tensor::randn({1, 4, 4, 6}, gen);
  const Tensor g = Tensor::full({1, 4, 4}, -0.1);
  using testing::expect_error;
  expect_error([&] { chunk_simple_gla(q, q, v, g); },
               {"chunk_simple_gla: v: expected shape [1, 4, 3, 6] [B, T, H, V] (B, T, H as q; or H a multiple of "
                "q's heads Hk: grouped q/k heads), got [1, 4, 4, 6]"});
  expect_error([&] { fused_recurrent_simple_gla(q, q, v, g); },
               {"fused_recurrent_simple_gla", "v", "grouped", "[1, 4, 4, 6]"});
  expect_error([&] { chunk_linear_attn(q, q, v); }, {"chunk_linear_attn", "v", "grouped", "[1, 4, 4, 6]"});
  // k must have q's heads.
  expect_error(
      [&] {
        chunk_simple_gla(Tensor::randn({1, 4, 1, 8}, gen), Tensor::randn({1, 4, 2, 8}, gen), v, g);
      },
      {"chunk_simple_gla", "k", "[1, 4, 1, 8]", "[1, 4, 2, 8]"});
  Tensor state = Tensor::zeros({1, 4, 8, 6});
  expect_error(
      [&] {
        recurrent_step_simple_gla(Tensor::randn({1, 3, 8}, gen), Tensor::randn({1, 3, 8}, gen),
                                  Tensor::randn({1, 4, 6}, gen), Tensor::full({1, 4}, -0.1), 1.0f, state);
      },
      {"recurrent_step_simple_gla: v_t: expected shape [1, 3, V] [B, H, V] (or H a multiple of q_t's heads Hk: "
       "grouped q/k heads), got [1, 4, 6]"});
}

}  // namespace
}  // namespace lat
