// Test helpers for the linear-attention ops, the sweeps of every chunk op against its
// float64 reference: seeded inputs, one forward+backward with random upstream gradients on
// o and final_state, and per-tensor comparison with the relative error ||a - b|| / ||b|| of
// DESIGN.md. The (gated) delta-rule ops add the beta input, keys L2-normalized as the layers
// feed them, a record of the largest error seen per tensor name (printed at exit), and the
// checks both delta-rule tests run (the sweep against the reference, chaining, token-by-token
// steps). Letters as in include/lat/linear_attention.h.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lat/lat.h"

namespace lat::testing {

/// The tolerance of the sweeps, relative error (DESIGN.md: float32 against the float64 reference).
inline constexpr double kTol = 1e-4;

/// Gate regimes of the tests: none (no g input), zero (g = 0), mild (g ~ -0.05), strong (g = -20).
enum class Gate { none, zero, mild, strong };

inline const char* gate_name(Gate g) {
  switch (g) {
    case Gate::none: return "nogate";
    case Gate::zero: return "g0";
    case Gate::mild: return "gmild";
    case Gate::strong: return "gstrong";
  }
  return "?";
}

/// One test shape: q, k [B, T, H, K], v [B, T, H, V]; with or without initial state.
struct Case {
  int64_t B = 1, T = 1, H = 1, K = 16, V = 16;
  Gate gate = Gate::none;
  bool initial_state = false;
  bool positive = false;  // q, k, initial state in (0, 1): feature-mapped inputs for the normalizer
  uint64_t seed = 0;
};

inline std::string case_name(const Case& c) {
  std::ostringstream name;
  name << "B" << c.B << "T" << c.T << "H" << c.H << "K" << c.K << "V" << c.V << "_" << gate_name(c.gate)
       << (c.initial_state ? "_h0" : "") << (c.positive ? "_pos" : "");
  return name.str();
}

/// The grid every sweep starts with, seeds counting up from `seed` (left past the last):
/// B = H = 2, each T in {1, 2, 63, 64, 65, 200} x (K, V) in {(16, 16), (48, 80)} x `gates`
/// x without/with initial state; then B = 1, H = 2, K = V = 64, each T in {1, 65, 200} x
/// `large_gates`, with initial state unless T = 65.
inline std::vector<Case> sweep_grid(std::initializer_list<Gate> gates, std::initializer_list<Gate> large_gates,
                                    uint64_t& seed) {
  std::vector<Case> cases;
  for (int64_t T : {1, 2, 63, 64, 65, 200})
    for (auto [K, V] : {std::pair<int64_t, int64_t>{16, 16}, {48, 80}})
      for (Gate gate : gates)
        for (bool h0 : {false, true}) cases.push_back({2, T, 2, K, V, gate, h0, false, seed++});
  for (int64_t T : {1, 65, 200})
    for (Gate gate : large_gates) cases.push_back({1, T, 2, 64, 64, gate, T != 65, false, seed++});
  return cases;
}

/// f32 inputs (leaves that do not require grad) and upstream gradients of one case.
struct Inputs {
  Tensor q, k, v, g, initial_state;  // g, initial_state undefined when absent
  Tensor d_o, d_final_state;         // random upstream gradients
};

/// Seeded inputs: q, k, v ~ N(0, 1) (U(0.1, 1) for q, k when positive); g per the regime
/// (mild: U(-0.1, -0.01)); initial state ~ N(0, 1) (U(0, 1) when positive) with state_v
/// columns; upstream gradients ~ N(0, 1).
inline Inputs make_inputs(const Case& c, int64_t state_v) {
  Generator gen(c.seed * 7919 + 17);
  Inputs in;
  auto features = [&](const Shape& s) {
    return c.positive ? Tensor::uniform(s, gen, 0.1, 1.0) : Tensor::randn(s, gen);
  };
  in.q = features({c.B, c.T, c.H, c.K});
  in.k = features({c.B, c.T, c.H, c.K});
  in.v = Tensor::randn({c.B, c.T, c.H, c.V}, gen);
  switch (c.gate) {
    case Gate::none: break;
    case Gate::zero: in.g = Tensor::zeros({c.B, c.T, c.H}); break;
    case Gate::mild: in.g = Tensor::uniform({c.B, c.T, c.H}, gen, -0.1, -0.01); break;
    case Gate::strong: in.g = Tensor::full({c.B, c.T, c.H}, -20.0); break;
  }
  if (c.initial_state)
    in.initial_state = c.positive ? Tensor::uniform({c.B, c.H, c.K, state_v}, gen, 0.0, 1.0)
                                  : Tensor::randn({c.B, c.H, c.K, state_v}, gen);
  in.d_o = Tensor::randn({c.B, c.T, c.H, c.V}, gen);
  in.d_final_state = Tensor::randn({c.B, c.H, c.K, state_v}, gen);
  return in;
}

/// Outputs and input gradients of one run (gradients undefined for absent inputs).
struct Result {
  Tensor o, final_state, dq, dk, dv, dg, d_initial_state;
};

/// An op under test: (q, k, v, g, initial_state) -> {o, final_state}, with
/// output_final_state = true.
using Op = std::function<LinearAttentionOutput(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                               const Tensor&)>;

/// Runs `op` on copies of the inputs converted to `dtype` (leaves requiring grad), then
/// backward from sum(o * d_o) + sum(final_state * d_final_state).
inline Result run(const Op& op, const Inputs& in, DType dtype) {
  auto leaf = [&](const Tensor& t) {
    if (!t.defined()) return Tensor();
    Tensor copy = t.to(dtype).clone().detach();
    copy.set_requires_grad(true);
    return copy;
  };
  Tensor q = leaf(in.q), k = leaf(in.k), v = leaf(in.v), g = leaf(in.g), h0 = leaf(in.initial_state);
  LinearAttentionOutput out = op(q, k, v, g, h0);
  Tensor loss = sum(out.o * in.d_o.to(dtype)) + sum(out.final_state * in.d_final_state.to(dtype));
  backward(loss);
  auto grad = [](const Tensor& t) { return t.defined() ? t.grad() : Tensor(); };
  return {out.o.detach(), out.final_state.detach(), grad(q), grad(k), grad(v), grad(g), grad(h0)};
}

/// Expects `a` within `tol` relative error of `b`: both undefined (an absent input's
/// gradient), or both defined with one shape (a fatal failure otherwise). Sets `err` to the
/// relative error (0 when both are undefined).
inline void expect_tensor_close(const std::string& name, const Tensor& a, const Tensor& b, double tol, double& err) {
  err = 0.0;
  ASSERT_EQ(a.defined(), b.defined()) << name;
  if (!a.defined()) return;
  ASSERT_EQ(a.shape(), b.shape()) << name;
  err = relative_error(a, b);
  EXPECT_LT(err, tol) << name << ": relative error " << err;
}

/// Expects every defined tensor of `actual` within `tol` relative error of `expected`.
inline void expect_close(const Result& actual, const Result& expected, double tol) {
  auto check = [&](const char* name, const Tensor& a, const Tensor& b) {
    double err = 0.0;
    expect_tensor_close(name, a, b, tol, err);
  };
  check("o", actual.o, expected.o);
  check("final_state", actual.final_state, expected.final_state);
  check("dq", actual.dq, expected.dq);
  check("dk", actual.dk, expected.dk);
  check("dv", actual.dv, expected.dv);
  check("dg", actual.dg, expected.dg);
  check("d_initial_state", actual.d_initial_state, expected.d_initial_state);
}

/// True when every element is finite.
inline bool all_finite(const Tensor& t) {
  for (double x : t.to_vector<double>())
    if (!std::isfinite(x)) return false;
  return true;
}

// ---- simple_gla and linear_attn as Ops ---------------------------------------------------

/// chunk_simple_gla, fused_recurrent_simple_gla and the float64 reference naive_simple_gla
/// (default scale, output_final_state = true).
inline Op simple_gla_chunk(int chunk_size = 64) {
  return [=](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    return chunk_simple_gla(q, k, v, g, {}, h0, true, chunk_size);
  };
}
inline Op simple_gla_recurrent() {
  return [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    return fused_recurrent_simple_gla(q, k, v, g, {}, h0, true);
  };
}
inline Op simple_gla_naive() {
  return [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    return naive_simple_gla(q, k, v, g, {}, h0, true);
  };
}

/// chunk_linear_attn, fused_recurrent_linear_attn and the float64 reference
/// naive_linear_attn, with or without the normalizer (g ignored; default scale,
/// output_final_state = true).
inline Op linear_attn_chunk(bool normalize, int chunk_size = 64) {
  return [=](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&, const Tensor& h0) {
    return chunk_linear_attn(q, k, v, {}, normalize, h0, true, chunk_size);
  };
}
inline Op linear_attn_recurrent(bool normalize) {
  return [=](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&, const Tensor& h0) {
    return fused_recurrent_linear_attn(q, k, v, {}, normalize, h0, true);
  };
}
inline Op linear_attn_naive(bool normalize) {
  return [=](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&, const Tensor& h0) {
    return naive_linear_attn(q, k, v, {}, normalize, h0, true);
  };
}

// ---- the (gated) delta rule --------------------------------------------------------------

/// A delta-rule case: the shared Case plus the in-kernel L2 norm flag and the chunk size.
struct DeltaCase {
  Case base;
  bool l2norm_in_kernel = false;  // raw q, k, normalized by the op; else k pre-normalized
  int chunk_size = 64;
};

inline std::string delta_case_name(const DeltaCase& c) {
  return case_name(c.base) + (c.l2norm_in_kernel ? "_l2" : "") +
         (c.chunk_size != 64 ? "_C" + std::to_string(c.chunk_size) : "");
}

/// delta_case_name of a sweep parameter: the name generator of INSTANTIATE_TEST_SUITE_P.
inline std::string delta_param_name(const ::testing::TestParamInfo<DeltaCase>& info) {
  return delta_case_name(info.param);
}

struct DeltaInputs {
  Inputs base;  // q, k, v, g, initial_state, d_o, d_final_state
  Tensor beta;  // [B, T, H] ~ U(0.01, 0.99)
};

/// Rows of x [..., D] divided by their L2 norm (in place, f32): the keys the layers feed.
inline void normalize_rows(Tensor& x) {
  const int64_t D = x.size(-1);
  float* p = x.data<float>();
  for (int64_t r = 0; r < x.numel() / D; ++r) {
    double s = 0.0;
    for (int64_t i = 0; i < D; ++i) s += double(p[r * D + i]) * p[r * D + i];
    const float inv = static_cast<float>(1.0 / std::sqrt(s));
    for (int64_t i = 0; i < D; ++i) p[r * D + i] *= inv;
  }
}

/// Seeded inputs of make_inputs (state_v = V) plus beta; k L2-normalized unless the op
/// normalizes it itself.
inline DeltaInputs make_delta_inputs(const DeltaCase& c) {
  DeltaInputs in{make_inputs(c.base, c.base.V), Tensor()};
  Generator gen(c.base.seed * 104729 + 3);
  in.beta = Tensor::uniform({c.base.B, c.base.T, c.base.H}, gen, 0.01, 0.99);
  if (!c.l2norm_in_kernel) normalize_rows(in.base.k);
  return in;
}

struct DeltaResult {
  Result base;  // o, final_state, dq, dk, dv, dg, d_initial_state
  Tensor dbeta;
};

/// An op under test: (q, k, v, g, beta, initial_state) -> {o, final_state}.
using DeltaOp = std::function<LinearAttentionOutput(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                    const Tensor&, const Tensor&)>;

/// Runs `op` on leaf copies converted to `dtype`, then backward from
/// sum(o * d_o) + sum(final_state * d_final_state).
inline DeltaResult run_delta(const DeltaOp& op, const DeltaInputs& in, DType dtype) {
  Tensor beta = in.beta.to(dtype).clone().detach();
  beta.set_requires_grad(true);
  Op wrapped = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    return op(q, k, v, g, beta, h0);
  };
  Result r = run(wrapped, in.base, dtype);
  return {r, beta.grad()};
}

/// Largest relative error seen per tensor name (for the report printed at exit).
inline std::map<std::string, double>& max_errors() {
  static std::map<std::string, double> errors;
  return errors;
}

/// Prints max_errors() when the test program ends.
class PrintMaxErrors : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [name, err] : max_errors()) std::printf("max relative error %-28s %.3g\n", name.c_str(), err);
  }
};

/// Registered at start-up, so every test program that includes this header prints them.
inline ::testing::Environment* const kPrintMaxErrors = ::testing::AddGlobalTestEnvironment(new PrintMaxErrors);

/// Expects every defined tensor of `actual` within `tol` of `expected`; `label` prefixes
/// the names recorded in max_errors().
inline void expect_delta_close(const DeltaResult& actual, const DeltaResult& expected, double tol,
                               const std::string& label) {
  auto check = [&](const char* name, const Tensor& a, const Tensor& b) {
    double err = 0.0;
    expect_tensor_close(label + " " + name, a, b, tol, err);
    if (!a.defined() || !b.defined()) return;
    double& worst = max_errors()[label + " " + name];
    worst = std::max(worst, err);
  };
  const Result &a = actual.base, &b = expected.base;
  check("o", a.o, b.o);
  check("final_state", a.final_state, b.final_state);
  check("dq", a.dq, b.dq);
  check("dk", a.dk, b.dk);
  check("dv", a.dv, b.dv);
  check("dg", a.dg, b.dg);
  check("dbeta", actual.dbeta, expected.dbeta);
  check("d_initial_state", a.d_initial_state, b.d_initial_state);
}

/// The sweep check of one case: chunk and fused_recurrent (float32) against the float64
/// reference on the case's seeded inputs, each within `tol` (labels "chunk", "fused_recurrent").
inline void expect_chunk_and_recurrent_match_reference(const DeltaCase& c, const DeltaOp& reference,
                                                       const DeltaOp& chunk, const DeltaOp& recurrent, double tol) {
  DeltaInputs in = make_delta_inputs(c);
  DeltaResult ref = run_delta(reference, in, DType::f64);
  expect_delta_close(run_delta(chunk, in, DType::f32), ref, tol, "chunk");
  expect_delta_close(run_delta(recurrent, in, DType::f32), ref, tol, "fused_recurrent");
}

/// x[:, t] of x [B, T, ...]: [B, ...]; undefined stays undefined (no g).
inline Tensor token_at(const Tensor& x, int64_t t) {
  if (!x.defined()) return x;
  Shape s = x.shape();
  s.erase(s.begin() + 1);
  return slice(x, 1, t, t + 1).reshape(s);
}

/// A recurrent step under test: (q_t, k_t, v_t, g_t, beta_t, state) -> o_t [B, H, V],
/// updating state [B, H, K, V] in place; g_t is undefined for the ungated delta rule.
using DeltaStep =
    std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&)>;

/// Runs `step` token by token over the inputs of `c` from a copy of their initial state and
/// expects the outputs (concatenated over T) and the final state within 1e-6 of `ref`, the
/// fused_recurrent result: the same float32 math, one token at a time.
inline void expect_steps_match(const DeltaCase& c, const DeltaInputs& in, const LinearAttentionOutput& ref,
                               const DeltaStep& step) {
  const Inputs& b = in.base;
  Tensor state = b.initial_state.clone();
  std::vector<Tensor> o_t;
  for (int64_t t = 0; t < c.base.T; ++t)
    o_t.push_back(
        step(token_at(b.q, t), token_at(b.k, t), token_at(b.v, t), token_at(b.g, t), token_at(in.beta, t), state)
            .reshape({c.base.B, 1, c.base.H, c.base.V}));
  EXPECT_LT(relative_error(concat(o_t, 1), ref.o), 1e-6);
  EXPECT_LT(relative_error(state, ref.final_state), 1e-6);
}

/// One call over T = 150 tokens equals two calls over 75 chained through final_state ->
/// initial_state: outputs, final state and every gradient (through the chained state).
inline void expect_chaining(Gate gate, const DeltaOp& op) {
  const DeltaCase c{{2, 150, 2, 16, 24, gate, true, false, 31}};
  DeltaInputs in = make_delta_inputs(c);
  DeltaResult whole = run_delta(op, in, DType::f32);
  auto two_halves = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const Tensor& h0) {
    auto half = [](const Tensor& x, int64_t i) { return x.defined() ? slice(x, 1, i * 75, (i + 1) * 75) : x; };
    LinearAttentionOutput first = op(half(q, 0), half(k, 0), half(v, 0), half(g, 0), half(beta, 0), h0);
    LinearAttentionOutput second = op(half(q, 1), half(k, 1), half(v, 1), half(g, 1), half(beta, 1), first.final_state);
    return LinearAttentionOutput{concat({first.o, second.o}, 1), second.final_state};
  };
  DeltaResult chained = run_delta(two_halves, in, DType::f32);
  // Both sides are float32 computations of the same recurrence, cut at different chunks.
  expect_delta_close(chained, whole, 1e-5, "chaining");
}

}  // namespace lat::testing
