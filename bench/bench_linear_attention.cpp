// Forward+backward time of the chunkwise linear-attention ops at
// B = 4, H = 4, K = V = 64, C = 64, T in {256, 512, 2048, 8192}, in fp32 and in bf16 compute
// precision (lat/precision.h: bf16 inputs of the chunk kernels' products, fp32 accumulation),
// the two taking turns repeat by repeat so that a change in the machine's load falls on
// both: median milliseconds of each, their ratio, and GFLOP/s counted with the per-chunk
// FLOP formulas of ALGORITHMS.md as a fraction of the peak of the same precision (GFLOP/s
// of one 2048^3 lat::cpu::gemm_batched, fp32, and gemm_batched_bf16 on inputs rounded to
// bf16 beforehand, both measured here); also the fused_recurrent form (fp32) at the same
// shapes. Where the CPU has no bf16 products (lat::bf16_supported), only fp32 is timed.
//
// By default the benchmark raises glibc's mmap threshold to 1 GiB (mallopt), so freed
// tensors of more than 32 MiB (T = 8192) are reused instead of being returned to the OS
// and faulted in again, zero-filled, at the next allocation; --default-malloc keeps
// glibc's defaults (then T = 8192 also measures page faults of lat's tensor storage).
//
// --cpu-time times with the process CPU clock instead of the wall clock: with
// OMP_NUM_THREADS=1 on a shared, oversubscribed machine it still measures the work.
// --C sets the chunk size (the main job's model uses 16); --precision fp32 or bf16 times
// one precision alone (for a profiler; the ratio needs both).
// --shape mamba2 is the SSD of the Mamba-2 mixer (layers/mamba2_layer.h) at d_model 256,
// expand 2, head_dim 64, d_state 128, n_groups 1: B = 4, H = 8, K = d_state 128, V = head_dim 64,
// C = 64, T = 2048, op simple_gla (q = C, k = B, v = dt x, g = A dt) with q and k of
// G = 1 head (grouped heads, the mixer's real call: B and C shared by the 8 heads; the
// GFLOP/s count Q K^T, P K and P^T Q once per group); later flags override it. It adds a row "mamba2_mixer": the whole lat::Mamba2 layer's forward+backward on
// x [4, 2048, 256] (no GFLOP/s: the count above is the SSD's alone), the peer of
// bench_torch_peer.py --mamba2.
//
//   bench_linear_attention [--op linear_attn|simple_gla|delta_rule|gated_delta_rule|kda]...
//                          [--T N]... [--reps N] [--B N] [--H N] [--K N] [--V N] [--C N]
//                          [--shape mamba2] [--precision fp32|bf16] [--no-recurrent]
//                          [--default-malloc] [--cpu-time]
#include <malloc.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/cpu/bf16.h"
#include "autograd/cpu/gemm.h"
#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "lat/lat.h"
#include "layers/linear_attention/common.h"
#include "layers/mamba2_layer.h"

namespace {

using lat::LinearAttentionOutput;
using lat::Tensor;

// Problem sizes; --B, --H, --K, --V, --C change them (e.g. a model's own head size).
int64_t kB = 4, kH = 4, kK = 64, kV = 64, kC = 64;
int64_t kGroups = 0;  // heads of q and k in the decayed ops (grouped heads); 0: kH

bool g_cpu_time = false;  // --cpu-time

double now_ms() {
  if (g_cpu_time) return 1e3 * static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using lat::bench::median;

// Median time of `reps` runs after one warm-up run.
double median_ms(const std::function<void()>& fn, int reps) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    double t0 = now_ms();
    fn();
    times.push_back(now_ms() - t0);
  }
  return median(times);
}

// Median times of `reps` runs of each of `fns`, which take turns, after one warm-up run each.
std::vector<double> median_ms_in_turns(const std::vector<std::function<void()>>& fns, int reps) {
  for (const auto& fn : fns) fn();
  std::vector<std::vector<double>> times(fns.size());
  for (int i = 0; i < reps; ++i)
    for (size_t f = 0; f < fns.size(); ++f) {
      double t0 = now_ms();
      fns[f]();
      times[f].push_back(now_ms() - t0);
    }
  std::vector<double> medians;
  for (const auto& t : times) medians.push_back(median(t));
  return medians;
}

// GFLOP/s of C = A B with M = N = K = 2048 through the gemm every product of lat uses: fp32,
// or bf16 from inputs rounded beforehand (the product alone).
double gemm_peak_gflops(lat::Precision precision) {
  const int64_t n = 2048;
  lat::Generator gen(1);
  Tensor a = Tensor::randn({n, n}, gen), b = Tensor::randn({n, n}, gen), c = Tensor::empty({n, n});
  lat::cpu::GemmBatch g;
  g.M = g.N = g.K = n;
  g.A = a.data<float>(), g.lda = n, g.stride_a = n * n;
  g.B = b.data<float>(), g.ldb = n, g.stride_b = n * n;
  g.C = c.data<float>(), g.ldc = n, g.stride_c = n * n;
  std::vector<uint16_t> a16(n * n), b16(n * n);
  lat::cpu::float_to_bf16(a.data<float>(), a16.data(), n * n);
  lat::cpu::float_to_bf16(b.data<float>(), b16.data(), n * n);
  double ms = median_ms(
      [&] {
        if (precision == lat::Precision::bf16)
          lat::cpu::gemm_batched_bf16(g, a16.data(), b16.data());
        else
          lat::cpu::gemm_batched(g);
      },
      5);
  return 2.0 * n * n * n / (ms * 1e6);
}

// A row's first columns: the name, T, the fp32 and bf16 medians in ms (null: not timed, "-")
// and their ratio.
void print_times(const char* name, int64_t T, const double* ms32, const double* ms16) {
  std::printf("%-17s %6lld", name, static_cast<long long>(T));
  for (const double* ms : {ms32, ms16}) {
    if (ms)
      std::printf(" %9.2f", *ms);
    else
      std::printf(" %9s", "-");
  }
  if (ms32 && ms16)
    std::printf(" %6.2fx", *ms32 / *ms16);
  else
    std::printf(" %7s", "-");
}

// FLOPs per chunk per (batch, head), forward + backward, ALGORITHMS.md: 2.3 for simple_gla
// (forward 4CKV + 2C^2(K+V), backward 10CKV + 2C^2(3K+2V)); linear attention has the
// same chunk structure (2.2's forward count is the same; 2.3's backward is used);
// 2.4 for the delta rules (forward 6CKV + 2C^2(3K+2V) + 2/3 C^3, backward
// 16CKV + 2C^2(9K+5V) + 4C^3). kda: the gated delta rule's count plus its per-channel
// decay work (ALGORITHMS.md 2.7), for each of the six decayed pair products (two forward,
// four backward) with sub-chunks of S = kKdaSubChunk rows: the elementwise diagonal blocks,
// C (S + 1) / 2 pairs x K channels at 4 FLOPs (exp counted as one, two multiplies, one add),
// and the reference-row rescales, (C^2 / (2 S) + C) x K elements at 2 FLOPs (exp and multiply).
// With grouped q/k heads (kGroups), the products of q and k alone with C x C matrices
// (2C^2K forward, 6C^2K backward) are counted once per group, not per head.
constexpr double kKdaSubChunk = 8;  // chunk_kda_cpu.cpp's kSub

bool decayed(const std::string& op) { return op == "linear_attn" || op == "simple_gla"; }

int64_t qk_heads(const std::string& op) { return decayed(op) && kGroups > 0 ? kGroups : kH; }

double flops_per_chunk(const std::string& op) {
  const double C = kC, K = kK, V = kV;
  if (decayed(op)) {
    const double group_share = static_cast<double>(qk_heads(op)) / static_cast<double>(kH);
    return (4 * C * K * V + 2 * C * C * V) + (10 * C * K * V + 4 * C * C * V) + group_share * 8 * C * C * K;
  }
  const double delta = (6 * C * K * V + 2 * C * C * (3 * K + 2 * V) + 2.0 / 3.0 * C * C * C) +
                       (16 * C * K * V + 2 * C * C * (9 * K + 5 * V) + 4 * C * C * C);
  if (op != "kda") return delta;
  const double S = kKdaSubChunk;
  return delta + 6 * (4 * C * (S + 1) / 2 * K + 2 * (C * C / (2 * S) + C) * K);
}

struct Inputs {
  Tensor q, k, v, g, gk, beta, d_o;  // gk: kda's per-key-channel gate [B, T, H, K]
};

// q, k [kB, T, Hk, kK]; v, d_o [kB, T, kH, kV]; g, beta [kB, T, kH].
Inputs make_inputs(int64_t T, int64_t Hk) {
  lat::Generator gen(7);
  Inputs in;
  auto leaf = [](Tensor t) {
    t.set_requires_grad(true);
    return t;
  };
  in.q = leaf(Tensor::randn({kB, T, Hk, kK}, gen));
  // Unit-norm keys: the delta rules need them (ALGORITHMS.md 2.4), the others do not mind.
  Tensor k = Tensor::randn({kB, T, Hk, kK}, gen);
  {
    float* p = k.data<float>();
    for (int64_t r = 0; r < kB * T * Hk; ++r) {
      double norm = 0.0;
      for (int64_t i = 0; i < kK; ++i) norm += p[r * kK + i] * p[r * kK + i];
      for (int64_t i = 0; i < kK; ++i) p[r * kK + i] = static_cast<float>(p[r * kK + i] / std::sqrt(norm));
    }
  }
  in.k = leaf(k);
  in.v = leaf(Tensor::randn({kB, T, kH, kV}, gen));
  in.g = leaf(Tensor::uniform({kB, T, kH}, gen, -0.1, -0.01));
  in.gk = leaf(Tensor::uniform({kB, T, kH, kK}, gen, -0.1, -0.01));
  in.beta = leaf(Tensor::uniform({kB, T, kH}, gen, 0.05, 0.95));
  in.d_o = Tensor::randn({kB, T, kH, kV}, gen);
  return in;
}

LinearAttentionOutput run_op(const std::string& op, bool chunk, const Inputs& in) {
  const int C = static_cast<int>(kC);
  if (op == "linear_attn")
    return chunk ? lat::chunk_linear_attn(in.q, in.k, in.v, {}, false, {}, false, C)
                 : lat::fused_recurrent_linear_attn(in.q, in.k, in.v);
  if (op == "simple_gla")
    return chunk ? lat::chunk_simple_gla(in.q, in.k, in.v, in.g, {}, {}, false, C)
                 : lat::fused_recurrent_simple_gla(in.q, in.k, in.v, in.g);
  if (op == "delta_rule")
    return chunk ? lat::chunk_delta_rule(in.q, in.k, in.v, in.beta, {}, {}, false, false, C)
                 : lat::fused_recurrent_delta_rule(in.q, in.k, in.v, in.beta);
  if (op == "kda")
    return chunk ? lat::chunk_kda(in.q, in.k, in.v, in.gk, in.beta, {}, {}, false, false, C)
                 : lat::fused_recurrent_kda(in.q, in.k, in.v, in.gk, in.beta);
  return chunk ? lat::chunk_gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, {}, {}, false, false, C)
               : lat::fused_recurrent_gated_delta_rule(in.q, in.k, in.v, in.g, in.beta);
}

// One forward + backward (o's upstream gradient d_o) in `precision`; input gradients are
// dropped.
void forward_backward(const std::string& op, bool chunk, const Inputs& in, lat::Precision precision) {
  const lat::PrecisionGuard guard(precision);
  LinearAttentionOutput out = run_op(op, chunk, in);
  lat::backward(out.o, in.d_o);
  for (Tensor t : {in.q, in.k, in.v, in.g, in.gk, in.beta}) t.zero_grad();
}

// The Mamba-2 mixer of --shape mamba2: d_model 256, expand 2, head_dim 64 (8 heads),
// d_state 128, n_groups 1, conv_size 4, chunk 64 (transformers' Mamba2Config at
// hidden_size 256 with those sizes).
constexpr int64_t kMamba2DModel = 256;

lat::MixerConfig mamba2_config() {
  lat::MixerConfig c;
  c.d_model = kMamba2DModel;
  c.mamba.d_state = 128;
  c.mamba.head_dim = 64;
  c.mamba.expand = 2;
  c.mamba.n_groups = 1;
  c.mamba.conv_size = 4;
  c.mamba.chunk_size = 64;
  return c;
}

// One forward + backward of `mixer` on x [kB, T, 256] with upstream gradient dy, in
// `precision`; the gradients are dropped.
void mixer_forward_backward(const lat::Mamba2& mixer, Tensor x, const Tensor& dy, lat::Precision precision) {
  const lat::PrecisionGuard guard(precision);
  lat::backward(mixer.forward(x), dy);
  x.zero_grad();
  for (Tensor p : mixer.parameters()) p.zero_grad();
}

// The benchmark: flags, then the table. Returns the exit code (2: bad usage).
int run(int argc, char** argv) {
  std::vector<std::string> ops;
  std::vector<int64_t> lengths;
  int reps = 7;
  bool recurrent = true;
  bool tune_malloc = true;
  std::string only;  // --precision: time this precision alone
  bool mamba2 = false;  // --shape mamba2
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--op" && i + 1 < argc) {
      ops.push_back(argv[++i]);
    } else if (arg == "--precision" && i + 1 < argc) {
      only = argv[++i];
      if (only != "fp32" && only != "bf16") {
        std::fprintf(stderr, "error: --precision: expected fp32 or bf16, got '%s'\n", only.c_str());
        return 2;
      }
    } else if ((arg == "--T" || arg == "--B" || arg == "--H" || arg == "--K" || arg == "--V" || arg == "--C" ||
                arg == "--reps") &&
               i + 1 < argc) {
      // The ops' own bounds (head dims, chunk size), and sizes whose inputs fit in memory.
      const int64_t max = arg == "--T" ? int64_t{1} << 20
                          : arg == "--K" || arg == "--V" ? lat::linear_attention::kMaxHeadDim
                          : arg == "--reps" ? 1000
                                            : 1024;
      int64_t n = 0;
      try {
        n = lat::bench::parse_int_flag(argv[++i], arg.c_str(), 1, max);
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
      }
      if (arg == "--T")
        lengths.push_back(n);
      else if (arg == "--reps")
        reps = static_cast<int>(n);
      else
        (arg == "--B" ? kB : arg == "--H" ? kH : arg == "--K" ? kK : arg == "--C" ? kC : kV) = n;
    } else if (arg == "--shape" && i + 1 < argc) {
      if (std::string(argv[++i]) != "mamba2") {
        std::fprintf(stderr, "error: --shape: expected mamba2, got '%s'\n", argv[i]);
        return 2;
      }
      mamba2 = true;
      kB = 4, kH = 8, kK = 128, kV = 64, kC = 64, kGroups = 1;
    } else if (arg == "--no-recurrent") {
      recurrent = false;
    } else if (arg == "--default-malloc") {
      tune_malloc = false;
    } else if (arg == "--cpu-time") {
      g_cpu_time = true;
    } else {
      if (arg == "--help" || arg == "-h") {
        std::printf(
            "usage: %s [--op linear_attn|simple_gla|delta_rule|gated_delta_rule|kda]... [--T N]... [--reps N] "
            "[--B N] [--H N] [--K N] [--V N] [--C N] [--shape mamba2] [--precision fp32|bf16] [--no-recurrent] "
            "[--default-malloc] [--cpu-time]\n",
            argv[0]);
        return 0;
      }
      std::fprintf(stderr,
                   "error: %s: unknown flag or missing value (usage: %s [--op "
                   "linear_attn|simple_gla|delta_rule|gated_delta_rule|kda]... [--T N]... [--reps N] "
                   "[--B N] [--H N] [--K N] [--V N] [--C N] [--shape mamba2] [--precision fp32|bf16] [--no-recurrent] "
                   "[--default-malloc] [--cpu-time])\n",
                   arg.c_str(), argv[0]);
      return 2;
    }
  }
  if (ops.empty())
    ops = mamba2 ? std::vector<std::string>{"simple_gla"}
                 : std::vector<std::string>{"linear_attn", "simple_gla", "delta_rule", "gated_delta_rule"};
  if (lengths.empty()) lengths = mamba2 ? std::vector<int64_t>{2048} : std::vector<int64_t>{256, 512, 2048, 8192};
  for (const std::string& op : ops)
    if (op != "linear_attn" && op != "simple_gla" && op != "delta_rule" && op != "gated_delta_rule" && op != "kda") {
      std::fprintf(stderr,
                   "error: --op: unknown op '%s' (linear_attn, simple_gla, delta_rule, gated_delta_rule, kda)\n",
                   op.c_str());
      return 2;
    }

  if (tune_malloc) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  using lat::Precision;
  const bool bf16 = lat::bf16_supported(lat::Device::cpu());
  const double peak32 = gemm_peak_gflops(Precision::fp32);
  const double peak16 = bf16 ? gemm_peak_gflops(Precision::bf16) : 0.0;
  std::printf("threads %d, %s time, 2048^3 peaks: sgemm %.1f GFLOP/s, bf16 gemm %.1f GFLOP/s%s, malloc %s; "
              "B=%lld H=%lld K=%lld V=%lld C=%lld, forward+backward\n",
              lat::get_num_threads(), g_cpu_time ? "CPU" : "wall", peak32, peak16,
              bf16 ? "" : " (no bf16 products on this CPU: fp32 only)",
              tune_malloc ? "mmap threshold 1 GiB" : "glibc defaults", static_cast<long long>(kB),
              static_cast<long long>(kH), static_cast<long long>(kK), static_cast<long long>(kV),
              static_cast<long long>(kC));
  std::printf("%-17s %6s %9s %9s %7s %14s %14s %11s %14s %8s\n", "op", "T", "fp32 ms", "bf16 ms", "bf16 x",
              "fp32 GFLOP/s", "bf16 GFLOP/s", "us/tok", "recurrent ms", "speedup");
  for (const std::string& op : ops)
    for (int64_t T : lengths) {
      Inputs in = make_inputs(T, qk_heads(op));
      const bool time32 = only != "bf16", time16 = bf16 && only != "fp32";
      std::vector<std::function<void()>> runs;
      if (time32) runs.push_back([&] { forward_backward(op, true, in, Precision::fp32); });
      if (time16) runs.push_back([&] { forward_backward(op, true, in, Precision::bf16); });
      const std::vector<double> ms = median_ms_in_turns(runs, reps);
      const double ms32 = time32 ? ms[0] : 0.0, ms16 = time16 ? ms.back() : 0.0;
      const double flops = flops_per_chunk(op) * static_cast<double>((T + kC - 1) / kC) * kB * kH;
      const double gflops32 = flops / (ms32 * 1e6), gflops16 = flops / (ms16 * 1e6);
      print_times(op.c_str(), T, time32 ? &ms32 : nullptr, time16 ? &ms16 : nullptr);
      if (time32)
        std::printf(" %6.1f (%3.0f%%)", gflops32, 100.0 * gflops32 / peak32);
      else
        std::printf(" %14s", "-");
      if (time16)
        std::printf(" %6.1f (%3.0f%%)", gflops16, 100.0 * gflops16 / peak16);
      else
        std::printf(" %14s", "-");
      std::printf(" %11.3f", 1e3 * (time32 ? ms32 : ms16) / static_cast<double>(T));
      if (recurrent) {
        double rec_ms =
            median_ms([&] { forward_backward(op, false, in, Precision::fp32); }, std::max(1, reps / 3));
        std::printf(" %14.2f %7.1fx", rec_ms, rec_ms / (time32 ? ms32 : ms16));
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  if (mamba2) {
    lat::Generator gen(3);
    const lat::Mamba2 mixer(mamba2_config(), gen);
    for (int64_t T : lengths) {
      Tensor x = Tensor::randn({kB, T, kMamba2DModel}, gen);
      x.set_requires_grad(true);
      const Tensor dy = Tensor::randn({kB, T, kMamba2DModel}, gen);
      const bool time32 = only != "bf16", time16 = bf16 && only != "fp32";
      std::vector<std::function<void()>> runs;
      if (time32) runs.push_back([&] { mixer_forward_backward(mixer, x, dy, Precision::fp32); });
      if (time16) runs.push_back([&] { mixer_forward_backward(mixer, x, dy, Precision::bf16); });
      const std::vector<double> ms = median_ms_in_turns(runs, reps);
      const double ms32 = time32 ? ms[0] : 0.0, ms16 = time16 ? ms.back() : 0.0;
      print_times("mamba2_mixer", T, time32 ? &ms32 : nullptr, time16 ? &ms16 : nullptr);
      std::printf(" %14s %14s %11.3f\n", "-", "-", 1e3 * (time32 ? ms32 : ms16) / static_cast<double>(T));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // an op refusing a shape, or inputs too large for memory
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
