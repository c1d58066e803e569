// shared_input_linear (layers/fused/shared_input_linear.h), the one tape node of the input
// projections that read the same x: against separate matmuls (outputs and every gradient,
// bit for bit on the CPU, in f32, bf16 and f64, at odd sizes and at the main job's), against
// finite differences in f64, its errors; and a whole HybridLM (gdn, attn, SwiGLU) against the
// same model written from core ops with one matmul per projection.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "lat/grad_check.h"
#include "lat/lat.h"
#include "lat/precision.h"
#include "layers/fused/attention_op.h"
#include "layers/fused/rope.h"
#include "layers/fused/shared_input_linear.h"
#include "layers/fused/short_conv.h"
#include "layers/hybrid_lm.h"
#include "tests/bitwise.h"
#include "tests/expect_error.h"

namespace lat {
namespace {

using testing::expect_error;

using testing::differing_bits;

struct Sizes {
  int64_t M, K;
  std::vector<int64_t> widths;
};

// Odd sizes (a 1-wide weight, K below a vector) and the main job's gdn projections
// (q, k, v, a, b, g of d_model 128 over 4 x 256 tokens).
const std::vector<Sizes> kSizes = {{37, 20, {5, 1, 33, 20}}, {1024, 128, {128, 128, 128, 4, 4, 128}}};

// The op's outputs, dx and every dW equal those of one matmul per weight, bit for bit, in
// `precision` (f32 operands) or for f64 operands.
void expect_same_bits_as_separate_matmuls(DType dtype, Precision precision) {
  const PrecisionGuard guard(precision);
  for (const Sizes& s : kSizes) {
    SCOPED_TRACE("M " + std::to_string(s.M) + " K " + std::to_string(s.K));
    Generator gen(3);
    Tensor x0 = Tensor::randn({s.M, s.K}, gen, dtype).set_requires_grad(true);
    std::vector<Tensor> weights, weights_sep, w_out;
    for (int64_t n : s.widths) {
      weights.push_back(Tensor::randn({n, s.K}, gen, dtype, 0.0, 0.3).set_requires_grad(true));
      weights_sep.push_back(weights.back().detach().set_requires_grad(true));
      w_out.push_back(Tensor::randn({s.M, n}, gen, dtype));
    }
    // x is an intermediate (x0 * 2), as in a model, so its gradient goes through the tape's sums.
    auto loss_of = [&](const std::vector<Tensor>& outs) {
      Tensor loss;
      for (size_t i = 0; i < outs.size(); ++i) {
        const Tensor term = sum(outs[i] * w_out[i]);
        loss = loss.defined() ? loss + term : term;
      }
      return loss;
    };
    const std::vector<Tensor> fused = shared_input_linear(x0 * 2.0, weights);
    backward(loss_of(fused));
    const Tensor dx_fused = x0.grad();
    x0.set_grad(Tensor());

    const Tensor x = x0 * 2.0;
    std::vector<Tensor> separate;
    constexpr bool kPlain = false, kTransposed = true;
    for (const Tensor& w : weights_sep) separate.push_back(matmul(x, w, kPlain, kTransposed));
    backward(loss_of(separate));

    for (size_t i = 0; i < s.widths.size(); ++i) {
      EXPECT_EQ(differing_bits(fused[i], separate[i]), 0) << "output " << i;
      EXPECT_EQ(differing_bits(weights[i].grad(), weights_sep[i].grad()), 0) << "dW " << i;
    }
    EXPECT_EQ(differing_bits(dx_fused, x0.grad()), 0) << "dx";
  }
}

TEST(SharedInputLinear, SameBitsAsSeparateMatmulsF32) {
  expect_same_bits_as_separate_matmuls(DType::f32, Precision::fp32);
}

TEST(SharedInputLinear, SameBitsAsSeparateMatmulsBf16) {
  if (!bf16_supported(Device::cpu())) GTEST_SKIP() << "this CPU computes no bf16 products";
  expect_same_bits_as_separate_matmuls(DType::f32, Precision::bf16);
}

TEST(SharedInputLinear, SameBitsAsSeparateMatmulsF64) {
  expect_same_bits_as_separate_matmuls(DType::f64, Precision::fp32);
}

TEST(SharedInputLinear, GradientsMatchFiniteDifferences) {
  Generator gen(4);
  const std::vector<Tensor> inputs = {Tensor::randn({7, 5}, gen, DType::f64).set_requires_grad(true),
                                      Tensor::randn({3, 5}, gen, DType::f64).set_requires_grad(true),
                                      Tensor::randn({1, 5}, gen, DType::f64).set_requires_grad(true)};
  const GradCheckResult r = grad_check(
      [](const std::vector<Tensor>& in) {
        const std::vector<Tensor> outs = shared_input_linear(in[0], {in[1], in[2]});
        return concat(outs, 1);
      },
      inputs);
  EXPECT_LT(r.max_rel_error, 1e-7);
}

TEST(SharedInputLinear, NoRowsGiveEmptyOutputsAndZeroWeightGradients) {
  Tensor x = Tensor::zeros({0, 4}).set_requires_grad(true);
  Tensor w = Tensor::ones({3, 4}).set_requires_grad(true);
  const std::vector<Tensor> outs = shared_input_linear(x, {w});
  ASSERT_EQ(outs[0].shape(), Shape({0, 3}));
  backward(sum(outs[0]) + sum(w));
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(12, 1.0f));
}

TEST(SharedInputLinear, Errors) {
  const Tensor x = Tensor::zeros({2, 4});
  expect_error([&] { shared_input_linear(x, {}); }, {"shared_input_linear", "weights", "at least one"});
  expect_error(
      [&] {
        shared_input_linear(Tensor::zeros({2, 2, 4}), {Tensor::zeros({3, 4})});
      },
      {"shared_input_linear", "x", "[M, K]", "[2, 2, 4]"});
  expect_error(
      [&] {
        shared_input_linear(x, {Tensor::zeros({3, 4}), Tensor::zeros({3, 5})});
      },
      {"shared_input_linear", "weights[1]", "[N, 4]", "[3, 5]"});
  expect_error(
      [&] {
        shared_input_linear(x, {Tensor::zeros({3, 4}, DType::f64)});
      },
      {"shared_input_linear", "weights[0]", "f32", "f64"});
  expect_error(
      [&] {
        shared_input_linear(Tensor::zeros({2, 4}, DType::i64), {Tensor::zeros({3, 4})});
      },
      {"shared_input_linear", "x", "f32 or f64", "i64"});
}

// On CUDA the op is the composition of concat, matmul and split: the CPU's values.
TEST(SharedInputLinear, CudaMatchesCpu) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << (cuda_built() ? "no CUDA device visible" : "lat was built without CUDA (LAT_CUDA=OFF)");
  const Device gpu = Device::cuda(0);
  Generator gen(5);
  const Tensor x = Tensor::randn({37, 20}, gen);
  const std::vector<Tensor> weights = {Tensor::randn({5, 20}, gen), Tensor::randn({1, 20}, gen)};
  const std::vector<Tensor> w_out = {Tensor::randn({37, 5}, gen), Tensor::randn({37, 1}, gen)};
  auto run = [&](Device device) {
    Tensor xd = x.to(device).detach().set_requires_grad(true);
    std::vector<Tensor> wd;
    for (const Tensor& w : weights) wd.push_back(w.to(device).detach().set_requires_grad(true));
    const std::vector<Tensor> outs = shared_input_linear(xd, wd);
    backward(sum(outs[0] * w_out[0].to(device)) + sum(outs[1] * w_out[1].to(device)));
    std::vector<Tensor> results{outs[0].detach(), outs[1].detach(), xd.grad(), wd[0].grad(), wd[1].grad()};
    for (Tensor& t : results) t = t.to(Device::cpu());
    return results;
  };
  const std::vector<Tensor> cpu = run(Device::cpu()), cuda = run(gpu);
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_LT(relative_error(cuda[i], cpu[i]), 1e-5) << "result " << i;
}

// ---- a whole model against one product per projection -------------------------------------

using ParamMap = std::map<std::string, Tensor>;

/// x W^T as Linear::forward computes it: one matmul over the flattened leading dimensions.
Tensor linear(const Tensor& x, const Tensor& w) {
  Shape shape = x.shape();
  shape.back() = w.size(0);
  constexpr bool kPlain = false, kTransposed = true;
  return matmul(x.reshape({-1, x.size(-1)}), w, kPlain, kTransposed).reshape(shape);
}

/// The gdn mixer (layers/delta_net_layer.cpp) from core ops, one matmul per projection, in
/// the order the layer made them as separate Linears: q, k, v, then beta's b, then the
/// decay's a, then the output gate's g. The tape adds x's gradients in the reverse of that
/// order, so this is the order whose dx bits the fused projections must keep.
Tensor gdn(ParamMap& P, const std::string& p, const Tensor& x, const MixerConfig& c) {
  const int64_t B = x.size(0), T = x.size(1), H = c.n_heads, K = c.d_model / c.n_heads;
  Tensor q = linear(x, P[p + "q_proj.weight"]), k = linear(x, P[p + "k_proj.weight"]);
  Tensor v = linear(x, P[p + "v_proj.weight"]), b = linear(x, P[p + "b_proj.weight"]);
  Tensor a = linear(x, P[p + "a_proj.weight"]), g = linear(x, P[p + "g_proj.weight"]);
  q = short_conv(q, P[p + "q_conv1d.weight"]).reshape({B, T, H, K});
  k = short_conv(k, P[p + "k_conv1d.weight"]).reshape({B, T, H, K});
  v = short_conv(v, P[p + "v_conv1d.weight"]).reshape({B, T, H, K});
  const Tensor decay = -(exp(P[p + "A_log"]) * softplus(a + P[p + "dt_bias"]));
  constexpr bool kOutputFinalState = false, kQkL2Norm = true;
  const Tensor o = chunk_gated_delta_rule(q, k, v, decay, sigmoid(b), {}, {}, kOutputFinalState, kQkL2Norm,
                                          static_cast<int>(c.chunk_size))
                       .o;
  const Tensor y = swiglu(g.reshape({B, T, H, K}), rms_norm(o, P[p + "o_norm.weight"], c.norm_eps));
  return linear(y.reshape({B, T, H * K}), P[p + "o_proj.weight"]);
}

/// The attn mixer (layers/attention.cpp, without options) from core ops.
Tensor attn(ParamMap& P, const std::string& p, const Tensor& x, const MixerConfig& c) {
  const int64_t B = x.size(0), T = x.size(1), H = c.n_heads, D = c.d_model / c.n_heads;
  Tensor q = linear(x, P[p + "q_proj.weight"]).reshape({B, T, H, D});
  Tensor k = linear(x, P[p + "k_proj.weight"]).reshape({B, T, H, D});
  const Tensor v = linear(x, P[p + "v_proj.weight"]).reshape({B, T, H, D});
  q = rotary_embedding(q, c.rope_theta, 0, {}, D);
  k = rotary_embedding(k, c.rope_theta, 0, {}, D);
  const Tensor o = causal_attention(q, k, v, {}, c.window_size);
  return linear(o.reshape({B, T, H * D}), P[p + "o_proj.weight"]);
}

/// HybridLM::forward (layers/hybrid_lm.cpp) from core ops.
Tensor hybrid_lm(ParamMap& P, const Tensor& ids, const HybridLMConfig& c) {
  Tensor h = embedding(P["embeddings.weight"], ids);
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const Tensor n = rms_norm(h, P[p + "attn_norm.weight"], c.norm_eps);
    h = h + (c.layers[i] == "gdn" ? gdn(P, p + "attn.", n, c.mixer) : attn(P, p + "attn.", n, c.mixer));
    const Tensor m = rms_norm(h, P[p + "mlp_norm.weight"], c.norm_eps);
    const Tensor gate = linear(m, P[p + "mlp.gate_proj.weight"]), up = linear(m, P[p + "mlp.up_proj.weight"]);
    h = h + linear(swiglu(gate, up), P[p + "mlp.down_proj.weight"]);
  }
  return linear(rms_norm(h, P["norm.weight"], c.norm_eps), P["lm_head.weight"]);
}

// The main job's pattern of layers at a small width: the model's loss and every parameter's
// gradient equal those of one matmul per projection, bit for bit, in fp32 and bf16.
void expect_model_same_bits_as_separate_projections(Precision precision) {
  const PrecisionGuard guard(precision);
  HybridLMConfig c;
  c.vocab_size = 11;
  c.layers = {"gdn", "attn", "gdn"};
  c.mixer.d_model = 32;
  c.mixer.n_heads = 2;
  c.mixer.chunk_size = 16;
  c.mixer.window_size = 24;
  Generator gen(6);
  HybridLM model(c, gen);
  const int64_t B = 2, T = 37;
  std::vector<int64_t> ids(B * T), targets(B * T);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = gen.randint(c.vocab_size);
    targets[i] = gen.randint(c.vocab_size);
  }
  const Tensor ids_t = Tensor::from_vector(ids, {B, T}), targets_t = Tensor::from_vector(targets, {B * T});

  const Tensor logits = model.forward(ids_t);
  const Tensor loss = cross_entropy(logits.reshape({B * T, c.vocab_size}), targets_t);
  backward(loss);
  std::vector<Tensor> grads;
  ParamMap P;
  for (const auto& [name, p] : model.named_parameters()) {
    grads.push_back(p.grad());
    P[name] = p;
  }
  model.zero_grad();

  const Tensor ref_logits = hybrid_lm(P, ids_t, model.config());
  const Tensor ref_loss = cross_entropy(ref_logits.reshape({B * T, c.vocab_size}), targets_t);
  backward(ref_loss);
  EXPECT_EQ(differing_bits(logits, ref_logits), 0) << "logits";
  EXPECT_EQ(loss.item(), ref_loss.item());
  size_t i = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(grads[i].defined()) << name;
    EXPECT_EQ(differing_bits(grads[i++], p.grad()), 0) << "d " << name;
  }
}

TEST(SharedInputLinear, ModelSameBitsAsSeparateProjectionsF32) {
  expect_model_same_bits_as_separate_projections(Precision::fp32);
}

TEST(SharedInputLinear, ModelSameBitsAsSeparateProjectionsBf16) {
  if (!bf16_supported(Device::cpu())) GTEST_SKIP() << "this CPU computes no bf16 products";
  expect_model_same_bits_as_separate_projections(Precision::bf16);
}

}  // namespace
}  // namespace lat
