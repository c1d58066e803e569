// The causal depthwise short convolution + SiLU (lat::short_conv) on the CPU, forward alone
// and forward + backward (dx and dweight), at the main job's shape (configs/shakespeare_hybrid.yaml:
// batch 4, block 256, q/k/v of 4 heads x 32 = 128 channels, conv_size 4) and packed: the
// same 1024 tokens as one B == 1 row of documents cut by cu_seqlens (lengths cycling through
// 85, 30, 349, 120, 1, 60, 200, 12: tiny Shakespeare's blank-line documents have median 85,
// 10th percentile 30, 90th 349 characters), as data.packing runs it. Median microseconds per
// call and nanoseconds per output element over interleaved repeats.
//
//   build/bench/bench_short_conv [--threads N] [--repeats N]
// Threads: OpenMP's default unless --threads. With one thread the calls are timed in the
// process's CPU time, which leaves out the time other processes hold the core; with more,
// in wall time.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "lat/lat.h"
#include "layers/fused/short_conv.h"
#include "train/run/heap.h"

namespace {

using lat::bench::median;
using lat::bench::seconds_per_call;

struct ConvShape {
  const char* name;
  int64_t B, T, D, W;
  bool packed;  // B == 1, documents cut by cu_seqlens
};

/// cu_seqlens [N + 1] of documents with the cycling lengths above, the last one cut at T.
lat::Tensor document_offsets(int64_t T) {
  const int64_t lengths[] = {85, 30, 349, 120, 1, 60, 200, 12};
  std::vector<int64_t> offsets{0};
  for (int64_t i = 0; offsets.back() < T; ++i) offsets.push_back(std::min(T, offsets.back() + lengths[i % 8]));
  return lat::Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())});
}

void bench_shape(const ConvShape& s, int repeats) {
  lat::Generator gen(1);
  lat::Tensor x = lat::Tensor::randn({s.B, s.T, s.D}, gen);
  lat::Tensor weight = lat::Tensor::randn({s.D, 1, s.W}, gen, lat::DType::f32, 0.0, 0.5);
  const lat::Tensor dy = lat::Tensor::randn({s.B, s.T, s.D}, gen);
  const lat::Tensor cu_seqlens = s.packed ? document_offsets(s.T) : lat::Tensor();
  auto forward = [&] {
    const lat::NoGradGuard no_grad;
    lat::short_conv(x, weight, {}, cu_seqlens);
  };
  auto forward_backward = [&] {
    x.set_requires_grad(true), weight.set_requires_grad(true);
    lat::backward(lat::short_conv(x, weight, {}, cu_seqlens), dy);
    x.zero_grad(), weight.zero_grad();
  };
  forward_backward();  // warm-up
  const int calls = 50;
  std::vector<double> t_fwd, t_all;
  for (int r = 0; r < repeats; ++r) {
    t_fwd.push_back(seconds_per_call(forward, calls));
    t_all.push_back(seconds_per_call(forward_backward, calls));
  }
  const double elements = static_cast<double>(s.B * s.T * s.D);
  const char* pass[2] = {"fwd", "fwd+bwd"};
  const double seconds[2] = {median(t_fwd), median(t_all)};
  for (int j = 0; j < 2; ++j)
    std::printf("%-8s B%-2lld T%-5lld D%-4lld W%-2lld %-8s %9.1f %9.2f\n", s.name, static_cast<long long>(s.B),
                static_cast<long long>(s.T), static_cast<long long>(s.D), static_cast<long long>(s.W), pass[j],
                1e6 * seconds[j], 1e9 * seconds[j] / elements);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 15;
  if (const std::optional<int> exit_code = lat::bench::parse_threads_and_repeats_only(
          argc, argv, repeats, "usage: bench_short_conv [--threads N] [--repeats N]"))
    return *exit_code;
  lat::keep_freed_memory();  // the trainer's malloc settings: no fresh pages per call
  std::printf(
      "short_conv (causal depthwise conv + SiLU) on the CPU, %d thread(s), medians of %d repeats of 50 "
      "calls, %s time\n",
      lat::get_num_threads(), repeats, lat::get_num_threads() == 1 ? "CPU" : "wall");
  std::printf("%-8s %-20s %-8s %9s %9s\n", "shape", "size", "pass", "us", "ns/elem");
  const ConvShape shapes[] = {
      {"main", 4, 256, 128, 4, false},    // batch 4 x block 256, q/k/v channels, conv_size 4
      {"packed", 1, 1024, 128, 4, true},  // the same tokens as packed documents
  };
  for (const ConvShape& s : shapes) bench_shape(s, repeats);
  return 0;
}
