// Packed sequences (cu_seqlens) in the linear-attention ops: for every chunk_* and
// fused_recurrent_* op, one packed call equals N separate calls, both held to the float64
// reference run sequence by sequence: outputs, final states and every gradient (q, k, v, g,
// beta, initial_state) with random upstream gradients on o and final_state; boundaries
// inside chunks, on chunk edges, 1-token sequences. Invalid offsets are errors naming
// cu_seqlens. The same on CUDA (skipped without a device), where the short convolution,
// RoPE, softmax attention and a whole model over packed sequences are checked against the
// CPU too. Letters as in
// include/lat/linear_attention.h; N sequences, offsets c_0 = 0 < ... < c_N = T.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "layers/fused/attention_op.h"
#include "layers/fused/rope.h"
#include "layers/fused/short_conv.h"
#include "layers/hybrid_lm.h"
#include "tests/expect_error.h"
#include "tests/linear_attention_testing.h"
#include "train/run/device.h"

namespace lat {
namespace {

using testing::DeltaResult;

// ---- the ops under test -----------------------------------------------------------------

/// (q, k, v, g, beta, initial_state, cu_seqlens) -> {o, final_state}, output_final_state on;
/// g and beta undefined for the ops that do not take them.
using PackedOp = std::function<LinearAttentionOutput(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                     const Tensor&, const Tensor&, const Tensor&)>;

struct OpSpec {
  std::string name;
  bool gated = false;      // takes g
  bool delta = false;      // takes beta
  bool normalize = false;  // linear attention's normalizer: state [.., V + 1], positive q, k, state
  bool l2norm = false;     // delta rule: q, k normalized in the op (else k pre-normalized)
  PackedOp op;             // the op under test (chunk_size bound in)
  PackedOp reference;      // the float64 reference (cu_seqlens ignored)
};

std::vector<OpSpec> op_specs(int chunk_size) {
  using T = const Tensor&;
  std::vector<OpSpec> specs;
  for (bool normalize : {false, true}) {
    const std::string suffix = normalize ? "_normalized" : "";
    PackedOp reference = [normalize](T q, T k, T v, T, T, T h0, T) {
      return naive_linear_attn(q, k, v, {}, normalize, h0, true);
    };
    specs.push_back({"chunk_linear_attn" + suffix, false, false, normalize, false,
                     [=](T q, T k, T v, T, T, T h0, T cu) {
                       return chunk_linear_attn(q, k, v, {}, normalize, h0, true, chunk_size, cu);
                     },
                     reference});
    specs.push_back({"fused_recurrent_linear_attn" + suffix, false, false, normalize, false,
                     [=](T q, T k, T v, T, T, T h0, T cu) {
                       return fused_recurrent_linear_attn(q, k, v, {}, normalize, h0, true, cu);
                     },
                     reference});
  }
  PackedOp gla_reference = [](T q, T k, T v, T g, T, T h0, T) { return naive_simple_gla(q, k, v, g, {}, h0, true); };
  specs.push_back(
      {"chunk_simple_gla", true, false, false, false,
       [=](T q, T k, T v, T g, T, T h0, T cu) { return chunk_simple_gla(q, k, v, g, {}, h0, true, chunk_size, cu); },
       gla_reference});
  specs.push_back(
      {"fused_recurrent_simple_gla", true, false, false, false,
       [](T q, T k, T v, T g, T, T h0, T cu) { return fused_recurrent_simple_gla(q, k, v, g, {}, h0, true, cu); },
       gla_reference});
  for (bool l2 : {false, true}) {
    const std::string suffix = l2 ? "_l2" : "";
    PackedOp delta_reference = [l2](T q, T k, T v, T g, T beta, T h0, T) {
      return naive_gated_delta_rule(q, k, v, g, beta, {}, h0, true, l2);
    };
    specs.push_back({"chunk_delta_rule" + suffix, false, true, false, l2,
                     [=](T q, T k, T v, T, T beta, T h0, T cu) {
                       return chunk_delta_rule(q, k, v, beta, {}, h0, true, l2, chunk_size, cu);
                     },
                     delta_reference});
    specs.push_back({"fused_recurrent_delta_rule" + suffix, false, true, false, l2,
                     [=](T q, T k, T v, T, T beta, T h0, T cu) {
                       return fused_recurrent_delta_rule(q, k, v, beta, {}, h0, true, l2, cu);
                     },
                     delta_reference});
    specs.push_back({"chunk_gated_delta_rule" + suffix, true, true, false, l2,
                     [=](T q, T k, T v, T g, T beta, T h0, T cu) {
                       return chunk_gated_delta_rule(q, k, v, g, beta, {}, h0, true, l2, chunk_size, cu);
                     },
                     delta_reference});
    specs.push_back({"fused_recurrent_gated_delta_rule" + suffix, true, true, false, l2,
                     [=](T q, T k, T v, T g, T beta, T h0, T cu) {
                       return fused_recurrent_gated_delta_rule(q, k, v, g, beta, {}, h0, true, l2, cu);
                     },
                     delta_reference});
  }
  return specs;
}

// ---- inputs and runs ----------------------------------------------------------------------

/// The sequence lengths of a case, packed into one row of T = their sum tokens.
struct Layout {
  std::string name;
  std::vector<int64_t> lengths;
  int chunk_size = 16;
};

std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets{0};
  for (int64_t L : lengths) offsets.push_back(offsets.back() + L);
  return offsets;
}

Tensor cu_seqlens_of(const std::vector<int64_t>& lengths) {
  const std::vector<int64_t> offsets = offsets_of(lengths);
  return Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())});
}

struct PackedInputs {
  Tensor q, k, v, g, beta, initial_state;  // g, beta, initial_state undefined when absent
  Tensor d_o, d_final_state;               // random upstream gradients
};

constexpr int64_t kH = 2, kK = 8, kV = 12;

/// Seeded f32 inputs of one packed row: q, k ~ N(0, 1) (U(0.1, 1) with the normalizer),
/// v ~ N(0, 1), g ~ U(-0.1, -0.01), beta ~ U(0.01, 0.99), keys of the delta rule
/// L2-normalized unless the op does it, initial states ~ N(0, 1) (U(0, 1) with the
/// normalizer), one per sequence.
PackedInputs make_packed_inputs(const OpSpec& spec, const std::vector<int64_t>& lengths, bool initial_state,
                                uint64_t seed) {
  Generator gen(seed);
  const int64_t T = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  const int64_t N = static_cast<int64_t>(lengths.size()), Vs = spec.normalize ? kV + 1 : kV;
  auto features = [&](const Shape& s) {
    return spec.normalize ? Tensor::uniform(s, gen, 0.1, 1.0) : Tensor::randn(s, gen);
  };
  PackedInputs in;
  in.q = features({1, T, kH, kK});
  in.k = features({1, T, kH, kK});
  in.v = Tensor::randn({1, T, kH, kV}, gen);
  if (spec.gated) in.g = Tensor::uniform({1, T, kH}, gen, -0.1, -0.01);
  if (spec.delta) {
    in.beta = Tensor::uniform({1, T, kH}, gen, 0.01, 0.99);
    if (!spec.l2norm) testing::normalize_rows(in.k);
  }
  if (initial_state)
    in.initial_state = spec.normalize ? Tensor::uniform({N, kH, kK, Vs}, gen, 0.0, 1.0)
                                      : Tensor::randn({N, kH, kK, Vs}, gen);
  in.d_o = Tensor::randn({1, T, kH, kV}, gen);
  in.d_final_state = Tensor::randn({N, kH, kK, Vs}, gen);
  return in;
}

/// (q, k, v, g, beta, initial_state) -> {o, final_state [N, ...]} over the whole packed row.
using Body = std::function<LinearAttentionOutput(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                 const Tensor&, const Tensor&)>;

/// Runs `body` on leaf copies of the inputs in `dtype` on `device`, then backward from
/// sum(o * d_o) + sum(final_state * d_final_state); results and gradients on the CPU.
DeltaResult run_body(const Body& body, const PackedInputs& in, DType dtype, Device device = Device::cpu()) {
  auto leaf = [&](const Tensor& t) {
    if (!t.defined()) return Tensor();
    Tensor copy = t.to(dtype).to(device).clone().detach();
    copy.set_requires_grad(true);
    return copy;
  };
  Tensor q = leaf(in.q), k = leaf(in.k), v = leaf(in.v), g = leaf(in.g), beta = leaf(in.beta);
  Tensor h0 = leaf(in.initial_state);
  LinearAttentionOutput out = body(q, k, v, g, beta, h0);
  Tensor loss = sum(out.o * in.d_o.to(dtype).to(device)) + sum(out.final_state * in.d_final_state.to(dtype).to(device));
  backward(loss);
  auto cpu = [](const Tensor& t) { return t.defined() ? t.detach().to(Device::cpu()) : Tensor(); };
  auto grad = [&](const Tensor& t) { return t.defined() ? cpu(t.grad()) : Tensor(); };
  return {{cpu(out.o), cpu(out.final_state), grad(q), grad(k), grad(v), grad(g), grad(h0)}, grad(beta)};
}

/// One call of `op` over the packed row with cu_seqlens.
Body packed(const PackedOp& op, const Tensor& cu_seqlens) {
  return [=](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    return op(q, k, v, g, beta, h0, cu_seqlens);
  };
}

/// One call of `op` per sequence (no cu_seqlens) on slices of the row and of the initial
/// states; outputs concatenated over T, final states over N.
Body separately(const PackedOp& op, const std::vector<int64_t>& lengths) {
  return [=](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    const std::vector<int64_t> c = offsets_of(lengths);
    std::vector<Tensor> o, final_states;
    for (size_t n = 0; n < lengths.size(); ++n) {
      auto part = [&](const Tensor& x) { return x.defined() ? slice(x, 1, c[n], c[n + 1]) : x; };
      const Tensor h0_n = h0.defined() ? slice(h0, 0, n, n + 1) : Tensor();
      LinearAttentionOutput r = op(part(q), part(k), part(v), part(g), part(beta), h0_n, Tensor());
      o.push_back(r.o);
      final_states.push_back(r.final_state);
    }
    return LinearAttentionOutput{concat(o, 1), concat(final_states, 0)};
  };
}

// ---- packed equals separate calls, on the CPU ---------------------------------------------

std::vector<Layout> layouts() {
  return {
      // Boundaries inside chunks and on chunk edges (16, 32), 1-token sequences, C + 1.
      {"mixed", {5, 1, 16, 11, 1, 32, 17, 1}, 16},
      {"ones", {1, 1, 1}, 16},
      {"one_sequence", {40}, 16},
      {"default_chunk", {70, 3, 64, 1}, 64},
  };
}

struct VarlenCase {
  size_t op = 0;  // index into op_specs
  Layout layout;
  bool initial_state = true;
};

std::vector<VarlenCase> varlen_cases() {
  std::vector<VarlenCase> cases;
  const size_t ops = op_specs(16).size();
  for (size_t op = 0; op < ops; ++op)
    for (const Layout& layout : layouts()) {
      cases.push_back({op, layout, true});
      if (layout.name == "mixed") cases.push_back({op, layout, false});
    }
  return cases;
}

std::string varlen_case_name(const ::testing::TestParamInfo<VarlenCase>& info) {
  const VarlenCase& c = info.param;
  return op_specs(16)[c.op].name + "_" + c.layout.name + (c.initial_state ? "_h0" : "");
}

class VarlenSweep : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(VarlenSweep, PackedEqualsSeparateCallsAndFloat64Reference) {
  const VarlenCase& c = GetParam();
  const OpSpec spec = op_specs(c.layout.chunk_size)[c.op];
  const PackedInputs in = make_packed_inputs(spec, c.layout.lengths, c.initial_state, 1000 + c.op);
  const DeltaResult ref = run_body(separately(spec.reference, c.layout.lengths), in, DType::f64);
  const DeltaResult one_call = run_body(packed(spec.op, cu_seqlens_of(c.layout.lengths)), in, DType::f32);
  const DeltaResult calls = run_body(separately(spec.op, c.layout.lengths), in, DType::f32);
  testing::expect_delta_close(one_call, ref, testing::kTol, "packed");
  testing::expect_delta_close(calls, ref, testing::kTol, "separate");
  // The same kernels on the same numbers: only the addresses differ.
  testing::expect_delta_close(one_call, calls, 1e-6, "packed vs separate");
}

INSTANTIATE_TEST_SUITE_P(Ops, VarlenSweep, ::testing::ValuesIn(varlen_cases()), varlen_case_name);

// A packed call without output_final_state returns no state, and one without any input
// requiring grad records nothing.
TEST(Varlen, ForwardOnlyRecordsNothing) {
  Generator gen(5);
  Tensor q = Tensor::randn({1, 9, 2, 4}, gen), v = Tensor::randn({1, 9, 2, 3}, gen);
  Tensor g = Tensor::full({1, 9, 2}, -0.1), beta = Tensor::full({1, 9, 2}, 0.5);
  const Tensor cu = cu_seqlens_of({4, 5});
  LinearAttentionOutput r = chunk_gated_delta_rule(q, q, v, g, beta, {}, {}, false, true, 64, cu);
  EXPECT_EQ(r.o.shape(), Shape({1, 9, 2, 3}));
  EXPECT_FALSE(r.final_state.defined());
  EXPECT_EQ(tape_size(), 0u);
}

// ---- errors ------------------------------------------------------------------------------

TEST(Varlen, InvalidOffsetsAreErrorsNamingCuSeqlens) {
  Generator gen(7);
  const int64_t T = 6;
  Tensor q = Tensor::randn({1, T, 2, 8}, gen), v = Tensor::randn({1, T, 2, 6}, gen);
  Tensor g = Tensor::full({1, T, 2}, -0.1), beta = Tensor::full({1, T, 2}, 0.5);
  auto offsets = [](std::vector<int64_t> c) { return Tensor::from_vector(c, {static_cast<int64_t>(c.size())}); };
  using testing::expect_error;
  auto gla = [&](const Tensor& cu) { chunk_simple_gla(q, q, v, g, {}, {}, true, 64, cu); };
  expect_error([&] { gla(offsets({1, 3, 6})); }, {"chunk_simple_gla", "cu_seqlens", "c_0 = 0", "got 1"});
  expect_error(
      [&] {
        gla(offsets({0, 3, 3, 6}));
      },
      {"chunk_simple_gla", "cu_seqlens", "strictly increasing", "c_2 = 3 after c_1 = 3"});
  expect_error([&] { gla(offsets({0, 4, 2, 6})); }, {"cu_seqlens", "strictly increasing", "c_2 = 2 after c_1 = 4"});
  expect_error([&] { gla(offsets({0, 3, 5})); }, {"chunk_simple_gla", "cu_seqlens", "c_N = T = 6", "c_2 = 5"});
  expect_error([&] { gla(offsets({0, 3, 7})); }, {"cu_seqlens", "c_N = T = 6", "c_2 = 7"});
  expect_error(
      [&] {
        gla(Tensor::from_vector({0.0f, 6.0f}, {2}));
      },
      {"chunk_simple_gla", "cu_seqlens", "dtype i64", "f32"});
  expect_error([&] { gla(offsets({0, 6}).reshape({1, 2})); }, {"cu_seqlens", "[N + 1]", "[1, 2]"});
  expect_error([&] { gla(offsets({0})); }, {"cu_seqlens", "N >= 1", "[1]"});
  Tensor q2 = Tensor::randn({2, 3, 2, 8}, gen), v2 = Tensor::randn({2, 3, 2, 6}, gen);
  expect_error(
      [&] {
        chunk_simple_gla(q2, q2, v2, Tensor::full({2, 3, 2}, -0.1), {}, {}, false, 64, offsets({0, 3}));
      },
      {"chunk_simple_gla", "cu_seqlens", "B == 1", "B=2"});
  // initial_state must hold one state per sequence.
  expect_error(
      [&] {
        chunk_simple_gla(q, q, v, g, {}, Tensor::zeros({1, 2, 8, 6}), true, 64, offsets({0, 2, 6}));
      },
      {"chunk_simple_gla", "initial_state", "[2, 2, 8, 6]", "[1, 2, 8, 6]", "cu_seqlens"});
  expect_error(
      [&] {
        chunk_linear_attn(q, q, v, {}, true, Tensor::zeros({2, 2, 8, 6}), true, 64, offsets({0, 2, 6}));
      },
      {"chunk_linear_attn", "initial_state", "[2, 2, 8, 7]", "[2, 2, 8, 6]"});
  // Every op reads the offsets the same way.
  const Tensor bad = offsets({0, 2, 5});
  expect_error([&] { chunk_linear_attn(q, q, v, {}, false, {}, false, 64, bad); }, {"chunk_linear_attn", "c_N"});
  expect_error([&] { fused_recurrent_linear_attn(q, q, v, {}, false, {}, false, bad); },
               {"fused_recurrent_linear_attn", "c_N"});
  expect_error([&] { fused_recurrent_simple_gla(q, q, v, g, {}, {}, false, bad); },
               {"fused_recurrent_simple_gla", "c_N"});
  expect_error([&] { chunk_delta_rule(q, q, v, beta, {}, {}, false, true, 64, bad); }, {"chunk_delta_rule", "c_N"});
  expect_error([&] { fused_recurrent_delta_rule(q, q, v, beta, {}, {}, false, true, bad); },
               {"fused_recurrent_delta_rule", "c_N"});
  expect_error([&] { chunk_gated_delta_rule(q, q, v, g, beta, {}, {}, false, true, 64, bad); },
               {"chunk_gated_delta_rule", "c_N"});
  expect_error([&] { fused_recurrent_gated_delta_rule(q, q, v, g, beta, {}, {}, false, true, bad); },
               {"fused_recurrent_gated_delta_rule", "c_N"});
}

// ---- CUDA ----------------------------------------------------------------------------------

#define LAT_REQUIRE_CUDA()                                                                                     \
  do {                                                                                                         \
    if (cuda_device_count() == 0)                                                                              \
      GTEST_SKIP() << (cuda_built() ? "no CUDA device visible" : "lat was built without CUDA (LAT_CUDA=OFF)"); \
  } while (0)

// The chunk ops on the GPU, packed (cu_seqlens on the CPU, then on the GPU), against the
// float64 reference and the CPU's packed call.
TEST(VarlenCuda, PackedChunkOpsMatchCpuAndFloat64Reference) {
  LAT_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const std::vector<int64_t> lengths{5, 1, 16, 11, 1, 17};
  const Tensor cu = cu_seqlens_of(lengths);
  const std::vector<OpSpec> specs = op_specs(16);
  for (size_t i = 0; i < specs.size(); ++i) {
    const OpSpec& spec = specs[i];
    if (spec.name.rfind("chunk_", 0) != 0) continue;  // fused_recurrent_* run on the CPU only
    SCOPED_TRACE(spec.name);
    const PackedInputs in = make_packed_inputs(spec, lengths, true, 2000 + i);
    const DeltaResult ref = run_body(separately(spec.reference, lengths), in, DType::f64);
    const DeltaResult cpu = run_body(packed(spec.op, cu), in, DType::f32);
    for (const Tensor& offsets : {cu, cu.to(gpu)}) {
      const DeltaResult on_gpu = run_body(packed(spec.op, offsets), in, DType::f32, gpu);
      testing::expect_delta_close(on_gpu, ref, testing::kTol, "cuda packed");
      testing::expect_delta_close(on_gpu, cpu, testing::kTol, "cuda vs cpu packed");
    }
  }
}

// The fused ops of the layers on the GPU over packed sequences (pieces shorter than the
// short conv's kernel, sequences across attention's 64-row tiles) against the same calls on
// the CPU: outputs and every gradient.
TEST(VarlenCuda, PackedShortConvRopeAndAttentionMatchCpu) {
  LAT_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const std::vector<int64_t> lengths{1, 2, 3, 70, 1, 5};
  const int64_t T = 82;
  const Tensor cu = cu_seqlens_of(lengths);
  Generator gen(31);
  // (inputs) -> output, on the inputs' device.
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  auto check = [&](const char* name, const Fn& f, const std::vector<Tensor>& inputs) {
    SCOPED_TRACE(name);
    auto run_on = [&](Device device) {
      std::vector<Tensor> leaves;
      for (const Tensor& t : inputs) leaves.push_back(t.to(device).clone().detach().set_requires_grad(true));
      Tensor y = f(leaves);
      Generator upstream(32);
      backward(sum(y * Tensor::randn(y.shape(), upstream).to(device)));
      std::vector<Tensor> results{y.detach().to(Device::cpu())};
      for (const Tensor& t : leaves) results.push_back(t.grad().to(Device::cpu()));
      return results;
    };
    const std::vector<Tensor> cpu = run_on(Device::cpu()), on_gpu = run_on(gpu);
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_LT(relative_error(on_gpu[i], cpu[i]), 1e-5) << "result " << i;
  };
  check("short_conv", [&](const std::vector<Tensor>& in) { return short_conv(in[0], in[1], {}, cu); },
        {Tensor::randn({1, T, 40}, gen), Tensor::randn({40, 1, 4}, gen)});
  check("rotary_embedding", [&](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 1e4, 0, cu); },
        {Tensor::randn({1, T, 2, 16}, gen)});
  for (int64_t window : {0, 3})
    check("causal_attention",
          [&](const std::vector<Tensor>& in) { return causal_attention(in[0], in[1], in[2], {}, window, {}, cu); },
          {Tensor::randn({1, T, 4, 16}, gen), Tensor::randn({1, T, 2, 16}, gen), Tensor::randn({1, T, 2, 8}, gen)});
}

// A model of every mixer kind on the GPU over a packed window (the row start implied, a
// 1-token document, cu_seqlens on the CPU): logits and every parameter gradient as on the
// CPU.
TEST(VarlenCuda, PackedModelMatchesCpu) {
  LAT_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  HybridLMConfig c;
  c.vocab_size = 11;
  c.layers = {"gdn", "attn", "simple_gla", "linear_attn", "delta_net", "retention"};
  c.mixer.d_model = 16;
  c.mixer.n_heads = 2;
  c.mixer.chunk_size = 4;
  c.init_std = 0.2;
  Generator gen_cpu(3), gen_gpu(3);
  HybridLM cpu_model(c, gen_cpu), gpu_model(c, gen_gpu);
  move_parameters(gpu_model, gpu);
  const int64_t B = 2, T = 13;
  Generator gen(4);
  std::vector<int64_t> ids(B * T);
  for (int64_t& id : ids) id = gen.randint(c.vocab_size);
  const Tensor tokens = Tensor::from_vector(ids, {B, T}), cu = cu_seqlens_of({5, 1, 9, 11});
  const Tensor w = Tensor::randn({B, T, c.vocab_size}, gen);
  const Tensor cpu_logits = cpu_model.forward(tokens, cu);
  backward(sum(cpu_logits * w));
  const Tensor gpu_logits = gpu_model.forward(tokens.to(gpu), cu);
  backward(sum(gpu_logits * w.to(gpu)));
  EXPECT_LT(relative_error(gpu_logits.detach().to(Device::cpu()), cpu_logits.detach()), 1e-5);
  const auto cpu_params = cpu_model.named_parameters(), gpu_params = gpu_model.named_parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i)
    EXPECT_LT(relative_error(gpu_params[i].second.grad().to(Device::cpu()), cpu_params[i].second.grad()), 1e-4)
        << cpu_params[i].first;
}

}  // namespace
}  // namespace lat
