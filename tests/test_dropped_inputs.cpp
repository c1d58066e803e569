// Ops fed intermediates that the caller drops before backward. The tape keeps the handles of
// leaves only, so every node must keep alive what its backward reads (a kernel's parameters
// point into its inputs). Each op runs twice on the same values: once with the caller holding
// its inputs until after backward, once with the inputs dropped right after the forward and
// the freed memory then taken by same-sized tensors of 1e30. The gradients must be the same
// bits: a backward that read freed memory would see the 1e30s (or LAT_POISON's NaNs).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "lat/lat.h"
#include "lat/linear_attention.h"
#include "layers/fused/shared_input_linear.h"
#include "layers/fused/short_conv.h"

namespace lat {
namespace {

/// An op under test on its inputs, returning the output whose weighted sum is the loss.
using Op = std::function<Tensor(const std::vector<Tensor>&)>;

/// How one input is drawn: its shape and the uniform range of its values.
struct InputSpec {
  Shape shape;
  double low, high;
};

enum class Inputs { kept, dropped };

/// The gradients of sum(op(x_i * 1) * w) with respect to the leaves x_i.
std::vector<std::vector<float>> leaf_gradients(const Op& op, const std::vector<InputSpec>& specs, Inputs inputs) {
  Generator gen(20261203);
  std::vector<Tensor> leaves;
  for (const InputSpec& s : specs) {
    leaves.push_back(Tensor::uniform(s.shape, gen, s.low, s.high));
    leaves.back().set_requires_grad(true);
  }
  std::vector<Tensor> held;
  Tensor loss;
  {
    std::vector<Tensor> intermediates;
    for (const Tensor& leaf : leaves) intermediates.push_back(leaf * 1.0);
    const Tensor out = op(intermediates);
    loss = sum(out * Tensor::uniform(out.shape(), gen, -1.0, 1.0));
    if (inputs == Inputs::kept) held = intermediates;
  }
  std::vector<Tensor> scribbles;  // takes the memory the dropped inputs freed
  if (inputs == Inputs::dropped)
    for (const InputSpec& s : specs)
      for (int i = 0; i < 4; ++i) scribbles.push_back(Tensor::full(s.shape, 1e30));
  backward(loss);
  std::vector<std::vector<float>> grads;
  for (const Tensor& leaf : leaves) grads.push_back(leaf.grad().to_vector<float>());
  return grads;
}

void expect_same_gradients(const std::string& name, const Op& op, const std::vector<InputSpec>& specs) {
  const auto kept = leaf_gradients(op, specs, Inputs::kept);
  const auto dropped = leaf_gradients(op, specs, Inputs::dropped);
  ASSERT_EQ(kept.size(), dropped.size());
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(kept[i], dropped[i]) << name << ": input " << i;
}

constexpr int64_t B = 2, T = 40, H = 2, K = 8, V = 8;
const InputSpec kQK{{B, T, H, K}, -1.0, 1.0}, kV{{B, T, H, V}, -1.0, 1.0};
const InputSpec kDecay{{B, T, H}, -0.5, -0.01}, kKeyDecay{{B, T, H, K}, -0.5, -0.01}, kBeta{{B, T, H}, 0.1, 0.9};
constexpr int kChunk = 16;
constexpr bool kL2Norm = true;

TEST(DroppedInputs, LinearAttentionBackwardsKeepWhatTheyRead) {
  expect_same_gradients(
      "chunk_simple_gla",
      [](const auto& x) { return chunk_simple_gla(x[0], x[1], x[2], x[3], {}, {}, false, kChunk).o; },
      {kQK, kQK, kV, kDecay});
  expect_same_gradients(
      "fused_recurrent_simple_gla", [](const auto& x) { return fused_recurrent_simple_gla(x[0], x[1], x[2], x[3]).o; },
      {kQK, kQK, kV, kDecay});
  expect_same_gradients("chunk_gated_delta_rule",
                        [](const auto& x) {
                          return chunk_gated_delta_rule(x[0], x[1], x[2], x[3], x[4], {}, {}, false, kL2Norm, kChunk).o;
                        },
                        {kQK, kQK, kV, kDecay, kBeta});
  expect_same_gradients("fused_recurrent_gated_delta_rule",
                        [](const auto& x) {
                          return fused_recurrent_gated_delta_rule(x[0], x[1], x[2], x[3], x[4], {}, {}, false, kL2Norm).o;
                        },
                        {kQK, kQK, kV, kDecay, kBeta});
  expect_same_gradients(
      "chunk_kda",
      [](const auto& x) { return chunk_kda(x[0], x[1], x[2], x[3], x[4], {}, {}, false, kL2Norm, kChunk).o; },
      {kQK, kQK, kV, kKeyDecay, kBeta});
  expect_same_gradients(
      "fused_recurrent_kda",
      [](const auto& x) { return fused_recurrent_kda(x[0], x[1], x[2], x[3], x[4], {}, {}, false, kL2Norm).o; },
      {kQK, kQK, kV, kKeyDecay, kBeta});
}

TEST(DroppedInputs, InitialStateIsKeptByTheChunkKernels) {
  const InputSpec state{{B, H, K, V}, -1.0, 1.0};
  expect_same_gradients("chunk_gated_delta_rule with initial_state",
                        [](const auto& x) {
                          return chunk_gated_delta_rule(x[0], x[1], x[2], x[3], x[4], {}, x[5], false, kL2Norm, kChunk).o;
                        },
                        {kQK, kQK, kV, kDecay, kBeta, state});
  expect_same_gradients(
      "chunk_kda with initial_state",
      [](const auto& x) { return chunk_kda(x[0], x[1], x[2], x[3], x[4], {}, x[5], false, kL2Norm, kChunk).o; },
      {kQK, kQK, kV, kKeyDecay, kBeta, state});
}

TEST(DroppedInputs, ShortConvolutionRecomputesFromItsInput) {
  expect_same_gradients(
      "short_conv", [](const auto& x) { return short_conv(x[0], x[1], x[2], {}, x[3]); },
      {{{B, T, 24}, -1.0, 1.0}, {{24, 1, 4}, -1.0, 1.0}, {{B, 3, 24}, -1.0, 1.0}, {{24}, -1.0, 1.0}});
}

TEST(DroppedInputs, ProductsKeepTheirOperandsInEveryPrecision) {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    const PrecisionGuard guard(precision);
    const std::string name = precision_name(precision);
    constexpr bool kPlain = false, kTransposed = true;
    expect_same_gradients(
        "matmul " + name, [](const auto& x) { return matmul(x[0], x[1], kPlain, kTransposed); },
        {{{3, 40, 24}, -1.0, 1.0}, {{16, 24}, -1.0, 1.0}});
    expect_same_gradients(
        "batched matmul " + name, [](const auto& x) { return matmul(x[0], x[1], kTransposed, kPlain); },
        {{{3, 24, 40}, -1.0, 1.0}, {{3, 24, 16}, -1.0, 1.0}});
    expect_same_gradients(
        "shared_input_linear " + name,
        [](const auto& x) {
          const std::vector<Tensor> ys = shared_input_linear(x[0], {x[1], x[2]});
          return concat(ys, 1);
        },
        {{{40, 24}, -1.0, 1.0}, {{16, 24}, -1.0, 1.0}, {{8, 24}, -1.0, 1.0}});
  }
}

}  // namespace
}  // namespace lat
