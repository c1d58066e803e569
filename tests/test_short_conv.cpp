// The short convolution's float32 CPU kernels (layers/fused/short_conv.cpp) against a float64
// reference written here as plain loops: the output y and every gradient (dx, dweight,
// d(initial_state)), element by element, within bounds derived from float32 rounding; shapes
// with whole 16-channel vectors and with tails, kernel sizes 1 to 5, T shorter than the
// kernel, an initial state, packed sequences (cu_seqlens) with pieces shorter than the
// kernel, and the main job's shape (configs/shakespeare_hybrid.yaml: batch 4, block 256, 128
// channels, conv_size 4; and its packed form). Also: the same bits at 1, 2 and 3 threads,
// and float64 finite differences over shapes wide enough for the vector blocks.
// Letters: B batch, T tokens, D channels, W kernel size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lat/lat.h"
#include "layers/fused/short_conv.h"
#include "tests/bitwise.h"

namespace lat {
namespace {

constexpr double kUnit = 0x1p-24;  // float32 unit roundoff
// fast_exp's relative error bound, as tests/test_fast_exp.cpp holds it (2 float ulps).
constexpr double kExpError = 2.5e-7;

// gamma_n = n u / (1 - n u): the relative error bound of a float32 sum of n terms, or of a
// chain of n multiply-adds, against the sum of the terms' magnitudes (Higham, Accuracy and
// Stability of Numerical Algorithms, 2nd ed., sec. 3.1).
double gamma(int64_t n) { return static_cast<double>(n) * kUnit / (1.0 - static_cast<double>(n) * kUnit); }

struct Case {
  std::string name;
  int64_t B, T, D, W;
  bool with_state;
  std::vector<int64_t> pieces;  // packed sequence lengths (B == 1, summing to T), or none
};

// cu_seqlens [N + 1] of the pieces.
Tensor offsets_of(const std::vector<int64_t>& pieces) {
  std::vector<int64_t> offsets{0};
  for (int64_t L : pieces) offsets.push_back(offsets.back() + L);
  return Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())});
}

// Each output with its float64 value and the bound on the float32 kernel's error there.
struct Reference {
  std::vector<double> y, dx, dweight, dstate;  // dweight [D, W] as the weight's layout
  std::vector<double> y_bound, dx_bound, dweight_bound, dstate_bound;
};

// The float64 reference over x [B, T, D], weight [D, 1, W], state [B, W-1, D] (empty: zeros)
// and dy [B, T, D], by loops over the extended input xe = concat(state, x), with first-order
// bounds e_q on the float32 kernel's error in each quantity q, u the unit roundoff:
//   pre = sum_k w_k xe_k:        e_pre <= gamma_W P,  P = sum_k |w_k xe_k|
//   s = 1 / (1 + fast_exp(-pre)): e_s  <= e_pre / 4 + s (e_exp + 3u)   (sigmoid' <= 1/4)
//   y = pre s:                    e_y  <= s e_pre + |pre| e_s + u |y|
//   g = dy silu'(pre) = dy h, h = s + y a, a = 1 - s (the backward reuses the forward's y
//   and s; h fused or not):
//     e_a <= e_s + u a,  e_h <= e_s + a e_y + |y| e_a + u (|y a| + |h|),  e_g <= |dy| e_h + u |g|
//   dx, dstate: sums of <= W terms w g;  dweight: sums of B T terms g xe (in any order or
//   split), each bound by the propagated e_g plus gamma_n of the terms' magnitudes.
// Second-order terms (products of two error terms, below u^2 relative) are left out.
Reference reference(const Case& c, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& state, const std::vector<double>& dy) {
  const int64_t B = c.B, T = c.T, D = c.D, W = c.W;
  std::vector<int64_t> start(static_cast<size_t>(T), 0);  // first token of t's sequence
  if (!c.pieces.empty())
    for (int64_t t0 = 0, i = 0; i < static_cast<int64_t>(c.pieces.size()); t0 += c.pieces[i++])
      for (int64_t t = t0; t < t0 + c.pieces[i]; ++t) start[t] = t0;
  // Input of output (b, t) at tap k: xe[t + k], or 0 before t's sequence.
  auto input = [&](int64_t b, int64_t t, int64_t k, int64_t ch) -> double {
    const int64_t s = t + k - (W - 1);  // index into x; negative: the state's rows
    if (!c.pieces.empty() && s < start[t]) return 0.0;
    if (s >= 0) return x[(b * T + s) * D + ch];
    return state.empty() ? 0.0 : state[(b * (W - 1) + (W - 1) + s) * D + ch];
  };
  Reference r;
  const size_t n = static_cast<size_t>(B * T * D);
  r.y.resize(n), r.y_bound.resize(n), r.dx.assign(n, 0), r.dx_bound.assign(n, 0);
  r.dweight.assign(static_cast<size_t>(D * W), 0), r.dweight_bound.assign(static_cast<size_t>(D * W), 0);
  r.dstate.assign(static_cast<size_t>(B * (W - 1) * D), 0), r.dstate_bound.assign(r.dstate.size(), 0);
  std::vector<double> dweight_terms(r.dweight.size(), 0), dx_terms(n, 0), dstate_terms(r.dstate.size(), 0);
  const double es = kExpError + 3 * kUnit;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t ch = 0; ch < D; ++ch) {
        double pre = 0, P = 0;
        for (int64_t k = 0; k < W; ++k) {
          pre += w[ch * W + k] * input(b, t, k, ch);
          P += std::abs(w[ch * W + k] * input(b, t, k, ch));
        }
        const size_t i = static_cast<size_t>((b * T + t) * D + ch);
        const double s = 1.0 / (1.0 + std::exp(-pre)), a = 1.0 - s, y = pre * s, h = s + y * a;
        const double e_pre = gamma(W) * P, e_s = e_pre / 4 + s * es;
        r.y[i] = y;
        r.y_bound[i] = s * e_pre + std::abs(pre) * e_s + kUnit * std::abs(y);
        const double e_a = e_s + kUnit * a;
        const double e_h = e_s + a * r.y_bound[i] + std::abs(y) * e_a + kUnit * (std::abs(y * a) + std::abs(h));
        const double g = dy[i] * h;
        const double e_g = std::abs(dy[i]) * e_h + kUnit * std::abs(g);
        for (int64_t k = 0; k < W; ++k) {
          const int64_t s_x = t + k - (W - 1);
          if (!c.pieces.empty() && s_x < start[t]) continue;  // tap reads a zero: no gradient
          const double wk = w[ch * W + k];
          const size_t iw = static_cast<size_t>(ch * W + k);
          r.dweight[iw] += g * input(b, t, k, ch);
          r.dweight_bound[iw] += std::abs(input(b, t, k, ch)) * e_g;
          dweight_terms[iw] += std::abs(g * input(b, t, k, ch));
          if (s_x >= 0) {
            const size_t ix = static_cast<size_t>((b * T + s_x) * D + ch);
            r.dx[ix] += wk * g, r.dx_bound[ix] += std::abs(wk) * e_g, dx_terms[ix] += std::abs(wk * g);
          } else if (!state.empty()) {
            const size_t is = static_cast<size_t>((b * (W - 1) + (W - 1) + s_x) * D + ch);
            r.dstate[is] += wk * g, r.dstate_bound[is] += std::abs(wk) * e_g, dstate_terms[is] += std::abs(wk * g);
          }
        }
      }
  for (size_t i = 0; i < n; ++i) r.dx_bound[i] += gamma(W) * dx_terms[i];
  for (size_t i = 0; i < r.dstate.size(); ++i) r.dstate_bound[i] += gamma(W) * dstate_terms[i];
  for (size_t i = 0; i < r.dweight.size(); ++i) r.dweight_bound[i] += gamma(B * T) * dweight_terms[i];
  return r;
}

std::vector<double> as_f64(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

// Every element of `got` within its bound of `want`; reports the worst one.
void expect_within(const std::string& what, const Tensor& got, const std::vector<double>& want,
                   const std::vector<double>& bound) {
  const std::vector<double> g = as_f64(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  size_t worst = 0, failures = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double ratio = std::abs(g[i] - want[i]) / bound[i];
    if (!(ratio <= 1.0)) ++failures;
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  EXPECT_EQ(failures, 0u) << what << ": worst element " << worst << " got " << g[worst] << ", want " << want[worst]
                          << " +- " << bound[worst];
}

struct Outputs {
  Tensor y, dx, dweight, dstate;
};

// short_conv in float32 with gradients from dy.
Outputs run_f32(const Case& c, const Tensor& x0, const Tensor& w0, const Tensor& state0, const Tensor& dy) {
  Tensor x = x0.detach().set_requires_grad(true), w = w0.detach().set_requires_grad(true);
  Tensor state = c.with_state ? state0.detach().set_requires_grad(true) : Tensor();
  Tensor y = short_conv(x, w, state, c.pieces.empty() ? Tensor() : offsets_of(c.pieces));
  backward(y, dy);
  return {y, x.grad(), w.grad(), c.with_state ? state.grad() : Tensor()};
}

struct Inputs {
  Tensor x, weight, state, dy;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Generator gen(seed);
  return {Tensor::randn({c.B, c.T, c.D}, gen), Tensor::randn({c.D, 1, c.W}, gen, DType::f32, 0.0, 0.5),
          Tensor::randn({c.B, c.W - 1, c.D}, gen), Tensor::randn({c.B, c.T, c.D}, gen)};
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"main job", 4, 256, 128, 4, false, {}},
      {"main job packed", 1, 1024, 128, 4, false, {85, 30, 1, 2, 3, 349, 120, 1, 60, 200, 12, 161}},
      {"tails, state", 2, 33, 37, 3, true, {}},
      {"vectors and tail, W 5", 2, 65, 133, 5, false, {}},
      {"T below W, state", 3, 2, 21, 4, true, {}},
      {"W 1, state", 2, 9, 300, 1, true, {}},
      {"W 2, state", 1, 40, 48, 2, true, {}},
      {"packed, tails", 1, 300, 70, 4, false, {1, 2, 3, 4, 5, 85, 100, 50, 49, 1}},
  };
  return all;
}

TEST(ShortConvKernels, Float32WithinRoundingBoundsOfFloat64) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c, 7);
    const Outputs got = run_f32(c, in.x, in.weight, in.state, in.dy);
    const Reference want = reference(c, as_f64(in.x), as_f64(in.weight),
                                     c.with_state ? as_f64(in.state) : std::vector<double>(), as_f64(in.dy));
    expect_within("y", got.y, want.y, want.y_bound);
    expect_within("dx", got.dx, want.dx, want.dx_bound);
    expect_within("dweight", got.dweight, want.dweight, want.dweight_bound);
    if (c.with_state) expect_within("dstate", got.dstate, want.dstate, want.dstate_bound);
  }
}

// The summation order is fixed by the shapes, never by the thread count.
TEST(ShortConvKernels, SameBitsAtAnyThreadCount) {
  const int threads = get_num_threads();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c, 8);
    set_num_threads(1);
    const Outputs one = run_f32(c, in.x, in.weight, in.state, in.dy);
    for (int n : {2, 3}) {
      set_num_threads(n);
      const Outputs many = run_f32(c, in.x, in.weight, in.state, in.dy);
      const std::vector<std::pair<Tensor, Tensor>> pairs = {
          {one.y, many.y}, {one.dx, many.dx}, {one.dweight, many.dweight}, {one.dstate, many.dstate}};
      for (const auto& [a, b] : pairs) {
        if (!a.defined()) continue;
        EXPECT_EQ(testing::differing_bits(a, b), 0) << n << " threads";
      }
    }
  }
  set_num_threads(threads);
}

// Float64 finite differences where the channels fill whole vectors (8 doubles) and a tail.
TEST(ShortConvKernels, Float64GradCheckOverVectorBlocks) {
  Generator gen(9);
  for (int64_t W : {1, 3, 4}) {
    std::vector<Tensor> inputs = {Tensor::randn({2, 6, 19}, gen, DType::f64).set_requires_grad(true),
                                  Tensor::randn({19, 1, W}, gen, DType::f64).set_requires_grad(true),
                                  Tensor::randn({2, W - 1, 19}, gen, DType::f64).set_requires_grad(true)};
    GradCheckResult r = grad_check([](const std::vector<Tensor>& in) { return short_conv(in[0], in[1], in[2]); },
                                   inputs);
    EXPECT_LT(r.max_rel_error, 1e-7) << "W " << W;
    std::vector<Tensor> packed = {Tensor::randn({1, 12, 19}, gen, DType::f64).set_requires_grad(true), inputs[1]};
    GradCheckResult rp = grad_check(
        [](const std::vector<Tensor>& in) {
          return short_conv(in[0], in[1], {}, offsets_of({1, 2, 5, 4}));
        },
        packed);
    EXPECT_LT(rp.max_rel_error, 1e-7) << "W " << W << " packed";
  }
}

}  // namespace
}  // namespace lat
