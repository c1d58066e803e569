// The optimizers' one-region step over all parameters (optim/param_chunks.h) and the clip
// scale folded into it: bit for bit the same as scaling the gradients in place and as one
// optimizer per parameter, the same bits at 1, 2 and 3 threads, and AdamW with clipping
// against a float64 reference. Tensors of several sizes, some over one chunk (16384
// elements), in all above the parallel threshold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lat/lat.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/sgd.h"
#include "tests/bitwise.h"
#include "tests/expect_error.h"
#include "tests/threads_testing.h"

namespace lat {
namespace {

using testing::expect_error;

// Names pick the weight-decay group (optim/weight_decay.h): both groups are present.
const std::vector<std::pair<std::string, Shape>> kSpecs = {
    {"layers.0.attn.q_proj.weight", {130, 200}},  // 26000 elements: two chunks
    {"layers.0.attn_norm.weight", {7}},
    {"embeddings.weight", {65, 16}},
    {"layers.1.mlp.up_proj.weight", {300, 128}},  // three chunks
    {"layers.1.attn.dt_bias", {1}},
    {"lm_head.weight", {3, 5}},
};

std::vector<NamedParameter> make_params(DType dtype) {
  Generator gen(11);
  std::vector<NamedParameter> out;
  for (const auto& [name, shape] : kSpecs) {
    Tensor t = Tensor::randn(shape, gen, dtype);
    t.set_requires_grad(true);
    out.push_back({name, t});
  }
  return out;
}

// Step k's gradients, large enough that a max norm of 1 clips them.
void set_grads(const std::vector<NamedParameter>& params, int k) {
  for (size_t item = 0; item < params.size(); ++item) {
    Tensor p = params[item].tensor;
    std::vector<double> g(static_cast<size_t>(p.numel()));
    for (size_t i = 0; i < g.size(); ++i) g[i] = 3.0 * std::sin(1.3 * k + 0.01 * static_cast<double>(i) + item);
    p.set_grad(Tensor::from_vector(g, p.shape()).to(p.dtype()));
  }
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && testing::differing_bits(a, b) == 0;
}

// Parameters and every state buffer of `a` and `b` hold the same bits.
void expect_same_bits(const Optimizer& a, const std::vector<NamedParameter>& b_params, const OptimizerState& b_state) {
  const OptimizerState a_state = a.export_state();
  ASSERT_EQ(a_state.size(), b_state.size());
  for (size_t i = 0; i < b_params.size(); ++i) {
    const std::string& name = b_params[i].name;
    EXPECT_TRUE(same_bits(a.parameters()[i].tensor, b_params[i].tensor)) << name;
    if (!a_state.count(name)) continue;  // plain SGD keeps no state
    for (const auto& [buffer, t] : a_state.at(name)) EXPECT_TRUE(same_bits(t, b_state.at(name).at(buffer))) << name << "/" << buffer;
  }
}

template <class Opt, class Options>
void expect_scaled_step_equals_scaling_in_place(Options options, DType dtype) {
  Opt in_place(make_params(dtype), options), folded(make_params(dtype), options);
  for (int k = 0; k < 3; ++k) {
    set_grads(in_place.parameters(), k);
    set_grads(folded.parameters(), k);
    const ClipResult a = clip_grad_norm(in_place.parameters(), 1.0);
    in_place.step(1e-2);
    const Tensor g0 = folded.parameters()[0].tensor.grad();
    const Tensor g0_before = g0.to(DType::f64);
    const ClipResult b = clip_factor(folded.parameters(), 1.0);
    ASSERT_TRUE(a.clipped && b.clipped);
    EXPECT_EQ(a.norm, b.norm);
    EXPECT_EQ(a.factor, b.factor);
    folded.step(1e-2, b.factor);
    EXPECT_TRUE(same_bits(g0.to(DType::f64), g0_before)) << "clip_factor and the step leave the gradients as they were";
  }
  expect_same_bits(in_place, folded.parameters(), folded.export_state());
}

TEST(FusedStep, AdamWScaledStepEqualsClippingInPlace) {
  expect_scaled_step_equals_scaling_in_place<AdamW>(AdamWOptions{}, DType::f32);
  expect_scaled_step_equals_scaling_in_place<AdamW>(AdamWOptions{}, DType::f64);
}

TEST(FusedStep, SgdScaledStepEqualsClippingInPlace) {
  expect_scaled_step_equals_scaling_in_place<Sgd>(SgdOptions{.momentum = 0.9, .weight_decay = 0.1}, DType::f32);
  expect_scaled_step_equals_scaling_in_place<Sgd>(SgdOptions{.momentum = 0.0, .weight_decay = 0.1}, DType::f32);
  expect_scaled_step_equals_scaling_in_place<Sgd>(SgdOptions{.momentum = 0.9, .weight_decay = 0.1}, DType::f64);
}

// All parameters in one optimizer (one region) against one optimizer per parameter, with
// an lr multiplier and a grad_scale, over three steps.
template <class Opt, class Options>
void expect_one_region_equals_per_parameter(Options options) {
  Opt all(make_params(DType::f32), options);
  all.set_lr_mult("embeddings.weight", 0.25);
  std::vector<std::unique_ptr<Opt>> each;
  for (const NamedParameter& p : make_params(DType::f32)) {
    each.push_back(std::make_unique<Opt>(std::vector<NamedParameter>{p}, options));
    if (p.name == "embeddings.weight") each.back()->set_lr_mult(p.name, 0.25);
  }
  for (int k = 0; k < 3; ++k) {
    set_grads(all.parameters(), k);
    all.step(1e-2, 0.37);
    for (size_t i = 0; i < each.size(); ++i) {
      Tensor p = each[i]->parameters()[0].tensor;
      p.set_grad(all.parameters()[i].tensor.grad());
      each[i]->step(1e-2, 0.37);
    }
  }
  std::vector<NamedParameter> params;
  OptimizerState state;
  for (const auto& opt : each) {
    params.push_back(opt->parameters()[0]);
    for (const auto& [name, buffers] : opt->export_state()) state[name] = buffers;
  }
  expect_same_bits(all, params, state);
}

TEST(FusedStep, OneRegionEqualsOneOptimizerPerParameter) {
  expect_one_region_equals_per_parameter<AdamW>(AdamWOptions{});
  expect_one_region_equals_per_parameter<Sgd>(SgdOptions{.momentum = 0.9, .weight_decay = 0.1});
}

TEST(FusedStep, SameBitsAtEveryThreadCount) {
  const auto run = [] {
    AdamW adamw(make_params(DType::f32), {});
    std::vector<double> norms;
    for (int k = 0; k < 2; ++k) {
      set_grads(adamw.parameters(), k);
      const ClipResult r = clip_factor(adamw.parameters(), 1.0);
      norms.push_back(r.norm);
      adamw.step(1e-2, r.factor);
    }
    std::vector<std::vector<float>> out;
    for (const NamedParameter& p : adamw.parameters()) out.push_back(p.tensor.to_vector());
    return std::make_pair(norms, out);
  };
  const auto results = testing::at_thread_counts(run);
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i].first, results[0].first) << "gradient norms, run " << i;
    for (size_t t = 0; t < results[0].second.size(); ++t)
      EXPECT_EQ(std::memcmp(results[i].second[t].data(), results[0].second[t].data(),
                            results[0].second[t].size() * sizeof(float)),
                0)
          << kSpecs[t].first << ", run " << i;
  }
}

// One AdamW step on scalars in double, from the formula of adamw.h.
struct AdamWReference {
  double beta1, beta2, eps, weight_decay;
  double m = 0.0, v = 0.0;
  double step(double p, double g, double lr, int t) {
    p -= lr * weight_decay * p;
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
    const double denom = std::sqrt(v) / std::sqrt(1 - std::pow(beta2, t)) + eps;
    return p - lr * (m / (1 - std::pow(beta1, t))) / denom;
  }
};

TEST(FusedStep, AdamWWithClippingMatchesFloat64Reference) {
  const AdamWOptions o{};
  AdamW adamw(make_params(DType::f32), o);
  std::vector<std::vector<double>> p_ref;
  std::vector<std::vector<AdamWReference>> state_ref;
  for (const NamedParameter& p : adamw.parameters()) {
    const std::vector<float> values = p.tensor.to_vector();
    p_ref.emplace_back(values.begin(), values.end());
    const double wd = p.tensor.dim() == 2 && p.name != "embeddings.weight" ? o.weight_decay : 0.0;
    state_ref.emplace_back(values.size(), AdamWReference{o.beta1, o.beta2, o.eps, wd});
  }
  const double max_norm = 1.0, lr = 1e-2;
  for (int t = 1; t <= 2; ++t) {
    set_grads(adamw.parameters(), t);
    std::vector<std::vector<float>> grads;
    double sum = 0.0;
    for (const NamedParameter& p : adamw.parameters()) {
      grads.push_back(p.tensor.grad().to_vector());
      for (float g : grads.back()) sum += static_cast<double>(g) * g;
    }
    const ClipResult r = clip_factor(adamw.parameters(), max_norm);
    EXPECT_NEAR(r.norm, std::sqrt(sum), 1e-12 * std::sqrt(sum));
    ASSERT_TRUE(r.clipped);
    adamw.step(lr, r.factor);
    const double factor = max_norm / (std::sqrt(sum) + 1e-6);
    for (size_t item = 0; item < p_ref.size(); ++item)
      for (size_t i = 0; i < p_ref[item].size(); ++i)
        p_ref[item][i] = state_ref[item][i].step(p_ref[item][i], grads[item][i] * factor, lr, t);
  }
  for (size_t item = 0; item < p_ref.size(); ++item) {
    const std::vector<float> out = adamw.parameters()[item].tensor.to_vector();
    double err = 0.0, norm = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
      err += (out[i] - p_ref[item][i]) * (out[i] - p_ref[item][i]);
      norm += p_ref[item][i] * p_ref[item][i];
    }
    // f32 rounding of a few operations per element: relative 1e-6 is ~10 ulps.
    EXPECT_LT(std::sqrt(err / norm), 1e-6) << kSpecs[item].first;
  }
}

// On CUDA the scale is a pass over the gradient before the fused kernel: the same update
// as the CPU's folded one, to float rounding (the kernels' operations are the same, their
// fused multiply-adds may differ).
TEST(FusedStep, CudaScaledStepMatchesCpu) {
  if (!cuda_built() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (or built without CUDA)";
  const Device gpu = Device::cuda(0);
  Generator gen(5);
  std::vector<NamedParameter> cpu, cuda;
  for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{{"layers.0.mlp.up_proj.weight", {64, 33}},
                                                                              {"norm.weight", {33}}}) {
    Tensor t = Tensor::randn(shape, gen);
    t.set_requires_grad(true);
    Tensor d = t.to(gpu).detach();
    d.set_requires_grad(true);
    cpu.push_back({name, t});
    cuda.push_back({name, d});
  }
  AdamW cpu_opt(cpu, {}), cuda_opt(cuda, {});
  for (int k = 0; k < 3; ++k) {
    set_grads(cpu, k);
    for (size_t i = 0; i < cpu.size(); ++i) cuda[i].tensor.set_grad(cpu[i].tensor.grad().to(gpu));
    const ClipResult a = clip_factor(cpu, 1.0), b = clip_factor(cuda, 1.0);
    ASSERT_TRUE(a.clipped && b.clipped);
    EXPECT_NEAR(b.norm, a.norm, 1e-6 * a.norm);
    cpu_opt.step(1e-2, a.factor);
    cuda_opt.step(1e-2, b.factor);
  }
  for (size_t i = 0; i < cpu.size(); ++i) {
    const std::vector<float> x = cuda[i].tensor.to(Device::cpu()).to_vector(), y = cpu[i].tensor.to_vector();
    double err = 0.0, norm = 0.0;
    for (size_t j = 0; j < x.size(); ++j) {
      err += (static_cast<double>(x[j]) - y[j]) * (static_cast<double>(x[j]) - y[j]);
      norm += static_cast<double>(y[j]) * y[j];
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-6) << cpu[i].name;
  }
}

TEST(FusedStep, RejectsABadGradScale) {
  AdamW adamw(make_params(DType::f32), {});
  set_grads(adamw.parameters(), 0);
  expect_error([&] { adamw.step(1e-2, std::nan("")); }, {"adamw.step", "grad_scale", "nan"});
  expect_error([&] { adamw.step(1e-2, -1.0); }, {"grad_scale", "-1"});
}

}  // namespace
}  // namespace lat
