// Every core op on CUDA against the CPU op in f32 and the float64 reference (the CPU op in
// f64): outputs and the gradient of every input, with random upstream gradients, on seeded
// random inputs (the same seed in every run, so a failure reproduces). New device buffers start as
// NaN (LAT_POISON=1 under ctest: the caching allocator fills them with 0xFF bytes), so an
// element a kernel forgets to write fails the comparison. Skipped (GTEST_SKIP) when no
// CUDA device is visible; it still compiles and links on machines without one.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "autograd/cuda/blas.h"
#include "lat/cuda.h"
#include "lat/lat.h"
#include "layers/fused/attention_op.h"
#include "layers/fused/rope.h"
#include "layers/fused/short_conv.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "tests/expect_error.h"
#include "train/distributed/distributed.h"
#include "train/distributed/nccl.h"

namespace lat {
namespace {

using testing::expect_error;

constexpr double kTol = 1e-4;  // DESIGN.md: float32 against the float64 reference

#define LAT_REQUIRE_CUDA()                                                                                   \
  do {                                                                                                       \
    if (cuda_device_count() == 0)                                                                            \
      GTEST_SKIP() << (cuda_built() ? "no CUDA device visible" : "lat was built without CUDA (LAT_CUDA=OFF)"); \
  } while (0)

const Device kGpu = Device::cuda(0);

/// Every test draws its inputs from a generator with the same fixed seed.
class CudaOps : public ::testing::Test {
 protected:
  static constexpr uint64_t kSeed = 20240611;
  Tensor randn(const Shape& s, double std = 1.0) { return Tensor::randn(s, gen_, DType::f32, 0.0, std); }
  Tensor uniform(const Shape& s, double lo, double hi) { return Tensor::uniform(s, gen_, lo, hi); }
  Tensor ids(const Shape& s, int64_t n) {
    std::vector<int64_t> v(static_cast<size_t>(shape_numel(s)));
    for (auto& x : v) x = gen_.randint(n);
    return Tensor::from_vector(v, s);
  }
  Generator gen_{kSeed};
};

/// An op under test on its inputs (already on the target device and dtype).
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Run {
  Tensor out;                 // on the CPU
  std::vector<Tensor> grads;  // per input; undefined for integer inputs
};

/// Runs f on copies of `inputs` (CPU; float ones converted to dtype and made leaves that
/// require grad) moved to `device`, then backward from sum(out * upstream).
Run run(const Fn& f, const std::vector<Tensor>& inputs, DType dtype, Device device, const Tensor& upstream) {
  std::vector<Tensor> leaves, args;
  for (const Tensor& t : inputs) {
    Tensor leaf = t.dtype() == DType::i64 ? t : t.to(dtype).clone().detach();
    if (leaf.dtype() != DType::i64) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
    args.push_back(leaf.to(device));
  }
  Tensor out = f(args).to(Device::cpu());
  backward(sum(out * upstream.to(dtype)));
  Run r{out.detach(), {}};
  for (const Tensor& leaf : leaves) r.grads.push_back(leaf.requires_grad() ? leaf.grad() : Tensor());
  return r;
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const double err = relative_error(a.to(DType::f64), b.to(DType::f64));
  EXPECT_LT(err, tol) << what << ": relative error " << err;
}

/// f on CUDA against f on the CPU in f32 and in f64; outputs and all input gradients.
void check_op(const std::string& name, const Fn& f, const std::vector<Tensor>& inputs, Generator& gen,
              double tol = kTol) {
  SCOPED_TRACE(name);
  Tensor probe;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> cpu_args;
    for (const Tensor& t : inputs) cpu_args.push_back(t);
    probe = f(cpu_args);
  }
  const Tensor upstream = Tensor::randn(probe.shape(), gen);
  const Run gpu = run(f, inputs, DType::f32, kGpu, upstream);
  const Run cpu = run(f, inputs, DType::f32, Device::cpu(), upstream);
  const Run ref = run(f, inputs, DType::f64, Device::cpu(), upstream);
  expect_close(gpu.out, ref.out, tol, name + " output vs f64");
  expect_close(gpu.out, cpu.out, tol, name + " output vs cpu");
  for (size_t i = 0; i < inputs.size(); ++i) {
    expect_close(gpu.grads[i], ref.grads[i], tol, name + " grad " + std::to_string(i) + " vs f64");
    expect_close(gpu.grads[i], cpu.grads[i], tol, name + " grad " + std::to_string(i) + " vs cpu");
  }
}

TEST_F(CudaOps, CopiesRoundTripAndPoisonedBuffersAreNaN) {
  LAT_REQUIRE_CUDA();
  Tensor x = randn({3, 5});
  Tensor y = x.to(kGpu);
  EXPECT_TRUE(y.device().is_cuda());
  EXPECT_EQ(y.to(Device::cpu()).to_vector<float>(), x.to_vector<float>());
  Tensor z = y.clone();
  EXPECT_EQ(z.to_vector<float>(), x.to_vector<float>());
  Tensor i = Tensor::from_vector(std::vector<int64_t>{4, -2, 7}, {3}).to(kGpu);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{4, -2, 7}));
  EXPECT_EQ(Tensor::full({4}, 2.5, DType::f32, kGpu).to_vector<float>(), std::vector<float>(4, 2.5f));
  cuda::synchronize();
  const cuda::MemoryStats stats = cuda::memory_stats();
  EXPECT_GT(stats.in_use, 0u);
}

TEST_F(CudaOps, BinaryBroadcasting) {
  LAT_REQUIRE_CUDA();
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{4, 5}, {4, 5}}, {{3, 1, 5}, {4, 5}}, {{4, 5}, {}}, {{}, {2, 3}}, {{2, 1, 3, 1}, {1, 4, 1, 5}}, {{6, 7}, {7}}};
  for (const auto& [sa, sb] : shapes) {
    const std::vector<Tensor> in{randn(sa), uniform(sb, 0.5, 2.0)};
    check_op("add " + shape_str(sa) + shape_str(sb), [](const auto& t) { return add(t[0], t[1]); }, in, gen_);
    check_op("sub", [](const auto& t) { return sub(t[0], t[1]); }, in, gen_);
    check_op("mul", [](const auto& t) { return mul(t[0], t[1]); }, in, gen_);
    check_op("div", [](const auto& t) { return div(t[0], t[1]); }, in, gen_);
  }
}

TEST_F(CudaOps, ScalarAndUnaryOps) {
  LAT_REQUIRE_CUDA();
  const std::vector<Tensor> x{randn({7, 33})};
  const std::vector<Tensor> pos{uniform({7, 33}, 0.2, 3.0)};
  check_op("add_scalar", [](const auto& t) { return t[0] + 1.5; }, x, gen_);
  check_op("sub_scalar", [](const auto& t) { return t[0] - 0.5; }, x, gen_);
  check_op("rsub", [](const auto& t) { return 2.0 - t[0]; }, x, gen_);
  check_op("mul_scalar", [](const auto& t) { return t[0] * -3.0; }, x, gen_);
  check_op("div_scalar", [](const auto& t) { return t[0] / 4.0; }, x, gen_);
  check_op("rdiv", [](const auto& t) { return 2.0 / t[0]; }, pos, gen_);
  check_op("neg", [](const auto& t) { return neg(t[0]); }, x, gen_);
  check_op("exp", [](const auto& t) { return exp(t[0]); }, x, gen_);
  check_op("log", [](const auto& t) { return log(t[0]); }, pos, gen_);
  check_op("sqrt", [](const auto& t) { return sqrt(t[0]); }, pos, gen_);
  check_op("rsqrt", [](const auto& t) { return rsqrt(t[0]); }, pos, gen_);
  check_op("pow", [](const auto& t) { return pow(t[0], 2.5); }, pos, gen_);
  check_op("tanh", [](const auto& t) { return tanh(t[0]); }, x, gen_);
  check_op("sigmoid", [](const auto& t) { return sigmoid(t[0]); }, x, gen_);
  check_op("silu", [](const auto& t) { return silu(t[0]); }, x, gen_);
  check_op("gelu", [](const auto& t) { return gelu(t[0]); }, x, gen_);
  check_op("softplus", [](const auto& t) { return softplus(t[0] * 10.0); }, x, gen_);
  check_op("elu", [](const auto& t) { return elu(t[0], 0.7); }, x, gen_);
  check_op("relu", [](const auto& t) { return relu(t[0]); }, x, gen_);
}

TEST_F(CudaOps, Reductions) {
  LAT_REQUIRE_CUDA();
  const std::vector<Tensor> x{randn({3, 4, 5})};
  check_op("sum", [](const auto& t) { return sum(t[0]); }, x, gen_);
  check_op("mean", [](const auto& t) { return mean(t[0]); }, x, gen_);
  for (int64_t axis : {0, 1, -1}) {
    check_op("sum axis " + std::to_string(axis), [axis](const auto& t) { return sum(t[0], axis); }, x, gen_);
    check_op("mean axis keepdim", [axis](const auto& t) { return mean(t[0], axis, true); }, x, gen_);
    check_op("max axis", [axis](const auto& t) { return max(t[0], axis); }, x, gen_);
  }
  // Long axes: split into segments whose partial sums are combined.
  check_op("sum long rows", [](const auto& t) { return sum(t[0], 1); }, {randn({3, 200000})}, gen_);
  check_op("sum long columns", [](const auto& t) { return sum(t[0], 0); }, {randn({60000, 7})}, gen_);
  check_op("sum_to", [](const auto& t) { return sum_to(t[0], {1, 5}); }, {randn({6, 4, 5})}, gen_);
}

TEST_F(CudaOps, MatmulThroughCublas) {
  LAT_REQUIRE_CUDA();
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {{{5, 7}, {7, 3}, false, false},       {{2, 3, 4, 5}, {5, 6}, false, false},
                                   {{4, 5}, {6, 5}, false, true},        {{5, 4}, {5, 6}, true, false},
                                   {{3, 5, 4}, {3, 6, 5}, true, true},   {{2, 1, 4, 5}, {3, 5, 6}, false, false},
                                   {{2, 3, 65, 33}, {33, 17}, false, false}};
  for (const Case& c : cases) {
    check_op("matmul " + shape_str(c.a) + shape_str(c.b), [c](const auto& t) { return matmul(t[0], t[1], c.ta, c.tb); },
             {randn(c.a), randn(c.b)}, gen_);
  }
  // An empty inner dimension gives zeros.
  Tensor z = matmul(Tensor::empty({3, 0}, DType::f32, kGpu), Tensor::empty({0, 4}, DType::f32, kGpu));
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(12, 0.0f));
}

#ifdef LAT_WITH_CUDA
/// Whether cuBLAS is mapped into this process now.
bool cublas_in_process() {
  return dlopen(cuda::cublas_soname().c_str(), RTLD_NOW | RTLD_NOLOAD) != nullptr;
}

// Read before main, when only the libraries the executable links are mapped.
const bool kCublasMappedAtStart = cublas_in_process();

TEST(CudaBlas, CublasIsLoadedOnFirstUseNotLinked) {
  // Linked, cuBLAS and cuBLASLt would cost every process of a CUDA build ~150 MiB of resident
  // memory before any work, CPU-only runs included. Loading needs no device.
  EXPECT_FALSE(kCublasMappedAtStart) << cuda::cublas_soname() << " was mapped before main: linked, not loaded";
  cuda::load_cublas();
  EXPECT_TRUE(cublas_in_process());
}
#endif

TEST_F(CudaOps, MatmulTf32IsOffByDefaultAndOptIn) {
  LAT_REQUIRE_CUDA();
  ASSERT_FALSE(cuda::allow_tf32());
  Tensor a = randn({256, 512}), b = randn({512, 256});
  Tensor ref = matmul(a.to(DType::f64), b.to(DType::f64));
  const double fp32 = relative_error(matmul(a.to(kGpu), b.to(kGpu)).to(Device::cpu()).to(DType::f64), ref);
  cuda::set_allow_tf32(true);
  const double tf32 = relative_error(matmul(a.to(kGpu), b.to(kGpu)).to(Device::cpu()).to(DType::f64), ref);
  cuda::set_allow_tf32(false);
  EXPECT_LT(fp32, 1e-6);
  EXPECT_LT(tf32, 1e-2);  // ~10 mantissa bits per product
}

TEST_F(CudaOps, ShapeOps) {
  LAT_REQUIRE_CUDA();
  const std::vector<Tensor> x{randn({2, 3, 4, 5})};
  check_op("transpose", [](const auto& t) { return transpose(t[0], 1, 3); }, x, gen_);
  check_op("permute", [](const auto& t) { return permute(t[0], {2, 0, 3, 1}); }, x, gen_);
  check_op("slice", [](const auto& t) { return slice(t[0], 2, 1, 3); }, x, gen_);
  check_op("concat", [](const auto& t) { return concat({t[0], t[1]}, 1); }, {randn({2, 3, 4}), randn({2, 5, 4})}, gen_);
  check_op("split", [](const auto& t) {
    std::vector<Tensor> parts = split(t[0], {1, 3}, 2);
    return concat({parts[1] * 2.0, parts[0]}, 2);
  }, {randn({3, 2, 4})}, gen_);
}

TEST_F(CudaOps, EmbeddingGatherAndScatterAdd) {
  LAT_REQUIRE_CUDA();
  // Repeated ids: the backward adds their rows.
  const Tensor id = ids({4, 9}, 11);
  check_op("embedding", [](const auto& t) { return embedding(t[0], t[1]); }, {randn({11, 6}), id}, gen_);
  expect_error(
      [&] {
        embedding(randn({4, 3}).to(kGpu), Tensor::from_vector(std::vector<int64_t>{1, 4}, {2}).to(kGpu));
      },
      {"embedding: ids: id 4 at position", "is out of range [0, 4)"});
}

TEST_F(CudaOps, FusedNnOps) {
  LAT_REQUIRE_CUDA();
  // (dim 1 is left out: there dx = w g rstd eps / (x^2 + eps) is all cancellation.)
  for (int64_t dim : {5, 64, 1000}) {
    const Shape s{3, 5, dim};
    check_op("rms_norm " + std::to_string(dim), [](const auto& t) { return rms_norm(t[0], t[1], 1e-6); },
             {randn(s), randn({dim})}, gen_);
    check_op("softmax", [](const auto& t) { return softmax(t[0]); }, {randn(s, 3.0)}, gen_);
    check_op("log_softmax", [](const auto& t) { return log_softmax(t[0]); }, {randn(s, 3.0)}, gen_);
  }
  // rms_norm's weight gradient over many rows (the split column sum).
  check_op("rms_norm many rows", [](const auto& t) { return rms_norm(t[0], t[1], 1e-5); },
           {randn({4000, 48}), randn({48})}, gen_);
}

TEST_F(CudaOps, CrossEntropyWithIgnoredTargetsAndLargeLogits) {
  LAT_REQUIRE_CUDA();
  for (double magnitude : {1.0, 1e4}) {
    for (int64_t vocab : {5, 1000}) {
      Tensor targets = ids({37}, vocab);
      targets.set({3}, -100);
      targets.set({20}, -100);
      check_op("cross_entropy vocab " + std::to_string(vocab),
               [](const auto& t) { return cross_entropy(t[0], t[1]); }, {randn({37, vocab}, magnitude), targets},
               gen_);
    }
  }
  // Targets may stay on the host.
  Tensor logits = randn({4, 6});
  Tensor targets = ids({4}, 6);
  EXPECT_NEAR(cross_entropy(logits.to(kGpu), targets).item(), cross_entropy(logits, targets).item(), 1e-5);
  // Every target ignored: the loss is 0 and so is the gradient.
  Tensor ignored = Tensor::full({4}, -100.0, DType::i64);
  Tensor leaf = logits.to(kGpu).detach();
  leaf.set_requires_grad(true);
  Tensor loss = cross_entropy(leaf, ignored);
  EXPECT_EQ(loss.item(), 0.0);
  backward(loss);
  EXPECT_EQ(leaf.grad().to_vector<float>(), std::vector<float>(24, 0.0f));
  expect_error([&] { cross_entropy(logits.to(kGpu), Tensor::full({4}, 6.0, DType::i64)); },
               {"cross_entropy: targets: target 6 at position 0 is out of range [0, 6)"});
}

TEST_F(CudaOps, CausalAttentionForwardBackward) {
  LAT_REQUIRE_CUDA();
  struct Case {
    int64_t B, Tq, Tk, H, Hkv, D, Dv, window;
  };
  // (Not T = 1: one visible key gives dq = dk = 0 exactly, whose rounding noise has no
  // meaningful relative error.)
  const std::vector<Case> cases = {{2, 3, 3, 2, 2, 16, 16, 0},    {1, 70, 70, 4, 2, 32, 48, 0},
                                   {2, 130, 130, 2, 1, 64, 64, 0}, {1, 100, 100, 2, 2, 128, 96, 17},
                                   {1, 33, 90, 3, 3, 24, 40, 0}};
  for (const Case& c : cases) {
    const std::string name = "attention T" + std::to_string(c.Tq) + "/" + std::to_string(c.Tk) + " D" +
                             std::to_string(c.D) + " window " + std::to_string(c.window);
    check_op(name, [c](const auto& t) { return causal_attention(t[0], t[1], t[2], {}, c.window); },
             {randn({c.B, c.Tq, c.H, c.D}), randn({c.B, c.Tk, c.Hkv, c.D}), randn({c.B, c.Tk, c.Hkv, c.Dv})}, gen_);
  }
  // The cached form reads the first `length` rows of a longer buffer.
  Tensor q = randn({2, 3, 4, 32}), kc = randn({2, 50, 2, 32}), vc = randn({2, 50, 2, 32});
  Tensor gpu = causal_attention_cached(q.to(kGpu), kc.to(kGpu), vc.to(kGpu), 41).to(Device::cpu());
  Tensor cpu = causal_attention_cached(q, kc, vc, 41);
  EXPECT_LT(relative_error(gpu, cpu), kTol);
}

TEST_F(CudaOps, ShortConvolutionAndRotaryEmbedding) {
  LAT_REQUIRE_CUDA();
  check_op("short_conv with state", [](const auto& t) { return short_conv(t[0], t[1], t[2]); },
           {randn({2, 37, 24}), randn({24, 1, 4}), randn({2, 3, 24})}, gen_);
  check_op("short_conv", [](const auto& t) { return short_conv(t[0], t[1]); }, {randn({1, 5, 8}), randn({8, 1, 3})},
           gen_);
  check_op("short_conv with bias and state", [](const auto& t) { return short_conv(t[0], t[1], t[2], {}, t[3]); },
           {randn({2, 37, 24}), randn({24, 1, 4}), randn({2, 3, 24}), randn({24})}, gen_);
  check_op("rotary_embedding", [](const auto& t) { return rotary_embedding(t[0], 10000.0, 5); },
           {randn({2, 9, 3, 16})}, gen_);
}

TEST_F(CudaOps, AdamWStepAndClippingMatchCpu) {
  LAT_REQUIRE_CUDA();
  Tensor w_cpu = randn({64, 33}), n_cpu = randn({33});
  Tensor w_gpu = w_cpu.to(kGpu).detach(), n_gpu = n_cpu.to(kGpu).detach();
  std::vector<NamedParameter> cpu_params{{"layers.0.mlp.up_proj.weight", w_cpu}, {"norm.weight", n_cpu}};
  std::vector<NamedParameter> gpu_params{{"layers.0.mlp.up_proj.weight", w_gpu}, {"norm.weight", n_gpu}};
  AdamW cpu_opt(cpu_params, {}), gpu_opt(gpu_params, {});
  for (int step = 0; step < 3; ++step) {
    Tensor gw = randn({64, 33}, 2.0), gn = randn({33}, 2.0);
    w_cpu.set_grad(gw);
    n_cpu.set_grad(gn);
    w_gpu.set_grad(gw.to(kGpu));
    n_gpu.set_grad(gn.to(kGpu));
    const ClipResult cpu_clip = clip_grad_norm(cpu_params, 1.0);
    const ClipResult gpu_clip = clip_grad_norm(gpu_params, 1.0);
    EXPECT_NEAR(gpu_clip.norm, cpu_clip.norm, 1e-6 * cpu_clip.norm);
    EXPECT_EQ(gpu_clip.clipped, cpu_clip.clipped);
    cpu_opt.step(1e-2);
    gpu_opt.step(1e-2);
  }
  EXPECT_LT(relative_error(w_gpu.to(Device::cpu()), w_cpu), 1e-6);
  EXPECT_LT(relative_error(n_gpu.to(Device::cpu()), n_cpu), 1e-6);
  const OptimizerState state = gpu_opt.export_state();
  EXPECT_TRUE(state.at("norm.weight").at("exp_avg").device().is_cuda());
}

// The NCCL gradient all-reduce as a one-rank job (a smoke test that fits a host with one
// GPU). Summing over one rank is the identity, so every value must come back bit for bit,
// through both bucket paths: a bucket that is one piece of one tensor (reduced in place) and
// buckets packed from several tensors into the staging buffer.
TEST_F(CudaOps, NcclAllReduceOnOneRankKeepsEveryValue) {
  LAT_REQUIRE_CUDA();
  if (!nccl::built()) GTEST_SKIP() << "this CUDA build has no NCCL (nccl.h not found)";
  const Distributed& dist = Distributed::get();
  ASSERT_EQ(dist.world_size(), 1) << "run the one-rank smoke test without mpirun";
  std::vector<Tensor> host = {randn({300}), randn({7, 3}), randn({5}), randn({2, 40})};
  std::vector<Tensor> gpu;
  for (const Tensor& t : host) gpu.push_back(t.to(kGpu));
  const int64_t calls = nccl::all_reduce_sum(gpu, 64, dist.nccl_ranks());  // 64-element buckets
  EXPECT_GE(calls, 6);  // 406 elements in buckets of 64
  for (size_t i = 0; i < host.size(); ++i)
    EXPECT_EQ(gpu[i].to(Device::cpu()).to_vector<float>(), host[i].to_vector<float>()) << "tensor " << i;
}

TEST_F(CudaOps, ErrorsNameTheOpAndDevice) {
  LAT_REQUIRE_CUDA();
  Tensor a = randn({2, 3});
  expect_error([&] { add(a.to(kGpu), a); }, {"add", "cuda:0"});
  expect_error([&] { matmul(a.to(kGpu), randn({3, 2})); }, {"matmul: b: expected device cuda:0 like a, got cpu"});
}

}  // namespace
}  // namespace lat
