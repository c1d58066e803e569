// GPU benchmark: forward and forward+backward of chunk_simple_gla and
// chunk_gated_delta_rule on CUDA at B=8, H=16, K=V=128, T in {2048, 8192}, with GFLOP/s
// from the FLOP counts of ALGORITHMS.md (2.3, 2.4) and that figure as a fraction of the
// f32 sgemm peak (cuBLAS, TF32 off) measured in the same process.
//
//   build/bench/bench_gpu [--quick] [--iters N]
// --quick: T = 2048 only. Prints "skipped" and exits 0 when no CUDA device is visible,
// so `make bench` passes on CPU-only machines.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lat/cuda.h"
#include "lat/lat.h"

namespace {

using lat::Device;
using lat::Tensor;

const Device kGpu = Device::cuda(0);

// xorshift64*: fills large host buffers fast (hundreds of millions of values).
struct FastRandom {
  uint64_t s;
  float uniform(float lo, float hi) {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    const uint64_t r = s * 2685821657736338717ull;
    return lo + (hi - lo) * static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
  }
};

Tensor random_gpu(const lat::Shape& shape, FastRandom& rng, float lo, float hi, bool requires_grad) {
  std::vector<float> host(static_cast<size_t>(lat::shape_numel(shape)));
  for (float& x : host) x = rng.uniform(lo, hi);
  Tensor t = Tensor::from_vector(host, shape).to(kGpu);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// FLOPs per chunk per (batch, head) from ALGORITHMS.md (a multiply-add = 2 FLOPs).
double chunk_flops(bool delta, bool backward, double C, double K, double V) {
  if (!delta) return backward ? 10 * C * K * V + 2 * C * C * (3 * K + 2 * V) : 4 * C * K * V + 2 * C * C * (K + V);
  return backward ? 16 * C * K * V + 2 * C * C * (9 * K + 5 * V) + 4 * C * C * C
                  : 6 * C * K * V + 2 * C * C * (3 * K + 2 * V) + 2.0 / 3.0 * C * C * C;
}

// GFLOP/s of an f32 [n, n] x [n, n] product through cuBLAS (TF32 off).
double sgemm_gflops(int64_t n) {
  FastRandom rng{42};
  Tensor a = random_gpu({n, n}, rng, -1, 1, false), b = random_gpu({n, n}, rng, -1, 1, false);
  lat::NoGradGuard no_grad;
  lat::matmul(a, b);
  lat::cuda::synchronize();
  const int iters = 5;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) lat::matmul(a, b);
  lat::cuda::synchronize();
  return 2.0 * n * n * n * iters / seconds_since(start) / 1e9;
}

struct Row {
  std::string op;
  int64_t T;
  double fwd_ms, fwd_bwd_ms, gflops, peak_fraction, tokens_per_s;
};

Row bench(bool delta, int64_t T, int iters, double peak_gflops) {
  const int64_t B = 8, H = 16, K = 128, V = 128, C = 64;
  FastRandom rng{static_cast<uint64_t>(T) * 7919 + (delta ? 1 : 0)};
  Tensor q = random_gpu({B, T, H, K}, rng, -1, 1, true), k = random_gpu({B, T, H, K}, rng, -1, 1, true);
  Tensor v = random_gpu({B, T, H, V}, rng, -1, 1, true), g = random_gpu({B, T, H}, rng, -0.1f, -0.01f, true);
  Tensor beta = delta ? random_gpu({B, T, H}, rng, 0.05f, 0.95f, true) : Tensor();
  Tensor d_o = random_gpu({B, T, H, V}, rng, -1, 1, false);
  auto run = [&] {
    // The delta rule runs as the layers call it: q and k L2-normalized inside the op.
    return delta ? lat::chunk_gated_delta_rule(q, k, v, g, beta, {}, {}, false, true).o
                 : lat::chunk_simple_gla(q, k, v, g).o;
  };
  auto forward_only = [&] {
    lat::NoGradGuard no_grad;
    run();
  };
  auto forward_backward = [&] {
    Tensor o = run();
    lat::backward(o, d_o);
    for (Tensor* t : {&q, &k, &v, &g, &beta})
      if (t->defined()) t->zero_grad();
  };
  forward_backward();  // warm-up: allocator cache, kernel attributes
  lat::cuda::synchronize();
  auto time_ms = [&](auto fn) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    lat::cuda::synchronize();
    return seconds_since(start) * 1e3 / iters;
  };
  Row r;
  r.op = delta ? "chunk_gated_delta_rule" : "chunk_simple_gla";
  r.T = T;
  r.fwd_ms = time_ms(forward_only);
  r.fwd_bwd_ms = time_ms(forward_backward);
  const double chunks = static_cast<double>(B * H * ((T + C - 1) / C));
  const double flops = chunks * (chunk_flops(delta, false, C, K, V) + chunk_flops(delta, true, C, K, V));
  r.gflops = flops / (r.fwd_bwd_ms * 1e-3) / 1e9;
  r.peak_fraction = r.gflops / peak_gflops;
  r.tokens_per_s = static_cast<double>(B * T) / (r.fwd_bwd_ms * 1e-3);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int iters = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_gpu [--quick] [--iters N]\n");
      return 2;
    }
  }
  if (lat::cuda_device_count() == 0) {
    std::printf("bench_gpu: %s: skipped\n",
                lat::cuda_built() ? "no CUDA device visible" : "lat was built without CUDA");
    return 0;
  }
  try {
    const double peak = sgemm_gflops(8192);
    lat::cuda::set_allow_tf32(true);
    const double peak_tf32 = sgemm_gflops(8192);
    lat::cuda::set_allow_tf32(false);
    std::vector<Row> rows;
    for (bool delta : {false, true})
      for (int64_t T : {int64_t{2048}, int64_t{8192}}) {
        if (quick && T > 2048) continue;
        rows.push_back(bench(delta, T, iters, peak));
        lat::cuda::empty_cache();
      }
    std::printf("\nsgemm f32 8192^3 (cuBLAS): %.0f GFLOP/s (TF32: %.0f GFLOP/s)\n", peak, peak_tf32);
    std::printf("B=8 H=16 K=V=128 C=64, f32, mean of %d iterations\n", iters);
    std::printf("%-24s %6s %10s %12s %10s %8s %12s\n", "op", "T", "fwd ms", "fwd+bwd ms", "GFLOP/s", "% peak",
                "Mtok/s f+b");
    for (const Row& r : rows)
      std::printf("%-24s %6lld %10.2f %12.2f %10.0f %7.1f%% %12.2f\n", r.op.c_str(), static_cast<long long>(r.T),
                  r.fwd_ms, r.fwd_bwd_ms, r.gflops, 100.0 * r.peak_fraction, r.tokens_per_s / 1e6);
  } catch (const lat::Error& e) {
    std::fprintf(stderr, "bench_gpu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
