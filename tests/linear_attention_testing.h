// Test helpers for the linear-attention ops: seeded inputs, one forward+backward with
// random upstream gradients on o and final_state, and per-tensor comparison with the
// relative error ||a - b|| / ||b|| of DESIGN.md. Letters as in include/lat/linear_attention.h.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "lat/lat.h"

namespace lat::testing {

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

/// Expects every defined tensor of `actual` within `tol` relative error of `expected`.
inline void expect_close(const Result& actual, const Result& expected, double tol) {
  auto check = [&](const char* name, const Tensor& a, const Tensor& b) {
    ASSERT_EQ(a.defined(), b.defined()) << name;
    if (!a.defined()) return;
    ASSERT_EQ(a.shape(), b.shape()) << name;
    double err = relative_error(a, b);
    EXPECT_LT(err, tol) << name << ": relative error " << err;
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

/// Expects `fn` to throw lat::Error whose message contains every string in `parts`.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected lat::Error";
  } catch (const Error& e) {
    std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "message '" << message << "' lacks '" << part << "'";
  }
}

}  // namespace lat::testing
