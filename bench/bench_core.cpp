// Core benchmark, in one process: the two costs that bound every model step on the CPU.
//  1. sgemm GFLOP/s of a 2048 x 2048 x 2048 f32 product through lat::matmul and through a
//     direct oneDNN 2.6 matmul written here, interleaved over several repeats; the medians
//     and their ratio (lat should be within 5% of the direct call).
//  2. The cost of one tiny op (mul of two [4] f32 tensors that require grad) recorded on
//     the tape, versus the same op under NoGradGuard, versus a raw loop: microseconds per
//     op and the ratios (target: under 2 us per recorded op).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "bench/bench_timing.h"
#include "lat/lat.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

using lat::bench::median;

/// Keeps the compiler from dropping stores to `p` (the raw-loop baseline).
inline void escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

/// C = A B on oneDNN 2.6 directly: matmul::desc, then primitive_desc, then primitive.
class DirectSgemm {
 public:
  DirectSgemm(int64_t n, float* a, float* b, float* c) : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using tag = dnnl::memory::format_tag;
    const auto f32 = dnnl::memory::data_type::f32;
    dnnl::memory::desc md({n, n}, f32, tag::ab);
    dnnl::matmul::desc desc(md, md, md);
    dnnl::matmul::primitive_desc pd(desc, engine_);
    primitive_ = dnnl::matmul(pd);
    a_ = dnnl::memory(md, engine_, a);
    b_ = dnnl::memory(md, engine_, b);
    c_ = dnnl::memory(md, engine_, c);
  }
  void run() {
    primitive_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    stream_.wait();
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::matmul primitive_;
  dnnl::memory a_, b_, c_;
};

void bench_sgemm(int repeats) {
  const int64_t n = 2048;
  const int iters = 3;  // products per timed sample
  const double flop = 2.0 * n * n * n;
  lat::Generator gen(0);
  lat::Tensor a = lat::Tensor::randn({n, n}, gen);
  lat::Tensor b = lat::Tensor::randn({n, n}, gen);
  lat::Tensor c = lat::Tensor::empty({n, n});
  DirectSgemm direct(n, a.data<float>(), b.data<float>(), c.data<float>());

  // Warm-up: primitive creation, page faults, thread pool start.
  lat::Tensor lat_out = lat::matmul(a, b);
  direct.run();
  std::printf("check: relative error of lat::matmul vs the direct call = %.2e\n", lat::relative_error(lat_out, c));

  std::vector<double> lat_gflops, direct_gflops;
  for (int r = 0; r < repeats; ++r) {
    auto start = Clock::now();
    for (int i = 0; i < iters; ++i) lat_out = lat::matmul(a, b);
    lat_gflops.push_back(flop * iters / seconds_since(start) / 1e9);

    start = Clock::now();
    for (int i = 0; i < iters; ++i) direct.run();
    direct_gflops.push_back(flop * iters / seconds_since(start) / 1e9);
  }
  const double lat_median = median(lat_gflops), direct_median = median(direct_gflops);
  std::printf("sgemm %lldx%lldx%lld f32, %d threads, %d interleaved repeats of %d products (medians)\n",
              static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n), lat::get_num_threads(),
              repeats, iters);
  std::printf("  lat::matmul          %8.1f GFLOP/s\n", lat_median);
  std::printf("  direct oneDNN matmul %8.1f GFLOP/s\n", direct_median);
  std::printf("  ratio lat/direct     %8.3f  (target >= 0.95)\n", lat_median / direct_median);
}

void bench_tiny_op(int repeats) {
  const int batch = 1000;   // recorded ops between clear_tape() calls
  const int batches = 20;   // per timed sample
  const double ops = static_cast<double>(batch) * batches;
  lat::Tensor a = lat::Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}, {4}, true);
  lat::Tensor b = lat::Tensor::from_vector(std::vector<float>{0.5f, 0.25f, 2.0f, 1.5f}, {4}, true);
  float raw_a[4] = {1.0f, 2.0f, 3.0f, 4.0f}, raw_b[4] = {0.5f, 0.25f, 2.0f, 1.5f}, raw_c[4];

  auto taped = [&] {
    for (int k = 0; k < batches; ++k) {
      for (int i = 0; i < batch; ++i) lat::Tensor c = lat::mul(a, b);
      lat::clear_tape();
    }
  };
  auto untaped = [&] {
    lat::NoGradGuard no_grad;
    for (int k = 0; k < batches; ++k)
      for (int i = 0; i < batch; ++i) lat::Tensor c = lat::mul(a, b);
  };
  auto raw = [&] {
    for (int k = 0; k < batches; ++k)
      for (int i = 0; i < batch; ++i) {
        for (int j = 0; j < 4; ++j) raw_c[j] = raw_a[j] * raw_b[j];
        escape(raw_c);
      }
  };
  taped();
  untaped();
  raw();
  if (lat::tape_size() != 0) std::printf("warning: tape not empty after clear_tape()\n");

  std::vector<double> t_tape, t_plain, t_raw;
  for (int r = 0; r < repeats; ++r) {
    auto start = Clock::now();
    taped();
    t_tape.push_back(seconds_since(start) / ops * 1e6);
    start = Clock::now();
    untaped();
    t_plain.push_back(seconds_since(start) / ops * 1e6);
    start = Clock::now();
    raw();
    t_raw.push_back(seconds_since(start) / ops * 1e6);
  }
  const double tape_us = median(t_tape), plain_us = median(t_plain), raw_us = median(t_raw);
  std::printf("tiny op: mul of two [4] f32 tensors requiring grad, %d repeats of %.0f ops (medians)\n", repeats, ops);
  std::printf("  recorded on the tape %8.3f us/op  (target < 2 us)\n", tape_us);
  std::printf("  NoGradGuard          %8.3f us/op\n", plain_us);
  std::printf("  raw loop             %8.4f us/op\n", raw_us);
  std::printf("  ratio tape/no-tape   %8.2f\n", tape_us / plain_us);
  std::printf("  ratio tape/raw       %8.0f\n", tape_us / raw_us);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    const std::string arg = argv[1];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: bench_core (no flags): sgemm against oneDNN, and the cost of one op on the tape\n");
      return 0;
    }
    std::fprintf(stderr, "error: %s: bench_core takes no arguments (see --help)\n", arg.c_str());
    return 2;
  }
  const int repeats = 7;
  bench_sgemm(repeats);
  bench_tiny_op(repeats);
  return 0;
}
