// The chunk kernels under bf16 compute precision (lat/precision.h): their tile product
// tile_gemm_bf16 (packing and products), and each chunk op's outputs and every input
// gradient against the float64 reference within bounds derived from bf16's rounding; the
// tape node keeping its forward's precision for backward.
//
// The bounds. bf16 keeps p = 8 significand bits: fl(a) = a (1 + d), |d| <= u = 2^-8. The
// kernels round only the inputs of their products (the product of two bf16 values is
// exact in fp32, the sums are fp32); gates, decays, cumulative sums, states and every other
// operation stay fp32 (unit roundoff 2^-24, whose effect, gamma_n = n 2^-24 / (1 - n 2^-24)
// for chains of n fp32 operations, Higham 2nd ed. sec. 3.1, is kept in the bounds).
//
// Element-wise, linear_attn and simple_gla. Every output and gradient of these ops is a sum
// of terms, each a product of entries of q, k, v, initial_state and the upstream gradients
// with a positive decay factor (ALGORITHMS.md 2.3; the gate gradient in its pairwise form,
// chunk_simple_gla_cpu.cpp, sums such terms without cancelling them). The float64 reference
// run on |q|, |k|, |v|, |h0|, |d_o|, |d_ht| therefore gives, per element, the sum of the
// terms' magnitudes, m. The kernel rounds each term at most four times on its way (o: q, k,
// then the score A, and v; or q e^G, and the state S from rounded k e^(L-G) and v, rounded
// again; dq: dO e^G and S rounded (3) or dO, v, then P, and k; dk and dv likewise; dg: q
// (fp32) with dq's inter part, or dP (dO, v) with A (q, k); final state and dh0: two), so
//   |x - x_ref| <= ((1 + u)^4 (1 + gamma_n) - 1) m,   n = T + K + V + C,
// plus 1e-30 absolute for vdpbf16ps, which flushes subnormal products (below 2^-126) to 0.
//
// Norm-wise, all four ops. One product with rounded inputs errs by
// ||dC|| <= 2u || |A| |B| || <= 2u ||A|| ||B|| (Frobenius), and for inputs with independent
// zero-mean entries, as here, ||A|| ||B|| ~ sqrt(K) ||AB|| (each entry of AB sums K terms of
// random sign): a relative error of at most 2u sqrt(K), K the inner dimension, attained
// only when all K rounding errors align. The ops chain a few such products; the chunk
// recurrences do not amplify errors (unit-norm keys, beta <= 1, decays <= 1), and the
// independent roundings of a chain add in quadrature, far inside the sqrt(K) of that
// alignment, so each tensor obeys ||x - x_ref|| / ||x_ref|| <= 2u sqrt(max(K, V, C)).
//
// The gate gradient, whose decay path is fp32 throughout, must be as accurate as the other
// gradients (flash-linear-attention saw 40x larger dg errors with a bf16 decay path): its
// relative error is at most 10x the largest of dq's, dk's and dv's. And bf16 must really be in
// use: o's relative error is above the fp32 bar of DESIGN.md (1e-4).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/cpu/bf16.h"
#include "lat/precision.h"
#include "layers/linear_attention/tile_gemm_bf16.h"
#include "tests/linear_attention_testing.h"

namespace lat {
namespace {

using linear_attention::PackedA;
using linear_attention::PackedB;
using linear_attention::TileOperand;
using testing::Case;
using testing::Gate;

constexpr double kBf16Roundoff = 0x1p-8;   // u of bf16 (8 significand bits)
constexpr double kFp32Roundoff = 0x1p-24;  // u of fp32

double gamma32(int64_t n) {
  return static_cast<double>(n) * kFp32Roundoff / (1.0 - static_cast<double>(n) * kFp32Roundoff);
}

bool cpu_bf16() { return bf16_supported(Device::cpu()); }

// ---- tile_gemm_bf16 ------------------------------------------------------------------------

struct TileShape {
  int64_t M, N, K;
};

const std::vector<TileShape>& tile_shapes() {
  static const std::vector<TileShape> shapes = {{64, 64, 64}, {64, 128, 64}, {48, 80, 33}, {7, 33, 5},
                                                {1, 1, 1},    {13, 16, 17},  {9, 50, 256}, {256, 8, 64}};
  return shapes;
}

std::vector<float> random_floats(int64_t n, std::mt19937& gen) {
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(gen);
  return x;
}

// The bf16 bits of op(X)[r, c] (zero outside rows x cols), X stored as `x` says.
uint16_t bits_at(const TileOperand& x, int64_t r, int64_t c, int64_t rows, int64_t cols) {
  if (r >= rows || c >= cols) return 0;
  return cpu::float_to_bf16(x.trans ? x.p[c * x.ld + r] : x.p[r * x.ld + c]);
}

TEST(TileGemmBf16, PacksRoundedPairsInTheDocumentedLayout) {
  std::mt19937 gen(5);
  for (const TileShape& s : tile_shapes())
    for (bool trans : {false, true}) {
      SCOPED_TRACE(::testing::Message() << s.M << "x" << s.K << " trans " << trans);
      // op(A) is M x K, op(B) is K x N; row strides 3 wider than the rows.
      const int64_t lda = (trans ? s.M : s.K) + 3, ldb = (trans ? s.K : s.N) + 3;
      const std::vector<float> a = random_floats((trans ? s.K : s.M) * lda, gen);
      const std::vector<float> b = random_floats((trans ? s.N : s.K) * ldb, gen);
      const TileOperand ta{a.data(), lda, trans}, tb{b.data(), ldb, trans};
      std::vector<uint32_t> wa(linear_attention::packed_a_words(s.M, s.K));
      std::vector<uint32_t> wb(linear_attention::packed_b_words(s.K, s.N));
      const PackedA pa = linear_attention::pack_a_bf16(s.M, s.K, ta, wa.data());
      const PackedB pb = linear_attention::pack_b_bf16(s.K, s.N, tb, wb.data());
      const int64_t pairs = (s.K + 1) / 2;
      for (int64_t r = 0; r < s.M; ++r)
        for (int64_t p = 0; p < pairs; ++p) {
          const uint32_t w = pa.w[r * pa.row + p * pa.pair];
          ASSERT_EQ(w & 0xffffu, bits_at(ta, r, 2 * p, s.M, s.K)) << "A row " << r << " pair " << p;
          ASSERT_EQ(w >> 16, bits_at(ta, r, 2 * p + 1, s.M, s.K)) << "A row " << r << " pair " << p;
        }
      ASSERT_EQ(pb.ld % 16, 0);
      ASSERT_GE(pb.ld, s.N);
      for (int64_t p = 0; p < pairs; ++p)
        for (int64_t j = 0; j < pb.ld; ++j) {
          const uint32_t w = pb.w[p * pb.ld + j];
          ASSERT_EQ(w & 0xffffu, bits_at(tb, 2 * p, j, s.K, s.N)) << "B pair " << p << " column " << j;
          ASSERT_EQ(w >> 16, bits_at(tb, 2 * p + 1, j, s.K, s.N)) << "B pair " << p << " column " << j;
        }
    }
}

// K^T as op(B) from K's packing as op(A) holds the words pack_b_bf16 makes from the floats,
// and a product with one operand packed beforehand gives the bits of the all-float form.
TEST(TileGemmBf16, SharedPackingsMatchPackingFromFloats) {
  std::mt19937 gen(11);
  for (const TileShape& s : tile_shapes()) {
    SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K);
    const int64_t lda = s.K + 3, ldb = s.N + 1;
    const std::vector<float> a = random_floats(s.M * lda, gen), b = random_floats(s.K * ldb, gen);
    const TileOperand ta{a.data(), lda}, tb{b.data(), ldb};
    // X = A's storage (M x K) as op(B) = X^T (K x M).
    std::vector<uint32_t> wa(linear_attention::packed_a_words(s.M, s.K));
    std::vector<uint32_t> wt(linear_attention::packed_b_words(s.K, s.M)), wf(wt.size());
    const PackedA pa = linear_attention::pack_a_bf16(s.M, s.K, ta, wa.data());
    const PackedB from_a = linear_attention::pack_b_from_a(s.M, s.K, pa, wt.data());
    const PackedB from_floats = linear_attention::pack_b_bf16(s.K, s.M, {a.data(), lda, true}, wf.data());
    ASSERT_EQ(from_a.ld, from_floats.ld);
    for (int64_t x = 0; x < (s.K + 1) / 2 * from_a.ld; ++x) ASSERT_EQ(from_a.w[x], from_floats.w[x]) << "word " << x;
    std::vector<uint32_t> wb(linear_attention::packed_b_words(s.K, s.N));
    const PackedB pb = linear_attention::pack_b_bf16(s.K, s.N, tb, wb.data());
    std::vector<float> floats(s.M * s.N), packed_a(s.M * s.N), packed_b(s.M * s.N);
    linear_attention::tile_gemm_bf16(s.M, s.N, s.K, ta, tb, floats.data(), s.N, 0.5f);
    linear_attention::tile_gemm_bf16(s.M, s.N, s.K, pa, tb, packed_a.data(), s.N, 0.5f);
    linear_attention::tile_gemm_bf16(s.M, s.N, s.K, ta, pb, packed_b.data(), s.N, 0.5f);
    EXPECT_EQ(packed_a, floats);
    EXPECT_EQ(packed_b, floats);
  }
}

// Element-wise, as test_bf16.cpp's products: with both inputs rounded and K products summed
// in fp32, |C - C_exact| <= ((1 + u)^2 (1 + gamma_K) - 1) |alpha| (|op(A)| |op(B)|), plus the
// fp32 roundings of alpha acc + beta C (2^-24 each, two of them).
TEST(TileGemmBf16, WithinTheRoundingBoundOfFloat64) {
  std::mt19937 gen(3);
  for (const TileShape& s : tile_shapes())
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f, -0.5f})
          for (bool prepacked : {false, true}) {
            SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K << " ta " << ta << " tb " << tb
                                              << " beta " << beta << " prepacked " << prepacked);
            const int64_t lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 3, ldc = s.N + 3;
            const std::vector<float> a = random_floats((ta ? s.K : s.M) * lda, gen);
            const std::vector<float> b = random_floats((tb ? s.N : s.K) * ldb, gen);
            std::vector<float> c = random_floats(s.M * ldc, gen);
            const std::vector<float> c0 = c;
            const float alpha = 0.75f;
            const TileOperand opa{a.data(), lda, ta}, opb{b.data(), ldb, tb};
            if (prepacked) {
              std::vector<uint32_t> wa(linear_attention::packed_a_words(s.M, s.K));
              std::vector<uint32_t> wb(linear_attention::packed_b_words(s.K, s.N));
              linear_attention::tile_gemm_bf16(s.M, s.N, s.K, linear_attention::pack_a_bf16(s.M, s.K, opa, wa.data()),
                                               linear_attention::pack_b_bf16(s.K, s.N, opb, wb.data()), c.data(), ldc,
                                               alpha, beta);
            } else {
              linear_attention::tile_gemm_bf16(s.M, s.N, s.K, opa, opb, c.data(), ldc, alpha, beta);
            }
            const double factor = (1.0 + kBf16Roundoff) * (1.0 + kBf16Roundoff) * (1.0 + gamma32(s.K)) - 1.0;
            double worst = 0.0;  // largest error over |alpha| |op(A)| |op(B)|
            for (int64_t i = 0; i < s.M; ++i) {
              for (int64_t j = 0; j < s.N; ++j) {
                double sum = 0.0, mag = 0.0;
                for (int64_t k = 0; k < s.K; ++k) {
                  const double x = ta ? a[k * lda + i] : a[i * lda + k], y = tb ? b[j * ldb + k] : b[k * ldb + j];
                  sum += x * y;
                  mag += std::fabs(x * y);
                }
                const double exact = alpha * sum + beta * double(c0[i * ldc + j]);
                const double err = std::fabs(c[i * ldc + j] - exact);
                const double out_mag = std::fabs(alpha) * mag + std::fabs(beta * double(c0[i * ldc + j]));
                ASSERT_LE(err, factor * std::fabs(alpha) * mag + 2.0 * kFp32Roundoff * out_mag)
                    << "C[" << i << ", " << j << "]";
                worst = std::max(worst, err / (std::fabs(alpha) * mag));
              }
              for (int64_t j = s.N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "past N";
            }
            // The inputs were rounded: errors of bf16's size somewhere, far above fp32's.
            if (s.K > 1) {
              EXPECT_GT(worst, 16.0 * gamma32(s.K));
            }
          }
}

// ---- chunk ops -----------------------------------------------------------------------------

// One case of the op sweeps: q, k [B, T, H, K], v [B, T, H, V], an initial state, and the
// gate g (constant; unused by linear_attn and delta_rule).
struct OpCase {
  int64_t T, K, V;
  double g;
};

std::vector<OpCase> op_cases(bool gated) {
  std::vector<OpCase> cases;
  for (double g : gated ? std::vector<double>{0.0, -1e-3, -20.0} : std::vector<double>{0.0})
    for (auto [T, K, V] : {std::tuple<int64_t, int64_t, int64_t>{65, 64, 64}, {200, 64, 64}, {200, 48, 80}, {1, 16, 24}})
      cases.push_back({T, K, V, g});
  return cases;
}

std::string case_name(const OpCase& c) {
  std::ostringstream name;  // not "T" + std::to_string(...): GCC 12 warns a false -Wrestrict there
  name << "T" << c.T << " K" << c.K << " V" << c.V << " g=" << c.g;
  return name.str();
}

Tensor abs_of(const Tensor& t) {
  if (!t.defined()) return t;
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v) x = std::fabs(x);
  return Tensor::from_vector(v, t.shape()).to(DType::f32);
}

/// The relative errors of one run's tensors, for the checks across tensors.
struct Errors {
  double o = 0, dq = 0, dk = 0, dv = 0, dg = 0;
};

/// Expects ||got - ref|| / ||ref|| <= 2u sqrt(max(K, V, C)) (the file comment) and returns it.
double expect_normwise(const std::string& name, const Tensor& got, const Tensor& ref, const OpCase& c) {
  EXPECT_EQ(got.defined(), ref.defined()) << name;
  if (!got.defined() || !ref.defined()) return 0.0;
  EXPECT_EQ(got.shape(), ref.shape()) << name;
  const double err = relative_error(got, ref);
  const double inner = static_cast<double>(std::max({c.K, c.V, int64_t{64}}));
  EXPECT_LE(err, 2.0 * kBf16Roundoff * std::sqrt(inner)) << name;
  return err;
}

/// Expects |got - ref| <= factor mag + 1e-30 for every element (the file comment).
void expect_elementwise(const std::string& name, const Tensor& got, const Tensor& ref, const Tensor& mag,
                        double factor) {
  if (!got.defined()) return;
  const std::vector<double> x = got.to_vector<double>(), r = ref.to_vector<double>(), m = mag.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_LE(std::fabs(x[i] - r[i]), factor * m[i] + 1e-30) << name << " element " << i;
}

/// The checks across tensors: dg as accurate as the other gradients, bf16 in use.
void expect_dg_and_bf16_in_use(const Errors& e, bool gated) {
  if (gated) {
    EXPECT_LE(e.dg, 10.0 * std::max({e.dq, e.dk, e.dv})) << "dg";
  }
  EXPECT_GT(e.o, testing::kTol) << "o: an error of fp32's size; bf16 not in use";
}

/// `op` run under a bf16 PrecisionGuard; backward runs outside it, with the precision its
/// tape node kept.
testing::Op in_bf16(testing::Op op) {
  return [op](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& h0) {
    const PrecisionGuard guard(Precision::bf16);
    return op(q, k, v, g, h0);
  };
}

testing::Inputs decay_inputs(const OpCase& c, bool gated, uint64_t seed) {
  testing::Inputs in = testing::make_inputs({2, c.T, 2, c.K, c.V, Gate::none, true, false, seed}, c.V);
  if (gated) in.g = Tensor::full({2, c.T, 2}, c.g);
  return in;
}

void check_decay_op(bool gated) {
  if (!cpu_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16: bf16 runs in fp32";
  uint64_t seed = gated ? 20 : 10;
  for (const OpCase& c : op_cases(gated)) {
    SCOPED_TRACE(case_name(c));
    const testing::Inputs in = decay_inputs(c, gated, ++seed);
    const testing::Op chunk = gated ? testing::simple_gla_chunk() : testing::linear_attn_chunk(false);
    const testing::Op naive = gated ? testing::simple_gla_naive() : testing::linear_attn_naive(false);
    const testing::Result got = testing::run(in_bf16(chunk), in, DType::f32);
    const testing::Result ref = testing::run(naive, in, DType::f64);
    testing::Inputs magnitudes = in;
    for (Tensor* t : {&magnitudes.q, &magnitudes.k, &magnitudes.v, &magnitudes.initial_state, &magnitudes.d_o,
                      &magnitudes.d_final_state})
      *t = abs_of(*t);
    const testing::Result mag = testing::run(naive, magnitudes, DType::f64);
    const double u = kBf16Roundoff;
    const double factor = std::pow(1.0 + u, 4) * (1.0 + gamma32(c.T + c.K + c.V + 64)) - 1.0;
    Errors e;
    auto check = [&](const char* name, const Tensor& a, const Tensor& b, const Tensor& m) {
      expect_elementwise(name, a, b, m, factor);
      return expect_normwise(name, a, b, c);
    };
    e.o = check("o", got.o, ref.o, mag.o);
    check("final_state", got.final_state, ref.final_state, mag.final_state);
    e.dq = check("dq", got.dq, ref.dq, mag.dq);
    e.dk = check("dk", got.dk, ref.dk, mag.dk);
    e.dv = check("dv", got.dv, ref.dv, mag.dv);
    e.dg = check("dg", got.dg, ref.dg, mag.dg);
    check("d_initial_state", got.d_initial_state, ref.d_initial_state, mag.d_initial_state);
    expect_dg_and_bf16_in_use(e, gated);
  }
}

TEST(Bf16Chunk, LinearAttnWithinTheBounds) { check_decay_op(false); }

TEST(Bf16Chunk, SimpleGlaWithinTheBounds) { check_decay_op(true); }

testing::DeltaOp delta_chunk(bool gated) {
  return [gated](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                 const Tensor& h0) {
    const PrecisionGuard guard(Precision::bf16);
    return gated ? chunk_gated_delta_rule(q, k, v, g, beta, {}, h0, true) : chunk_delta_rule(q, k, v, beta, {}, h0, true);
  };
}

testing::DeltaOp delta_naive() {
  return [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta, const Tensor& h0) {
    return naive_gated_delta_rule(q, k, v, g, beta, {}, h0, true);
  };
}

void check_delta_op(bool gated) {
  if (!cpu_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16: bf16 runs in fp32";
  uint64_t seed = gated ? 40 : 30;
  for (const OpCase& c : op_cases(gated)) {
    SCOPED_TRACE(case_name(c));
    testing::DeltaInputs in = testing::make_delta_inputs({{2, c.T, 2, c.K, c.V, Gate::none, true, false, ++seed}});
    if (gated) in.base.g = Tensor::full({2, c.T, 2}, c.g);
    const testing::DeltaResult got = testing::run_delta(delta_chunk(gated), in, DType::f32);
    const testing::DeltaResult ref = testing::run_delta(delta_naive(), in, DType::f64);
    const testing::Result &a = got.base, &b = ref.base;
    Errors e;
    e.o = expect_normwise("o", a.o, b.o, c);
    expect_normwise("final_state", a.final_state, b.final_state, c);
    e.dq = expect_normwise("dq", a.dq, b.dq, c);
    e.dk = expect_normwise("dk", a.dk, b.dk, c);
    e.dv = expect_normwise("dv", a.dv, b.dv, c);
    e.dg = expect_normwise("dg", a.dg, b.dg, c);
    expect_normwise("dbeta", got.dbeta, ref.dbeta, c);
    expect_normwise("d_initial_state", a.d_initial_state, b.d_initial_state, c);
    expect_dg_and_bf16_in_use(e, gated);
  }
}

TEST(Bf16Chunk, DeltaRuleWithinTheBounds) { check_delta_op(false); }

TEST(Bf16Chunk, GatedDeltaRuleWithinTheBounds) { check_delta_op(true); }

// The precision is thread-local and read when the op runs: the backward computes in its
// forward's precision whatever the precision around lat::backward, bit for bit.
TEST(Bf16Chunk, BackwardKeepsTheForwardsPrecision) {
  if (!cpu_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16: bf16 runs in fp32";
  const testing::DeltaInputs in = testing::make_delta_inputs({{1, 100, 2, 32, 32, Gate::mild, true, false, 50}});
  auto grads = [&](Precision forward, Precision backward_precision) {
    Tensor q = in.base.q.clone(), k = in.base.k.clone(), g = in.base.g.clone();
    for (Tensor* t : {&q, &k, &g}) t->set_requires_grad(true);
    LinearAttentionOutput out;
    {
      const PrecisionGuard guard(forward);
      out = chunk_gated_delta_rule(q, k, in.base.v, g, in.beta, {}, in.base.initial_state);
    }
    const PrecisionGuard guard(backward_precision);
    backward(sum(out.o * in.base.d_o));
    return std::vector<std::vector<float>>{out.o.to_vector<float>(), q.grad().to_vector<float>(),
                                           k.grad().to_vector<float>(), g.grad().to_vector<float>()};
  };
  EXPECT_EQ(grads(Precision::fp32, Precision::bf16), grads(Precision::fp32, Precision::fp32));
  EXPECT_EQ(grads(Precision::bf16, Precision::fp32), grads(Precision::bf16, Precision::bf16));
  EXPECT_NE(grads(Precision::bf16, Precision::bf16), grads(Precision::fp32, Precision::fp32));
}

}  // namespace
}  // namespace lat
