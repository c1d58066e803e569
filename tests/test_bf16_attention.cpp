// The fused causal attention (layers/fused/attention_op.h) under bf16 mixed precision
// (train.precision bf16, lat/precision.h): output and dq, dk, dv against the float64 reference
// with tolerances derived from bf16's rounding, the error above float32's (bf16 really used),
// and the backward in the precision of its forward whatever the thread's precision then.
//
// Tolerance. bf16 keeps 8 significant bits: rounding to nearest has relative error |d| <= u =
// 2^-8. The kernel rounds both operands of each product to bf16 and sums in fp32. For one
// product c = sum_k a_k b_k of n terms the rounding changes c by sum_k a_k b_k (d_ak + d_bk);
// with independent, zero-mean rounding errors of rms at most u / sqrt(3) (the rms of a
// uniform error on [-u, u]) and operands of zero mean (q, k, v, dO and dS are; P >= 0 meets
// a zero-mean v or dO), the cross terms vanish in expectation on both sides and the product's
// relative Frobenius error is rho = sqrt(2/3) u, whatever n. fp32 summation adds at most
// n 2^-24 (n <= 256 here: < 1.6e-5, kept in the bound). Through the softmax, an error e in a
// score moves p by p e (first order, less the row's mean): scores of rms sigma (sigma = the
// rms of q, for unit k and scale D^-1/2) carry relative error rho, so P carries rho sigma.
// Adding independent contributions in quadrature:
//   o, dv   = P V, P^T dO:        rho sqrt(1 + sigma^2)     (their own rounding, and P's)
//   dS = P (dP - delta):          rho sqrt(2 + 2 sigma^2)   (P; dP = dO V^T; delta = dO . o, o's error)
//   dq, dk  = dS K, dS^T Q:       rho sqrt(3 + 2 sigma^2)
// The check allows twice that (the first-order model drops the row-mean term of the softmax
// and its own second-order terms), and requires the error to be above float32's bound of
// test_attention.cpp (1e-5): no bf16 product left in fp32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "lat/lat.h"
#include "layers/fused/attention_op.h"
#include "tests/attention_reference.h"
#include "tests/threads_testing.h"

namespace lat {
namespace {

constexpr double kU = 1.0 / 256;                // bf16's unit roundoff, 2^-8
constexpr double kFp32Bound = 1e-5;             // test_attention.cpp's float32 tolerance
const double kRho = std::sqrt(2.0 / 3.0) * kU;  // one product's relative error (file header)
constexpr double kMargin = 2.0;

struct Case {
  int64_t B, T, H, Hkv, D, Dv, window;
  double q_std = 1.0;
};

struct Result {
  Tensor o, dq, dk, dv;
};

// loss = sum(attention(q, k, v) * w), forward and backward in `precision`.
Result run_fused(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w, int64_t window,
                 Precision precision) {
  const PrecisionGuard guard(precision);
  Tensor q = q0.detach().set_requires_grad(true), k = k0.detach().set_requires_grad(true);
  Tensor v = v0.detach().set_requires_grad(true);
  Tensor o = causal_attention(q, k, v, {}, window);
  backward(sum(o * w));
  return {o, q.grad(), k.grad(), v.grad()};
}

Result run_reference(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w, int64_t window) {
  Tensor q = q0.detach().to(DType::f64).set_requires_grad(true), k = k0.detach().to(DType::f64).set_requires_grad(true);
  Tensor v = v0.detach().to(DType::f64).set_requires_grad(true);
  Tensor o = testing::naive_attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(q0.size(3))), window, 0);
  backward(sum(o * w.to(DType::f64)));
  return {o, q.grad(), k.grad(), v.grad()};
}

TEST(Bf16Attention, MatchesFloat64WithinBf16Bound) {
  if (!bf16_supported(Device::cpu())) GTEST_SKIP() << "no AVX512-BF16 on this CPU: bf16 runs in fp32";
  const std::vector<Case> cases = {
      {2, 256, 4, 4, 32, 32, 0},       // the main job's attention (full causal over the block)
      {1, 200, 4, 2, 64, 48, 50},      // GQA, sliding window, D != Dv
      {2, 65, 4, 1, 24, 40, 0},        // multi-query, a tile and one query, widths not whole vectors
      {1, 63, 2, 2, 17, 9, 16},        // odd head dims (a bf16 pair completed by zero)
      {1, 150, 2, 2, 32, 32, 0, 2.0},  // peakier softmax
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " H=" << c.H << " Hkv=" << c.Hkv << " D=" << c.D
                                      << " Dv=" << c.Dv << " window=" << c.window << " q_std=" << c.q_std);
    Generator gen(3);
    const Tensor q = Tensor::randn({c.B, c.T, c.H, c.D}, gen, DType::f32, 0.0, c.q_std);
    const Tensor k = Tensor::randn({c.B, c.T, c.Hkv, c.D}, gen);
    const Tensor v = Tensor::randn({c.B, c.T, c.Hkv, c.Dv}, gen);
    const Tensor w = Tensor::randn({c.B, c.T, c.H, c.Dv}, gen);
    const Result got = run_fused(q, k, v, w, c.window, Precision::bf16);
    const Result ref = run_reference(q, k, v, w, c.window);
    const double s2 = c.q_std * c.q_std;
    // fp32 summation: at most n 2^-24 over the longest sum (T keys, or D, Dv).
    const double sum_bound = static_cast<double>(std::max({c.T, c.D, c.Dv})) * std::ldexp(1.0, -24);
    const double tol_o = kMargin * (kRho * std::sqrt(1 + s2) + sum_bound);
    const double tol_dqk = kMargin * (kRho * std::sqrt(3 + 2 * s2) + sum_bound);
    const struct {
      const char* name;
      double error, tol;
    } checks[] = {{"o", relative_error(got.o, ref.o), tol_o},
                  {"dq", relative_error(got.dq, ref.dq), tol_dqk},
                  {"dk", relative_error(got.dk, ref.dk), tol_dqk},
                  {"dv", relative_error(got.dv, ref.dv), tol_o}};
    for (const auto& check : checks) {
      EXPECT_LT(check.error, check.tol) << check.name;
      EXPECT_GT(check.error, kFp32Bound) << check.name << ": no larger than float32's error, bf16 not used";
    }
    std::printf(
        "B=%lld T=%lld H=%lld/%lld D=%lld/%lld window=%lld q_std=%.0f: error / tolerance o %.2f dq %.2f dk %.2f dv "
        "%.2f\n",
        static_cast<long long>(c.B), static_cast<long long>(c.T), static_cast<long long>(c.H),
        static_cast<long long>(c.Hkv), static_cast<long long>(c.D), static_cast<long long>(c.Dv),
        static_cast<long long>(c.window), c.q_std, checks[0].error / checks[0].tol, checks[1].error / checks[1].tol,
        checks[2].error / checks[2].tol, checks[3].error / checks[3].tol);
  }
}

// Decoding over a KV cache with a sliding window: the keys before the window, and the cache's
// rows past `length` (NaN), are never read; fp32 within float32's bound, bf16 within its own.
TEST(Bf16Attention, CachedWindowReadsOnlyVisibleKeys) {
  if (!bf16_supported(Device::cpu())) GTEST_SKIP() << "no AVX512-BF16 on this CPU: bf16 runs in fp32";
  const int64_t B = 2, cap = 300, len = 281, Tq = 3, H = 4, Hkv = 2, D = 32, Dv = 24, window = 40;
  Generator gen(8);
  const Tensor k = Tensor::randn({B, len, Hkv, D}, gen), v = Tensor::randn({B, len, Hkv, Dv}, gen);
  const Tensor q = Tensor::randn({B, Tq, H, D}, gen);
  const Tensor nan_k = Tensor::full({B, cap - len, Hkv, D}, std::nan(""));
  const Tensor nan_v = Tensor::full({B, cap - len, Hkv, Dv}, std::nan(""));
  const Tensor k_cache = concat({k, nan_k}, 1), v_cache = concat({v, nan_v}, 1);
  const Tensor ref = testing::naive_attention(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64),
                                              1.0 / std::sqrt(static_cast<double>(D)), window, len - Tq);
  const double tol_bf16 = kMargin * (kRho * std::sqrt(2.0) + window * std::ldexp(1.0, -24));
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    const PrecisionGuard guard(precision);
    const double error = relative_error(causal_attention_cached(q, k_cache, v_cache, len, {}, window), ref);
    if (precision == Precision::fp32) {
      EXPECT_LT(error, kFp32Bound) << "fp32";
    } else {
      EXPECT_LT(error, tol_bf16) << "bf16";
      EXPECT_GT(error, kFp32Bound) << "bf16: no larger than float32's error, bf16 not used";
    }
  }
}

void expect_same_bits(const Result& a, const Result& b, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.o.to_vector(), b.o.to_vector()) << "o";
  EXPECT_EQ(a.dq.to_vector(), b.dq.to_vector()) << "dq";
  EXPECT_EQ(a.dk.to_vector(), b.dk.to_vector()) << "dk";
  EXPECT_EQ(a.dv.to_vector(), b.dv.to_vector()) << "dv";
}

// The tape node keeps the forward's precision: a backward run under another precision (an
// eval, or the guard gone) computes the gradients of the forward that ran.
TEST(Bf16Attention, BackwardComputesInTheForwardsPrecision) {
  if (!bf16_supported(Device::cpu())) GTEST_SKIP() << "no AVX512-BF16 on this CPU: bf16 runs in fp32";
  Generator gen(5);
  const Tensor q = Tensor::randn({1, 70, 2, 32}, gen), k = Tensor::randn({1, 70, 2, 32}, gen);
  const Tensor v = Tensor::randn({1, 70, 2, 32}, gen), w = Tensor::randn({1, 70, 2, 32}, gen);
  for (Precision forward : {Precision::bf16, Precision::fp32}) {
    const Precision other = forward == Precision::bf16 ? Precision::fp32 : Precision::bf16;
    Tensor qg = q.detach().set_requires_grad(true), kg = k.detach().set_requires_grad(true);
    Tensor vg = v.detach().set_requires_grad(true);
    Tensor o;
    {
      const PrecisionGuard guard(forward);
      o = causal_attention(qg, kg, vg);
    }
    {
      const PrecisionGuard guard(other);
      backward(sum(o * w));
    }
    expect_same_bits({o, qg.grad(), kg.grad(), vg.grad()}, run_fused(q, k, v, w, 0, forward), precision_name(forward));
  }
}

// Bit for bit the same at 1, 2 and 3 threads, in both precisions: with one kv head the
// backward splits the queries into spans whose dk, dv sums are added in a fixed order.
TEST(Bf16Attention, SameBitsAtEveryThreadCount) {
  for (const Case& c : {Case{1, 300, 2, 1, 32, 32, 0}, Case{4, 130, 4, 4, 32, 32, 100}}) {
    Generator gen(9);
    const Tensor q = Tensor::randn({c.B, c.T, c.H, c.D}, gen), k = Tensor::randn({c.B, c.T, c.Hkv, c.D}, gen);
    const Tensor v = Tensor::randn({c.B, c.T, c.Hkv, c.Dv}, gen), w = Tensor::randn({c.B, c.T, c.H, c.Dv}, gen);
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
      const std::vector<Result> runs = testing::at_thread_counts(
          [&] { return run_fused(q, k, v, w, c.window, precision); });
      expect_same_bits(runs[0], runs[1], "1 and 2 threads");
      expect_same_bits(runs[0], runs[2], "1 and 3 threads");
    }
  }
}

}  // namespace
}  // namespace lat
