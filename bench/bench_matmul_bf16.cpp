// fp32 against bf16 matrix products (train.precision), in one process, on the CPU: GFLOP/s of
// lat::matmul at each precision for a 2048^3 product (the peak) and for every product shape
// of a training step of the main job (configs/shakespeare_hybrid.yaml: 1024 rows = batch 4 x
// block 256, d_model 128, SwiGLU hidden 352, vocab 65): each Linear's forward y = x W^T, its
// input gradient dx = dy W and its weight gradient dW = dy^T x. The precisions take turns,
// repeat by repeat, so that a change in the machine's load falls on both; medians; bf16 over
// fp32 as a ratio. Also the share of a bf16 product spent rounding its two inputs to bf16.
//
//   build/bench/bench_matmul_bf16 [--threads N] [--repeats N]
// Threads: OpenMP's default unless --threads. With one thread the products are timed in the
// process's CPU time, which leaves out the time other processes hold the core (a loaded
// machine still slows them through shared caches); with more, in wall time.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "autograd/cpu/bf16.h"
#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "lat/lat.h"

namespace {

using lat::bench::median;
using lat::bench::now_seconds;
using lat::bench::seconds_per_call;

/// One product of the table: op(a) op(b) with a [M, K] (or [K, M] when ta), b [K, N] (or
/// [N, K] when tb).
struct Shape3 {
  const char* name;
  int64_t M, N, K;
  bool ta, tb;
};

void bench_shape(const Shape3& s, int repeats) {
  lat::Generator gen(1);
  const lat::Tensor a = lat::Tensor::randn(s.ta ? lat::Shape{s.K, s.M} : lat::Shape{s.M, s.K}, gen);
  const lat::Tensor b = lat::Tensor::randn(s.tb ? lat::Shape{s.N, s.K} : lat::Shape{s.K, s.N}, gen);
  const double flop = 2.0 * static_cast<double>(s.M * s.N * s.K);
  auto product = [&](lat::Precision p) {
    const lat::PrecisionGuard guard(p);
    return lat::matmul(a, b, s.ta, s.tb);
  };
  // Calls per sample for about 20 ms of fp32 work at 100 GFLOP/s; warm-up first (primitives).
  const int calls = static_cast<int>(std::clamp(20e-3 * 100e9 / flop, 1.0, 5000.0));
  product(lat::Precision::fp32);
  product(lat::Precision::bf16);
  std::vector<uint16_t> rounded(static_cast<size_t>(a.numel() + b.numel()));
  std::vector<double> t32, t16, tround;
  for (int r = 0; r < repeats; ++r) {
    t32.push_back(seconds_per_call([&] { product(lat::Precision::fp32); }, calls));
    t16.push_back(seconds_per_call([&] { product(lat::Precision::bf16); }, calls));
    tround.push_back(seconds_per_call(
        [&] {
          lat::cpu::float_to_bf16(a.data<float>(), rounded.data(), a.numel());
          lat::cpu::float_to_bf16(b.data<float>(), rounded.data() + a.numel(), b.numel());
        },
        calls));
  }
  const double f32 = median(t32), b16 = median(t16), round = median(tround);
  std::printf("%-22s %5lld %5lld %5lld %3s %3s %9.1f %9.1f %7.2fx %8.1f%%\n", s.name, static_cast<long long>(s.M),
              static_cast<long long>(s.N), static_cast<long long>(s.K), s.ta ? "T" : "-", s.tb ? "T" : "-",
              flop / f32 / 1e9, flop / b16 / 1e9, f32 / b16, 100.0 * round / b16);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 9;
  if (const std::optional<int> exit_code = lat::bench::parse_threads_and_repeats_only(
          argc, argv, repeats, "usage: bench_matmul_bf16 [--threads N] [--repeats N]"))
    return *exit_code;
  if (!lat::bf16_supported(lat::Device::cpu())) {
    std::printf("bench_matmul_bf16: this CPU has no AVX512-BF16 (or DNNL_MAX_CPU_ISA caps it): nothing to compare\n");
    return 0;
  }
  const int64_t rows = 1024, d = 128, hidden = 352, vocab = 65;
  const std::vector<Shape3> shapes = {
      {"peak 2048^3", 2048, 2048, 2048, false, false},
      {"qkvo fwd  x W^T", rows, d, d, false, true},
      {"qkvo dx   dy W", rows, d, d, false, false},
      {"qkvo dW   dy^T x", d, d, rows, true, false},
      {"mlp up fwd", rows, hidden, d, false, true},
      {"mlp up dx", rows, d, hidden, false, false},
      {"mlp up dW", hidden, d, rows, true, false},
      {"mlp down fwd", rows, d, hidden, false, true},
      {"mlp down dx", rows, hidden, d, false, false},
      {"mlp down dW", d, hidden, rows, true, false},
      {"lm_head fwd", rows, vocab, d, false, true},
      {"lm_head dx", rows, d, vocab, false, false},
      {"lm_head dW", vocab, d, rows, true, false},
  };
  std::printf("lat::matmul fp32 vs bf16 (bf16 inputs, fp32 accumulation), %d threads, medians of %d interleaved "
              "repeats, %s time\n",
              lat::get_num_threads(), repeats, lat::get_num_threads() == 1 ? "CPU" : "wall");
  std::printf("%-22s %5s %5s %5s %3s %3s %9s %9s %8s %9s\n", "product", "M", "N", "K", "ta", "tb", "fp32 GF/s",
              "bf16 GF/s", "bf16/fp32", "rounding");
  for (const Shape3& s : shapes) bench_shape(s, repeats);
  std::printf("(rounding: time to round both inputs to bf16, as a share of the whole bf16 product)\n");
  return 0;
}
