// The fused causal softmax attention (lat::causal_attention) on the CPU, fp32 against bf16
// (train.precision), in one process: forward alone and forward + backward, at the main job's
// shape (configs/shakespeare_hybrid.yaml: batch 4, block 256, 4 heads of 32, window 256 =
// full causal) and at a larger one, as median milliseconds, GFLOP/s and the share of the
// matrix-product peak of the same precision, measured here with a 1024^3 lat::matmul. The
// precisions take turns, repeat by repeat, so that a change in the machine's load falls on
// both.
//
// FLOPs count the products a causal attention needs, over the visible (query, key) pairs
// only: forward 2 D (scores) + 2 Dv (P V) per pair and head; backward 2 D (scores again) +
// 2 Dv (dP = dO V^T) + 4 D (dQ, dK) + 2 Dv (dV). The exp of the softmax is not counted.
//
//   build/bench/bench_attention [--threads N] [--repeats N] [--shape main|large]
// Threads: OpenMP's default unless --threads. With one thread the calls are timed in the
// process's CPU time, which leaves out the time other processes hold the core (a loaded
// machine still slows them through shared caches); with more, in wall time.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "lat/lat.h"
#include "layers/fused/attention_op.h"
#include "train/run/heap.h"

namespace {

using lat::bench::median;
using lat::bench::now_seconds;
using lat::bench::seconds_per_call;

/// Calls per sample for about 50 ms of work at `gflops`.
int calls_for(double flop, double gflops) {
  return static_cast<int>(std::clamp(50e-3 * gflops * 1e9 / flop, 1.0, 1000.0));
}

/// GFLOP/s of a 1024^3 lat::matmul in precision p: the peak the attention is measured against.
double matmul_peak(lat::Precision p, int repeats) {
  lat::Generator gen(1);
  const int64_t n = 1024;
  const lat::Tensor a = lat::Tensor::randn({n, n}, gen), b = lat::Tensor::randn({n, n}, gen);
  const lat::PrecisionGuard guard(p);
  const double flop = 2.0 * static_cast<double>(n * n * n);
  lat::matmul(a, b);  // warm-up: oneDNN primitive creation
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) t.push_back(seconds_per_call([&] { lat::matmul(a, b); }, calls_for(flop, 100)));
  return flop / median(t) / 1e9;
}

struct Shape {
  const char* name;
  int64_t B, T, H, Hkv, D, Dv, window;
};

/// Visible (query, key) pairs per head and batch item of a causal attention over T tokens.
double visible_pairs(const Shape& s) {
  double pairs = 0;
  for (int64_t i = 0; i < s.T; ++i)
    pairs += static_cast<double>(s.window > 0 ? std::min<int64_t>(i + 1, s.window) : i + 1);
  return pairs;
}

void bench_shape(const Shape& s, int repeats, double peak32, double peak16) {
  lat::Generator gen(1);
  lat::Tensor q = lat::Tensor::randn({s.B, s.T, s.H, s.D}, gen);
  lat::Tensor k = lat::Tensor::randn({s.B, s.T, s.Hkv, s.D}, gen);
  lat::Tensor v = lat::Tensor::randn({s.B, s.T, s.Hkv, s.Dv}, gen);
  const lat::Tensor grad_o = lat::Tensor::randn({s.B, s.T, s.H, s.Dv}, gen);
  const double heads = static_cast<double>(s.B * s.H) * visible_pairs(s);
  const double flop_fwd = heads * (2.0 * s.D + 2.0 * s.Dv);
  const double flop_bwd = heads * (6.0 * s.D + 4.0 * s.Dv);
  auto forward = [&](lat::Precision p) {
    const lat::PrecisionGuard guard(p);
    const lat::NoGradGuard no_grad;
    lat::causal_attention(q, k, v, {}, s.window);
  };
  auto forward_backward = [&](lat::Precision p) {
    const lat::PrecisionGuard guard(p);
    q.set_requires_grad(true), k.set_requires_grad(true), v.set_requires_grad(true);
    const lat::Tensor o = lat::causal_attention(q, k, v, {}, s.window);
    lat::backward(o, grad_o);
    q.zero_grad(), k.zero_grad(), v.zero_grad();
  };
  const lat::Precision precisions[] = {lat::Precision::fp32, lat::Precision::bf16};
  for (lat::Precision p : precisions) forward_backward(p);  // warm-up
  const int calls_fwd = calls_for(flop_fwd, 20), calls_all = calls_for(flop_fwd + flop_bwd, 20);
  std::vector<double> t[2][2];  // [precision][forward, forward + backward]
  for (int r = 0; r < repeats; ++r)
    for (int i = 0; i < 2; ++i) {
      t[i][0].push_back(seconds_per_call([&] { forward(precisions[i]); }, calls_fwd));
      t[i][1].push_back(seconds_per_call([&] { forward_backward(precisions[i]); }, calls_all));
    }
  const char* pass[2] = {"fwd", "fwd+bwd"};
  const double flop[2] = {flop_fwd, flop_fwd + flop_bwd};
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 2; ++i) {
      const double seconds = median(t[i][j]), gflops = flop[j] / seconds / 1e9;
      std::printf("%-10s %-8s %-5s %9.3f %8.1f %8.1f%%\n", s.name, pass[j], lat::precision_name(precisions[i]),
                  1e3 * seconds, gflops, 100.0 * gflops / (i == 0 ? peak32 : peak16));
    }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 9;
  std::string only;  // one shape's name, or all
  const char* usage = "usage: bench_attention [--threads N] [--repeats N] [--shape main|large]";
  try {
    for (int i = 1; i < argc; ++i) {
      if (lat::bench::take_threads_or_repeats(argc, argv, i, repeats)) continue;
      const std::string arg = argv[i];
      if (arg == "--shape" && i + 1 < argc) {
        only = argv[++i];
        if (only != "main" && only != "large") throw std::invalid_argument("--shape: expected main or large, got '" + only + "'");
      } else {
        return lat::bench::help_or_usage_error(arg, usage);
      }
    }
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  lat::keep_freed_memory();  // the trainer's malloc settings: no fresh pages per call
  const bool bf16 = lat::bf16_supported(lat::Device::cpu());
  const double peak32 = matmul_peak(lat::Precision::fp32, repeats);
  const double peak16 = bf16 ? matmul_peak(lat::Precision::bf16, repeats) : peak32;
  std::printf("causal_attention on the CPU, %d thread(s), medians of %d interleaved repeats, %s time\n",
              lat::get_num_threads(), repeats, lat::get_num_threads() == 1 ? "CPU" : "wall");
  std::printf("matmul 1024^3 peak: fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s%s\n", peak32, peak16,
              bf16 ? "" : " (no AVX512-BF16 here: bf16 runs in fp32)");
  std::printf("%-10s %-8s %-5s %9s %8s %9s\n", "shape", "pass", "prec", "ms", "GFLOP/s", "of peak");
  const std::vector<Shape> shapes = {
      {"main", 4, 256, 4, 4, 32, 32, 256},  // B4 T256 H4 D32, window 256
      {"large", 4, 1024, 8, 8, 64, 64, 0},  // B4 T1024 H8 D64, full causal
  };
  for (const Shape& s : shapes)
    if (only.empty() || only == s.name) bench_shape(s, repeats, peak32, peak16);
  std::printf("(FLOPs over the visible pairs: forward 2D + 2Dv, backward 6D + 4Dv per pair and head)\n");
  return 0;
}
