// Fused causal attention (layers/attention_op.h) against a naive float64 reference built from
// core ops (matmul, additive causal mask, softmax), for outputs and dq, dk, dv; GQA, sliding
// windows, odd lengths, decoding offsets; linear memory at 32k tokens; and the Attention
// mixer's step() against its forward().
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "lat/lat.h"
#include "layers/attention.h"
#include "layers/fused/attention_op.h"
#include "layers/fused/rope.h"
#include "tests/attention_reference.h"
#include "tests/expect_error.h"

namespace lat {
namespace {

using testing::expect_error;

using testing::naive_attention;

// A float64 leaf copy of t that requires grad.
Tensor f64_leaf(const Tensor& t) {
  Tensor c = t.detach().to(DType::f64);
  c.set_requires_grad(true);
  return c;
}

struct Case {
  int64_t B, Tq, Tk, H, Hkv, D, Dv, window;
  double q_std = 1.0;  // larger values make the softmax peakier (stresses the online rescaling)
};

struct Result {
  Tensor o, dq, dk, dv;
};

// Runs loss = sum(attention(q, k, v) * w) and backward with the given attention function.
template <class Fn>
Result run(Fn attention, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w) {
  Tensor o = attention(q, k, v);
  backward(sum(o * w));
  return {o, q.grad(), k.grad(), v.grad()};
}

// Compares the fused op in `dtype` with the float64 naive reference on the same inputs.
void check_against_naive(const Case& c, DType dtype, double tol, uint64_t seed = 1) {
  SCOPED_TRACE(::testing::Message() << "B=" << c.B << " Tq=" << c.Tq << " Tk=" << c.Tk << " H=" << c.H
                                    << " Hkv=" << c.Hkv << " D=" << c.D << " Dv=" << c.Dv << " window=" << c.window
                                    << " dtype=" << dtype_name(dtype));
  Generator gen(seed);
  Tensor q = Tensor::randn({c.B, c.Tq, c.H, c.D}, gen, dtype, 0.0, c.q_std).set_requires_grad(true);
  Tensor k = Tensor::randn({c.B, c.Tk, c.Hkv, c.D}, gen, dtype).set_requires_grad(true);
  Tensor v = Tensor::randn({c.B, c.Tk, c.Hkv, c.Dv}, gen, dtype).set_requires_grad(true);
  Tensor w = Tensor::randn({c.B, c.Tq, c.H, c.Dv}, gen, dtype);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  const int64_t offset = c.Tk - c.Tq;

  Result fused = run(
      [&](const Tensor& a, const Tensor& b, const Tensor& d) { return causal_attention(a, b, d, {}, c.window, offset); },
      q, k, v, w);
  Result ref = run(
      [&](const Tensor& a, const Tensor& b, const Tensor& d) { return naive_attention(a, b, d, scale, c.window, offset); },
      f64_leaf(q), f64_leaf(k), f64_leaf(v), w.to(DType::f64));
  EXPECT_LT(relative_error(fused.o, ref.o), tol) << "o";
  EXPECT_LT(relative_error(fused.dq, ref.dq), tol) << "dq";
  EXPECT_LT(relative_error(fused.dk, ref.dk), tol) << "dk";
  EXPECT_LT(relative_error(fused.dv, ref.dv), tol) << "dv";
}

std::vector<Case> training_cases() {
  return {
      {1, 1, 1, 1, 1, 16, 16, 0},        // a single token
      {2, 63, 63, 4, 2, 32, 32, 0},      // GQA, T just below a tile
      {1, 65, 65, 2, 2, 64, 48, 0},      // T just above a tile, Dv != D
      {2, 200, 200, 4, 1, 32, 32, 0},    // multi-query, several tiles
      {1, 200, 200, 2, 2, 32, 32, 50},   // sliding window inside tiles
      {2, 130, 130, 4, 2, 16, 16, 64},   // window equal to the tile size
      {1, 200, 200, 2, 1, 32, 32, 2},    // window 2: each query sees itself and one key before
      {1, 150, 150, 2, 2, 32, 32, 0, 4.0},  // peaky softmax
  };
}

TEST(CausalAttention, Float32MatchesFloat64Reference) {
  for (const Case& c : training_cases()) check_against_naive(c, DType::f32, 1e-5);
}

TEST(CausalAttention, Float64MatchesReferenceTightly) {
  for (const Case& c : training_cases()) check_against_naive(c, DType::f64, 1e-11);
}

TEST(CausalAttention, QueriesAfterACacheOfKeys) {
  // Decoding and chunked prefill: the last Tq of Tk tokens are the queries.
  check_against_naive({2, 1, 70, 4, 2, 32, 32, 0}, DType::f32, 1e-5);
  check_against_naive({1, 5, 70, 2, 1, 16, 24, 0}, DType::f32, 1e-5);
  check_against_naive({1, 66, 200, 4, 4, 32, 32, 0}, DType::f32, 1e-5);
  check_against_naive({2, 7, 150, 2, 1, 32, 32, 20}, DType::f32, 1e-5);
  check_against_naive({1, 3, 130, 2, 2, 16, 16, 0}, DType::f64, 1e-11);
}

TEST(CausalAttention, WindowOneCopiesValues) {
  // Each query sees only its own key, so o = v (the kv head of its group), exactly.
  Generator gen(2);
  Tensor q = Tensor::randn({2, 70, 4, 16}, gen);
  Tensor k = Tensor::randn({2, 70, 2, 16}, gen);
  Tensor v = Tensor::randn({2, 70, 2, 16}, gen);
  Tensor o = causal_attention(q, k, v, {}, 1);
  Tensor expected = concat({slice(v, 2, 0, 1), slice(v, 2, 0, 1), slice(v, 2, 1, 2), slice(v, 2, 1, 2)}, 2);
  EXPECT_LT(relative_error(o, expected), 1e-7);
}

TEST(CausalAttention, ExplicitQueryOffset) {
  // Tq = 4 queries at key positions 2..5 of Tk = 9 keys: keys 6..8 are never seen.
  Generator gen(3);
  Tensor q = Tensor::randn({1, 4, 2, 8}, gen, DType::f64);
  Tensor k = Tensor::randn({1, 9, 2, 8}, gen, DType::f64);
  Tensor v = Tensor::randn({1, 9, 2, 8}, gen, DType::f64);
  Tensor o = causal_attention(q, k, v, 0.5, 0, 2);
  EXPECT_LT(relative_error(o, naive_attention(q, k, v, 0.5, 0, 2)), 1e-12);
}

TEST(CausalAttention, GradCheckOfNaiveReference) {
  Generator gen(4);
  std::vector<Tensor> inputs = {Tensor::randn({1, 5, 2, 4}, gen, DType::f64).set_requires_grad(true),
                                Tensor::randn({1, 5, 1, 4}, gen, DType::f64).set_requires_grad(true),
                                Tensor::randn({1, 5, 1, 3}, gen, DType::f64).set_requires_grad(true)};
  GradCheckResult r = grad_check(
      [](const std::vector<Tensor>& x) { return naive_attention(x[0], x[1], x[2], 0.5, 3, 0); }, inputs);
  EXPECT_LT(r.max_rel_error, 1e-6);
}

TEST(CausalAttention, GradCheckOfFusedOp) {
  Generator gen(5);
  for (int64_t window : {0, 3}) {
    std::vector<Tensor> inputs = {Tensor::randn({2, 6, 4, 4}, gen, DType::f64).set_requires_grad(true),
                                  Tensor::randn({2, 6, 2, 4}, gen, DType::f64).set_requires_grad(true),
                                  Tensor::randn({2, 6, 2, 6}, gen, DType::f64).set_requires_grad(true)};
    GradCheckResult r = grad_check(
        [window](const std::vector<Tensor>& x) { return causal_attention(x[0], x[1], x[2], {}, window); }, inputs);
    EXPECT_LT(r.max_rel_error, 1e-6) << "window " << window;
  }
}

// ---- packed sequences (cu_seqlens) ------------------------------------------------------------

Tensor offsets_tensor(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets{0};
  for (int64_t L : lengths) offsets.push_back(offsets.back() + L);
  return Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())});
}

// One call per sequence of the packed row, outputs concatenated over T.
template <class Fn>
Tensor per_sequence(Fn attention, const std::vector<int64_t>& lengths, const Tensor& q, const Tensor& k,
                    const Tensor& v) {
  std::vector<Tensor> o;
  int64_t t0 = 0;
  for (int64_t L : lengths) {
    o.push_back(attention(slice(q, 1, t0, t0 + L), slice(k, 1, t0, t0 + L), slice(v, 1, t0, t0 + L)));
    t0 += L;
  }
  return concat(o, 1);
}

// Each query sees the keys of its own sequence only: one packed call (1-token sequences,
// sequences across the 64-row tiles, GQA, with and without a window) equals the float64
// reference run per sequence and the fused op called per sequence, outputs and gradients.
TEST(CausalAttention, PackedSequencesAttendWithinEachSequence) {
  const std::vector<int64_t> lengths{1, 5, 70, 2, 1, 66};
  const int64_t T = 145;
  const Tensor cu = offsets_tensor(lengths);
  for (int64_t window : {0, 3}) {
    SCOPED_TRACE(window);
    Generator gen(20 + window);
    Tensor q = Tensor::randn({1, T, 4, 16}, gen).set_requires_grad(true);
    Tensor k = Tensor::randn({1, T, 2, 16}, gen).set_requires_grad(true);
    Tensor v = Tensor::randn({1, T, 2, 8}, gen).set_requires_grad(true);
    Tensor w = Tensor::randn({1, T, 4, 8}, gen);
    Result packed = run([&](const Tensor& a, const Tensor& b,
                            const Tensor& d) { return causal_attention(a, b, d, {}, window, {}, cu); },
                        q, k, v, w);
    Result ref = run(
        [&](const Tensor& a, const Tensor& b, const Tensor& d) {
          return per_sequence([&](const Tensor& x, const Tensor& y,
                                  const Tensor& z) { return naive_attention(x, y, z, 0.25, window, 0); },
                              lengths, a, b, d);
        },
        f64_leaf(q), f64_leaf(k), f64_leaf(v), w.to(DType::f64));
    Tensor q1 = q.detach().set_requires_grad(true), k1 = k.detach().set_requires_grad(true);
    Tensor v1 = v.detach().set_requires_grad(true);
    Result separate = run(
        [&](const Tensor& a, const Tensor& b, const Tensor& d) {
          return per_sequence(
              [&](const Tensor& x, const Tensor& y, const Tensor& z) { return causal_attention(x, y, z, {}, window); },
              lengths, a, b, d);
        },
        q1, k1, v1, w);
    EXPECT_LT(relative_error(packed.o, ref.o), 1e-5);
    EXPECT_LT(relative_error(packed.dq, ref.dq), 1e-5);
    EXPECT_LT(relative_error(packed.dk, ref.dk), 1e-5);
    EXPECT_LT(relative_error(packed.dv, ref.dv), 1e-5);
    // The same kernels on the same rows.
    EXPECT_EQ(relative_error(packed.o, separate.o), 0.0);
    EXPECT_EQ(relative_error(packed.dq, separate.dq), 0.0);
    EXPECT_EQ(relative_error(packed.dk, separate.dk), 0.0);
    EXPECT_EQ(relative_error(packed.dv, separate.dv), 0.0);
  }
}

TEST(CausalAttention, GradCheckOfPackedSequences) {
  Generator gen(21);
  const Tensor cu = offsets_tensor({1, 4, 2});
  std::vector<Tensor> inputs = {Tensor::randn({1, 7, 2, 4}, gen, DType::f64).set_requires_grad(true),
                                Tensor::randn({1, 7, 1, 4}, gen, DType::f64).set_requires_grad(true),
                                Tensor::randn({1, 7, 1, 3}, gen, DType::f64).set_requires_grad(true)};
  GradCheckResult r = grad_check(
      [&](const std::vector<Tensor>& x) { return causal_attention(x[0], x[1], x[2], {}, 0, {}, cu); }, inputs);
  EXPECT_LT(r.max_rel_error, 1e-6);
}

TEST(CausalAttention, PackedSequencesBadArgumentsThrow) {
  Tensor q = Tensor::zeros({1, 6, 2, 8}), k = Tensor::zeros({1, 6, 2, 8});
  expect_error(
      [&] {
        causal_attention(q, k, k, {}, 0, {}, offsets_tensor({2, 3}));
      },
      {"causal_attention", "cu_seqlens", "c_N = T = 6", "got c_2 = 5"});
  Tensor q2 = Tensor::zeros({2, 3, 2, 8});
  expect_error([&] { causal_attention(q2, q2, q2, {}, 0, {}, offsets_tensor({3})); },
               {"causal_attention", "cu_seqlens", "B == 1", "B=2"});
  Tensor last = Tensor::zeros({1, 2, 2, 8});
  expect_error([&] { causal_attention(last, k, k, {}, 0, {}, offsets_tensor({2})); },
               {"causal_attention", "cu_seqlens", "Tq = Tk", "Tq=2 Tk=6"});
}

TEST(CausalAttention, CachedFormReadsTheBufferInPlace) {
  // A cache buffer longer than its valid rows: rows past `length` hold garbage (NaN).
  Generator gen(6);
  const int64_t B = 2, cap = 40, len = 33, Hkv = 2, D = 16;
  Tensor k_cache = Tensor::full({B, cap, Hkv, D}, std::nan(""));
  Tensor v_cache = Tensor::full({B, cap, Hkv, D}, std::nan(""));
  Tensor k = Tensor::randn({B, len, Hkv, D}, gen);
  Tensor v = Tensor::randn({B, len, Hkv, D}, gen);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < len; ++j)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t d = 0; d < D; ++d) {
          k_cache.set({b, j, h, d}, k.at({b, j, h, d}));
          v_cache.set({b, j, h, d}, v.at({b, j, h, d}));
        }
  Tensor q = Tensor::randn({B, 3, 4, D}, gen);
  for (int64_t window : {0, 7}) {
    Tensor o = causal_attention_cached(q, k_cache, v_cache, len, {}, window);
    Tensor ref = causal_attention(q, k, v, {}, window);
    EXPECT_LT(relative_error(o, ref), 1e-7) << "window " << window;
  }
}

// A "Key:  123 kB" field of /proc/self/status, in KiB.
int64_t proc_status_kib(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  ADD_FAILURE() << key << " not found in /proc/self/status";
  return 0;
}

TEST(CausalAttention, Prefill32kTokensHasLinearMemory) {
  // A T x T score matrix at T = 32768 would need 4 GiB in float32; the tiled kernel keeps
  // O(T) memory. Peak resident memory may grow by the inputs and output (a few MiB) only.
  const int64_t T = 32768, D = 8;
  Generator gen(7);
  Tensor q = Tensor::randn({1, T, 1, D}, gen);
  Tensor k = Tensor::randn({1, T, 1, D}, gen);
  Tensor v = Tensor::randn({1, T, 1, D}, gen);
  // Writing 5 to /proc/self/clear_refs resets the peak (VmHWM) to the current RSS.
  ASSERT_TRUE(static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5"));
  const int64_t rss_before = proc_status_kib("VmRSS:");
  const int64_t storages_before = Storage::live_count();
  auto start = std::chrono::steady_clock::now();
  Tensor o = causal_attention(q, k, v);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t peak = proc_status_kib("VmHWM:");
  EXPECT_EQ(Storage::live_count() - storages_before, 1);  // the output only
  const double grown_mib = static_cast<double>(peak - rss_before) / 1024.0;
  EXPECT_LT(grown_mib, 64.0);
  std::printf("32k-token prefill (H=1, D=8): %.2f s, peak RSS +%.1f MiB\n", seconds, grown_mib);

  // Spot-check rows against a direct float64 sum over all visible keys.
  std::vector<float> qv = q.to_vector(), kv = k.to_vector(), vv = v.to_vector(), ov = o.to_vector();
  for (int64_t i : {int64_t{0}, int64_t{4095}, T - 1}) {
    std::vector<double> logits(static_cast<size_t>(i + 1));
    double mx = -1e300;
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += static_cast<double>(qv[i * D + d]) * kv[j * D + d];
      logits[j] = s / std::sqrt(static_cast<double>(D));
      mx = std::max(mx, logits[j]);
    }
    std::vector<double> out(D, 0.0);
    double denom = 0;
    for (int64_t j = 0; j <= i; ++j) {
      double p = std::exp(logits[j] - mx);
      denom += p;
      for (int64_t d = 0; d < D; ++d) out[d] += p * vv[j * D + d];
    }
    double err = 0, norm = 0;
    for (int64_t d = 0; d < D; ++d) {
      err += std::pow(ov[i * D + d] - out[d] / denom, 2);
      norm += std::pow(out[d] / denom, 2);
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-4) << "row " << i;
  }
}

TEST(CausalAttention, BadArgumentsThrow) {
  Tensor q = Tensor::zeros({1, 4, 3, 8}), k = Tensor::zeros({1, 4, 2, 8}), v = Tensor::zeros({1, 4, 2, 8});
  expect_error([&] { causal_attention(q, k, v); },
               {"causal_attention: k: expected a kv head count dividing the 3 query heads, got 2"});
  Tensor q4 = Tensor::zeros({1, 4, 4, 8});
  expect_error([&] { causal_attention(q4, Tensor::zeros({1, 4, 2, 6}), v); },
               {"causal_attention: k: expected shape [1, Tk, Hkv, 8], got [1, 4, 2, 6]"});
  expect_error([&] { causal_attention(q4, k, Tensor::zeros({1, 5, 2, 8})); },
               {"causal_attention: v: expected shape [1, 4, 2, Dv], got [1, 5, 2, 8]"});
  expect_error([&] { causal_attention(q4, k, v, {}, -1); },
               {"causal_attention: window_size: expected >= 0 (0 = full), got -1"});
  expect_error([&] { causal_attention(q4, k, v, {}, 0, 1); },
               {"causal_attention: q_offset: expected a value in [0, Tk - Tq] = [0, 0], got 1"});
  expect_error([&] { causal_attention(Tensor::zeros({4, 4, 8}), k, v); },
               {"causal_attention: q: expected shape [B, T, H, D], got [4, 4, 8]"});
  expect_error([&] { causal_attention(q4, k.to(DType::f64), v); }, {"causal_attention: k: expected f32, got f64"});
  expect_error([&] { causal_attention(q4, k, v, {}, 0, 3); }, {"q_offset"});
}

// ---- the Attention mixer ----------------------------------------------------------------

AttentionConfig small_config(int64_t window) {
  AttentionConfig c;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.window_size = window;
  c.init_std = 0.2;  // larger than GPT-2's 0.02 so the softmax is far from uniform
  c.out_init_std = 0.2;
  return c;
}

TEST(AttentionLayer, ParameterNamesAndShapes) {
  Generator gen(8);
  Attention attn(small_config(0), gen);
  std::vector<NamedTensor> params = attn.named_parameters();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0].first, "q_proj.weight");
  EXPECT_EQ(params[1].first, "k_proj.weight");
  EXPECT_EQ(params[2].first, "v_proj.weight");
  EXPECT_EQ(params[3].first, "o_proj.weight");
  EXPECT_EQ(params[0].second.shape(), Shape({32, 32}));
  EXPECT_EQ(params[1].second.shape(), Shape({16, 32}));
  EXPECT_EQ(params[2].second.shape(), Shape({16, 32}));
  EXPECT_EQ(params[3].second.shape(), Shape({32, 32}));
}

TEST(AttentionLayer, ForwardMatchesFloat64Composition) {
  // The layer's wiring (head layout, RoPE on q and k, GQA, o_proj) against the same
  // computation written out in float64 with the naive attention.
  Generator gen(9);
  Attention attn(small_config(6), gen);
  const int64_t B = 2, T = 21;
  Tensor x = Tensor::randn({B, T, 32}, gen);
  Tensor y = attn.forward(x);
  std::vector<NamedTensor> p = attn.named_parameters();
  Tensor x64 = x.to(DType::f64);
  auto proj = [&](int i, const Tensor& in) { return matmul(in, p[i].second.to(DType::f64), false, true); };
  Tensor q = rotary_embedding(proj(0, x64).reshape({B, T, 4, 8}));
  Tensor k = rotary_embedding(proj(1, x64).reshape({B, T, 2, 8}));
  Tensor v = proj(2, x64).reshape({B, T, 2, 8});
  Tensor ref = proj(3, naive_attention(q, k, v, 1.0 / std::sqrt(8.0), 6, 0).reshape({B, T, 32}));
  EXPECT_LT(relative_error(y, ref), 1e-5);
}

// Feeds x [B, T, d] through step() in pieces of the given sizes and concatenates the outputs.
Tensor run_steps(const Attention& attn, const Tensor& x, const std::vector<int64_t>& pieces, MixerState& state) {
  std::vector<Tensor> outs;
  int64_t t = 0;
  for (int64_t n : pieces) {
    outs.push_back(attn.step(slice(x, 1, t, t + n), state));
    t += n;
  }
  return concat(outs, 1);
}

TEST(AttentionLayer, StepMatchesForwardTokenByToken) {
  for (int64_t window : {0, 5}) {
    Generator gen(10);
    Attention attn(small_config(window), gen);
    const int64_t B = 2, T = 37;
    Tensor x = Tensor::randn({B, T, 32}, gen);
    Tensor y = attn.forward(x);
    auto state = attn.make_state(B);
    Tensor y_steps = run_steps(attn, x, std::vector<int64_t>(T, 1), *state);
    EXPECT_LT(relative_error(y_steps, y), 1e-5) << "window " << window;
    auto& cache = dynamic_cast<KVCache&>(*state);
    EXPECT_EQ(cache.position, T);
    if (window > 0) {
      EXPECT_LE(cache.k.size(1), 16);  // the sliding window keeps the cache bounded
    }
  }
}

TEST(AttentionLayer, PrefillThenStepsMatchesForward) {
  for (int64_t window : {0, 5}) {
    Generator gen(11);
    Attention attn(small_config(window), gen);
    const int64_t B = 1, T = 90;
    Tensor x = Tensor::randn({B, T, 32}, gen);
    Tensor y = attn.forward(x);
    auto state = attn.make_state(B);
    Tensor y_steps = run_steps(attn, x, {40, 1, 1, 20, 1, 27}, *state);
    EXPECT_LT(relative_error(y_steps, y), 1e-5) << "window " << window;
  }
}

// Packed sequences through the layer: x [2, 30] as one row of 60 tokens (the row start 30
// implied), each sequence attended and rotated as if alone, with and without a window.
TEST(AttentionLayer, PackedSequencesEqualSeparateCalls) {
  for (int64_t window : {0, 4}) {
    SCOPED_TRACE(window);
    Generator gen(40);
    Attention layer(small_config(window), gen);
    const int64_t B = 2, T = 30, D = 32;
    const std::vector<int64_t> cuts{0, 1, 9, 30, 31, 60};
    Tensor x = Tensor::randn({B, T, D}, gen).set_requires_grad(true);
    Tensor w = Tensor::randn({B, T, D}, gen);
    // Offsets {0, 1, 9, 31, 60}: the row start 30 cuts [9, 31) into [9, 30) and [30, 31).
    Tensor packed = layer.forward(x, offsets_tensor({1, 8, 22, 29}));
    backward(sum(packed * w));
    Tensor x1 = x.detach().set_requires_grad(true);
    Tensor flat = x1.reshape({1, B * T, D});
    std::vector<Tensor> parts;
    for (size_t n = 0; n + 1 < cuts.size(); ++n) parts.push_back(layer.forward(slice(flat, 1, cuts[n], cuts[n + 1])));
    Tensor separate = concat(parts, 1).reshape({B, T, D});
    EXPECT_LT(relative_error(packed, separate), 1e-6);
    std::vector<Tensor> packed_grads{x.grad()};
    for (auto& [name, p] : layer.named_parameters()) packed_grads.push_back(p.grad());
    layer.zero_grad();
    backward(sum(separate * w));
    EXPECT_LT(relative_error(packed_grads[0], x1.grad()), 1e-6) << "dx";
    size_t i = 1;
    for (auto& [name, p] : layer.named_parameters())
      EXPECT_LT(relative_error(packed_grads[i++], p.grad()), 1e-5) << name;
  }
}

TEST(AttentionLayer, StepRejectsForeignState) {
  Generator gen(12);
  Attention attn(small_config(0), gen);
  struct OtherState : MixerState {};
  OtherState other;
  expect_error([&] { attn.step(Tensor::zeros({1, 1, 32}), other); },
               {"Attention::step: state: expected a KVCache (made by Attention::make_state)"});
  auto state = attn.make_state(2);
  expect_error([&] { attn.step(Tensor::zeros({1, 1, 32}), *state); },
               {"Attention::step: x: expected shape [2, T, 32], got [1, 1, 32]"});
}

TEST(AttentionLayer, BadConfigThrows) {
  Generator gen(13);
  AttentionConfig c = small_config(0);
  c.n_kv_heads = 3;
  expect_error([&] { Attention(c, gen); }, {"Attention: n_kv_heads: expected a divisor of n_heads 4, got 3"});
  c = small_config(0);
  c.head_dim = 7;
  expect_error([&] { Attention(c, gen); },
               {"Attention: head_dim: expected a positive even size (RoPE rotates pairs), got 7"});
  c = small_config(-2);
  expect_error([&] { Attention(c, gen); }, {"Attention: window_size: expected >= 0 (0 = full), got -2"});
}

}  // namespace
}  // namespace lat
