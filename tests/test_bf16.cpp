// Mixed precision (lat/precision.h, train.precision): bf16 rounding, bf16 matrix products
// and a bf16 Linear (forward and both gradients) against float64 within a bound derived from
// the rounding, training in bf16 against fp32, the checkpoint of a bf16 run (fp32, exact
// resume), and the fallback to fp32 where the CPU has no bf16 products.
//
// The bound. bf16 keeps p = 8 significand bits, so rounding to nearest gives
// fl(a) = a (1 + d), |d| <= u = 2^-8. The product of two bf16 values is exact in fp32
// (8 + 8 <= 24 bits), and the K products are summed in fp32 (unit roundoff 2^-24) in some
// order, which adds at most gamma_K = K 2^-24 / (1 - K 2^-24) of the sum of magnitudes
// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., sec. 3.1, eq. 3.5). So
// every element of C = op(A) op(B) computed from bf16-rounded inputs obeys
//   |C - C_exact| <= ((1 + u)^2 (1 + gamma_K) - 1) (|op(A)| |op(B)|)
// with C_exact the float64 product of the fp32 inputs; fp32 products obey it with u = 0.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/cpu/bf16.h"
#include "lat/ops.h"
#include "lat/precision.h"
#include "lat/tape.h"
#include "layers/linear.h"
#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/config.h"
#include "train/files/checkpoint.h"
#include "train/run/trainer.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

using testing::expect_error;
using testing::read_bytes;

constexpr double kBf16Roundoff = 0x1p-8;   // u of bf16 (8 significand bits)
constexpr double kFp32Roundoff = 0x1p-24;  // u of fp32 (24 significand bits)

/// ((1 + u)^2 (1 + gamma_K) - 1): the factor of |op(A)| |op(B)| that bounds each element's
/// error when the inputs are rounded with unit roundoff u and K products are summed in fp32.
double product_error_factor(double input_roundoff, int64_t K) {
  const double gamma = static_cast<double>(K) * kFp32Roundoff / (1.0 - static_cast<double>(K) * kFp32Roundoff);
  return (1.0 + input_roundoff) * (1.0 + input_roundoff) * (1.0 + gamma) - 1.0;
}

Tensor random_f32(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, DType::f32);
}

Tensor abs_f64(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v) x = std::fabs(x);
  return Tensor::from_vector(v, t.shape()).to(DType::f64);
}

/// The largest |got - exact| / scale over the elements (|got - exact| where scale is 0).
double worst_error(const Tensor& got, const Tensor& exact, const Tensor& scale) {
  EXPECT_EQ(got.shape(), exact.shape());
  const std::vector<double> g = got.to_vector<double>(), e = exact.to_vector<double>(), s = scale.to_vector<double>();
  double worst = 0.0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, s[i] > 0.0 ? std::fabs(g[i] - e[i]) / s[i] : std::fabs(g[i] - e[i]));
  return worst;
}

/// worst_error of `got` against op(a) op(b), with the exact product and the magnitudes
/// |op(a)| |op(b)| in float64 from the f32 inputs.
double product_error(const Tensor& got, const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Tensor exact = matmul(a.to(DType::f64), b.to(DType::f64), ta, tb);
  return worst_error(got, exact, matmul(abs_f64(a), abs_f64(b), ta, tb));
}

bool cpu_bf16() { return bf16_supported(Device::cpu()); }

// ---- rounding ------------------------------------------------------------------------------

TEST(Bf16Rounding, NearestEvenNanAndTheVectorLoopAgree) {
  EXPECT_EQ(cpu::float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even significand (1).
  EXPECT_EQ(cpu::float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(cpu::float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(cpu::float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // above half: up
  EXPECT_EQ(cpu::float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(cpu::float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(cpu::float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the largest bf16
  EXPECT_EQ(cpu::bf16_to_float(0x3f81), 1.0f + 0x1p-7f);
  // A NaN whose payload is only in the low bits must not round into infinity.
  const uint32_t low_nan_bits = 0x7f800001u;
  float low_nan;
  std::memcpy(&low_nan, &low_nan_bits, sizeof low_nan);
  EXPECT_TRUE(std::isnan(cpu::bf16_to_float(cpu::float_to_bf16(low_nan))));

  // The bulk conversion (the AVX512-BF16 loop where the CPU has it, masked tails included)
  // equals the scalar rounding on every length 1..100 (normal floats: the instruction
  // treats subnormals as zero).
  const std::vector<float> x = random_f32({100}, 3).to_vector<float>();
  for (int64_t n = 1; n <= 100; ++n) {
    std::vector<uint16_t> out(static_cast<size_t>(n) + 1, 0xabcd);
    cpu::float_to_bf16(x.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], cpu::float_to_bf16(x[i])) << "n " << n << ", i " << i;
    EXPECT_EQ(out[n], 0xabcd) << "n " << n << ": wrote past the end";
  }
  // Arrays of several blocks (rounded in parallel) and a ragged last block: every element as
  // the scalar rounding, nothing written past the end.
  for (int64_t n : {int64_t{1} << 15, (int64_t{3} << 15) + 17}) {
    const std::vector<float> big = random_f32({n}, 4).to_vector<float>();
    std::vector<uint16_t> out(static_cast<size_t>(n) + 1, 0xabcd);
    cpu::float_to_bf16(big.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], cpu::float_to_bf16(big[i])) << "n " << n << ", i " << i;
    EXPECT_EQ(out[n], 0xabcd) << "n " << n << ": wrote past the end";
  }
  // Rounding error within u = 2^-8 relative.
  for (float v : x) EXPECT_LE(std::fabs(cpu::bf16_to_float(cpu::float_to_bf16(v)) - v), kBf16Roundoff * std::fabs(v));
}

TEST(Precision, NamesGuardsAndParse) {
  EXPECT_EQ(compute_precision(), Precision::fp32);
  {
    const PrecisionGuard outer(Precision::bf16);
    EXPECT_EQ(compute_precision(), Precision::bf16);
    {
      const PrecisionGuard inner(Precision::fp32);
      EXPECT_EQ(compute_precision(), Precision::fp32);
    }
    EXPECT_EQ(compute_precision(), Precision::bf16);
    EXPECT_EQ(bf16_compute(Device::cpu()), cpu_bf16());
  }
  EXPECT_EQ(compute_precision(), Precision::fp32);
  EXPECT_FALSE(bf16_compute(Device::cpu()));
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  EXPECT_STREQ(precision_name(parse_precision("fp32")), "fp32");
  expect_error([] { parse_precision("fp16"); }, {"precision", "fp32 or bf16", "'fp16'"});
  EXPECT_EQ(effective_precision(Precision::bf16, Device::cpu()), cpu_bf16() ? Precision::bf16 : Precision::fp32);
  EXPECT_EQ(effective_precision(Precision::fp32, Device::cpu()), Precision::fp32);
}

// ---- products ------------------------------------------------------------------------------

struct ProductCase {
  Shape a, b;
  bool ta, tb;
};

// Every transpose combination, a batch with a shared 2-D b, a broadcast batch, and odd sizes
// (no multiple of a vector or of oneDNN's blocks).
const std::vector<ProductCase>& product_cases() {
  static const std::vector<ProductCase> cases = {
      {{37, 129}, {129, 61}, false, false}, {{129, 37}, {129, 61}, true, false},
      {{37, 129}, {61, 129}, false, true},  {{129, 37}, {61, 129}, true, true},
      {{3, 50, 96}, {96, 80}, false, false}, {{2, 1, 17, 33}, {3, 33, 9}, false, false},
      {{1024, 128}, {352, 128}, false, true},
  };
  return cases;
}

TEST(Bf16Matmul, WithinTheRoundingBoundOfFloat64) {
  if (!cpu_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  uint64_t seed = 10;
  for (const ProductCase& c : product_cases()) {
    const Tensor a = random_f32(c.a, ++seed), b = random_f32(c.b, ++seed);
    const int64_t K = c.ta ? c.a[c.a.size() - 2] : c.a.back();
    Tensor bf16_out, fp32_out;
    {
      const PrecisionGuard bf16(Precision::bf16);
      bf16_out = matmul(a, b, c.ta, c.tb);
    }
    fp32_out = matmul(a, b, c.ta, c.tb);
    const double e16 = product_error(bf16_out, a, b, c.ta, c.tb);
    const double e32 = product_error(fp32_out, a, b, c.ta, c.tb);
    const std::string what = shape_str(c.a) + (c.ta ? "^T" : "") + " x " + shape_str(c.b) + (c.tb ? "^T" : "");
    EXPECT_LE(e16, product_error_factor(kBf16Roundoff, K)) << what;
    EXPECT_LE(e32, product_error_factor(0.0, K)) << what;
    // bf16 was in effect: errors of bf16's size, far above anything fp32 rounding can give.
    EXPECT_GT(e16, 16.0 * product_error_factor(0.0, K)) << what;
  }
}

// The same on CUDA (cuBLAS with bf16 inputs and CUBLAS_COMPUTE_32F), where the device has
// bf16 tensor cores (compute capability 8.0); skipped elsewhere.
TEST(Bf16Matmul, CudaWithinTheRoundingBoundOfFloat64) {
  if (!cuda_built() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (or built without CUDA)";
  if (!bf16_supported(Device::cuda(0))) GTEST_SKIP() << "cuda:0 has no bf16 tensor cores";
  uint64_t seed = 40;
  for (const ProductCase& c : product_cases()) {
    const Tensor a = random_f32(c.a, ++seed), b = random_f32(c.b, ++seed);
    const int64_t K = c.ta ? c.a[c.a.size() - 2] : c.a.back();
    Tensor out;
    {
      const PrecisionGuard bf16(Precision::bf16);
      out = matmul(a.to(Device::cuda(0)), b.to(Device::cuda(0)), c.ta, c.tb).to(Device::cpu());
    }
    const double e16 = product_error(out, a, b, c.ta, c.tb);
    const std::string what = shape_str(c.a) + (c.ta ? "^T" : "") + " x " + shape_str(c.b) + (c.tb ? "^T" : "");
    EXPECT_LE(e16, product_error_factor(kBf16Roundoff, K)) << what;
    EXPECT_GT(e16, 16.0 * product_error_factor(0.0, K)) << what << ": bf16 not in effect";
  }
}

// y = x W^T, dx = dy W, dW = dy^T x: three products over K = in, out and the rows, each
// within its own bound; a backward run outside the guard keeps the forward's precision.
TEST(Bf16Linear, ForwardAndGradientsWithinTheRoundingBound) {
  if (!cpu_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  constexpr int64_t kIn = 96, kOut = 80, kRows = 3 * 50;
  Generator gen(7);
  const Linear linear(kIn, kOut, gen, /*init_std=*/0.5);
  const Tensor x = random_f32({3, 50, kIn}, 8);
  const Tensor dy = random_f32({3, 50, kOut}, 9);
  const Tensor w = linear.weight().detach();

  auto run = [&](Precision precision) {
    Tensor xg = x.detach();
    xg.set_requires_grad(true);
    Tensor y;
    {
      const PrecisionGuard guard(precision);
      y = linear.forward(xg);
    }
    Tensor weight = linear.weight();
    weight.zero_grad();
    backward(y, dy);  // outside the guard: the node remembers the forward's precision
    struct Out {
      Tensor y, dx, dw;
    };
    return Out{y.detach(), xg.grad(), linear.weight().grad()};
  };
  const auto bf16 = run(Precision::bf16);
  const auto fp32 = run(Precision::fp32);

  const Tensor x2 = x.reshape({kRows, kIn}), dy2 = dy.reshape({kRows, kOut});
  struct Check {
    const char* name;
    Tensor bf16_value, fp32_value;
    Tensor a, b;
    bool ta, tb;
    int64_t K;
  };
  const std::vector<Check> checks = {
      {"y", bf16.y.reshape({kRows, kOut}), fp32.y.reshape({kRows, kOut}), x2, w, false, true, kIn},
      {"dx", bf16.dx.reshape({kRows, kIn}), fp32.dx.reshape({kRows, kIn}), dy2, w, false, false, kOut},
      {"dW", bf16.dw, fp32.dw, dy2, x2, true, false, kRows},
  };
  for (const Check& c : checks) {
    const double e16 = product_error(c.bf16_value, c.a, c.b, c.ta, c.tb);
    const double e32 = product_error(c.fp32_value, c.a, c.b, c.ta, c.tb);
    EXPECT_LE(e16, product_error_factor(kBf16Roundoff, c.K)) << c.name;
    EXPECT_GT(e16, 16.0 * product_error_factor(0.0, c.K)) << c.name << ": bf16 not in effect";
    EXPECT_LE(e32, product_error_factor(0.0, c.K)) << c.name;
    // bf16 against fp32: each within its bound of the same exact value.
    const Tensor scale = matmul(abs_f64(c.a), abs_f64(c.b), c.ta, c.tb);
    const double between = worst_error(c.bf16_value, c.fp32_value.to(DType::f64), scale);
    EXPECT_LE(between, product_error_factor(kBf16Roundoff, c.K) + product_error_factor(0.0, c.K)) << c.name;
  }
}

// ---- training ------------------------------------------------------------------------------

/// Text with structure but no end to learning in a few hundred steps: sentences drawn word
/// by word from a fixed pseudo-random Markov chain over 40 words (splitmix64 from a seed).
std::string markov_text(int64_t words) {
  static const char* vocab[] = {"the",   "a",     "fox",   "dog",   "runs",  "sleeps", "over",  "under",
                                "quick", "lazy",  "brown", "cat",   "sees",  "finds",  "river", "hill",
                                "and",   "but",   "then",  "with",  "old",   "young",  "red",   "blue",
                                "bird",  "sings", "eats",  "grain", "near",  "far",    "house", "tree",
                                "light", "dark",  "stone", "wind",  "moves", "waits",  "calls", "home"};
  constexpr int64_t kWords = 40;
  uint64_t state = 12345;
  auto next = [&state]() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::string text;
  int64_t word = 0;
  for (int64_t i = 0; i < words; ++i) {
    text += vocab[word];
    text += (i % 12 == 11) ? ".\n" : " ";
    // Each word is followed by one of 4 successors fixed by its index.
    word = (word * 7 + 3 + static_cast<int64_t>(next() % 4) * 11) % kWords;
  }
  return text;
}

class Bf16Training : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    std::ofstream(dir_ / "markov.txt") << markov_text(30000);
    std::ofstream(dir_ / "tiny.yaml") << "model:\n"
                                         "  d_model: 64\n"
                                         "  n_layers: 2\n"
                                         "  n_heads: 2\n"
                                         "  layers: \"gdn,attn\"\n"
                                         "  linear: {chunk_size: 16}\n"
                                         "data:\n"
                                         "  path: "
                                      << (dir_ / "markov.txt").string()
                                      << "\n"
                                         "  block_size: 64\n"
                                         "train:\n"
                                         "  batch_size: 8\n"
                                         "  max_steps: 200\n"
                                         "  warmup: 20\n"
                                         "  lr: 3.0e-3\n"
                                         "  eval_every: 0\n"
                                         "  eval_batches: 4\n"
                                         "  log_every: 10\n"
                                         "  ckpt_every: 0\n"
                                         "  threads: 1\n";
    log_ = std::tmpfile();
  }
  void TearDown() override {
    std::fclose(log_);
    TempDirTest::TearDown();
  }
  TrainSummary run(const std::string& out, std::vector<std::string> overrides) {
    overrides.push_back("train.out_dir=" + (dir_ / out).string());
    TrainOptions options;
    options.log = log_;
    options.live_progress = false;
    return train(load_config((dir_ / "tiny.yaml").string(), overrides), options);
  }
  /// (step, loss) of every log record of run directory `out`.
  std::vector<std::pair<int64_t, double>> losses(const std::string& out) const {
    std::vector<std::pair<int64_t, double>> v;
    std::ifstream in(dir_ / out / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto r = nlohmann::json::parse(line);
      if (r.contains("loss")) v.emplace_back(r["step"].get<int64_t>(), r["loss"].get<double>());
    }
    return v;
  }
  std::FILE* log_ = nullptr;
};

// The same 200 steps in bf16 and fp32 (same seed, same batches). From the first step the two
// runs differ by rounding, which training amplifies like any perturbation: single steps'
// losses then differ by a few percent at the spikes of the curve. Their means over the last
// 10 log records (steps 110..200) and the final val losses on the whole val split stay within
// 1.5% (measured: under 0.5%), every record within 10%, and both runs learn.
TEST_F(Bf16Training, LossesTrackFp32) {
  if (!cpu_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const TrainSummary s16 = run("bf16", {"train.precision=bf16"});
  const TrainSummary s32 = run("fp32", {});
  const auto l16 = losses("bf16"), l32 = losses("fp32");
  ASSERT_EQ(l16.size(), 20u);
  ASSERT_EQ(l32.size(), 20u);
  EXPECT_NE(l16, l32) << "the bf16 run computed exactly what the fp32 run did";
  double tail16 = 0.0, tail32 = 0.0;
  for (size_t i = 0; i < l16.size(); ++i) {
    ASSERT_EQ(l16[i].first, l32[i].first);
    EXPECT_NEAR(l16[i].second, l32[i].second, 0.10 * l32[i].second) << "step " << l16[i].first;
    if (i >= 10) tail16 += l16[i].second / 10.0, tail32 += l32[i].second / 10.0;
  }
  EXPECT_NEAR(tail16, tail32, 0.015 * tail32);
  EXPECT_NEAR(s16.val_loss, s32.val_loss, 0.015 * s32.val_loss);
  EXPECT_LT(tail32, 0.25 * l32.front().second);
  EXPECT_LT(tail16, 0.25 * l16.front().second);
  std::fflush(log_);
  std::rewind(log_);
  std::string log;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, log_)) > 0;) log.append(buffer, n);
  EXPECT_NE(log.find("cpu, precision bf16"), std::string::npos) << log;
  EXPECT_NE(log.find("cpu, precision fp32"), std::string::npos) << log;
}

/// The HDF5 type of dataset `name` in the file at `path`: its class and size in bytes.
std::pair<H5T_class_t, size_t> dataset_type(const std::string& path, const std::string& name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << path;
  const hid_t set = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(set, 0) << name;
  const hid_t type = H5Dget_type(set);
  const std::pair<H5T_class_t, size_t> out{H5Tget_class(type), H5Tget_size(type)};
  H5Tclose(type);
  H5Dclose(set);
  H5Fclose(file);
  return out;
}

// A bf16 run's checkpoint holds fp32 weights and optimizer moments, and a bf16 run stopped
// and resumed computes the uninterrupted bf16 run bit for bit.
TEST_F(Bf16Training, CheckpointIsFp32AndResumesExactly) {
  if (!cpu_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const std::vector<std::string> short_run = {"train.precision=bf16", "train.max_steps=30", "train.log_every=1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), short_run.begin(), short_run.end());
    return extra;
  };
  const TrainSummary whole = run("whole", with({}));
  const TrainSummary first = run("split", with({"train.stop_at=12"}));
  ASSERT_EQ(first.step, 12);
  const TrainSummary second = run("split", with({}));
  EXPECT_EQ(second.start_step, 12);
  EXPECT_EQ(losses("whole"), losses("split"));  // exact
  EXPECT_EQ(whole.val_loss, second.val_loss);

  const Checkpoint a = load_checkpoint(whole.checkpoint), b = load_checkpoint(second.checkpoint);
  ASSERT_EQ(a.model.size(), b.model.size());
  for (size_t i = 0; i < a.model.size(); ++i) {
    const std::string& name = a.model[i].first;
    EXPECT_EQ(a.model[i].second.to_vector<float>(), b.model[i].second.to_vector<float>()) << name;
    const auto type = dataset_type(whole.checkpoint, "/model/" + name);
    EXPECT_EQ(type.first, H5T_FLOAT) << name;
    EXPECT_EQ(type.second, 4u) << name;
    const auto moment = dataset_type(whole.checkpoint, "/optimizer/" + name + "/exp_avg_sq");
    EXPECT_EQ(moment.first, H5T_FLOAT) << name;
    EXPECT_EQ(moment.second, 4u) << name;
  }
}

TEST(Bf16Config, PrecisionIsCheckedByTheSchema) {
  const testing::TempDir dir("lat_test_bf16_config_");
  const std::string path = dir.path("c.yaml");
  std::ofstream(path) << "data:\n  path: x.txt\ntrain:\n  precision: fp16\n";
  expect_error<ConfigError>([&] { load_config(path); }, {"train.precision", "fp16", "bf16"});
  std::ofstream(path) << "data:\n  path: x.txt\n";
  EXPECT_EQ(load_config(path).train.precision, "fp32");
}

// ---- the fallback --------------------------------------------------------------------------

struct Command {
  int exit_code = -1;
  std::string out, err;
};

/// Runs build/lat with `args` and the environment assignments `env` (shell words before it).
Command run_lat(const std::string& env, const std::string& args, const fs::path& dir) {
  const std::string command = env + " '" + std::string(LAT_BINARY_DIR) + "/lat' " + args + " >'" +
                              (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_bytes(dir / "out"), read_bytes(dir / "err")};
}

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// DNNL_MAX_CPU_ISA=AVX512_CORE caps oneDNN below AVX512-BF16 for the process: a bf16 run
// then trains in fp32 with exactly one warning line, its banner says fp32, and `lat info`
// says what is in effect. Without the cap (on a CPU with the instructions) bf16 is used.
TEST(Bf16Fallback, OneWarningAndTheBannerSaysFp32) {
  const testing::TempDir dir("lat_test_bf16_fallback_");
  std::ofstream(dir.path("text.txt")) << markov_text(3000);
  std::ofstream(dir.path("c.yaml")) << "model: {d_model: 16, n_layers: 2, n_heads: 2, layers: \"gdn,attn\"}\n"
                                       "data: {path: "
                                    << dir.path("text.txt")
                                    << ", block_size: 16}\n"
                                       "train: {precision: bf16, batch_size: 2, max_steps: 2, warmup: 1, "
                                       "eval_every: 0, log_every: 1, threads: 1}\n";
  const std::string train_args = "train " + dir.path("c.yaml") + " --set train.out_dir=";

  const Command capped = run_lat("DNNL_MAX_CPU_ISA=AVX512_CORE", train_args + dir.path("capped"), dir.dir());
  EXPECT_EQ(capped.exit_code, 0) << capped.err;
  EXPECT_EQ(count_of(capped.err, "warning"), 1) << capped.err;
  EXPECT_EQ(count_of(capped.err, "warning: train.precision: cpu has no bf16 matrix products (AVX512-BF16, or "
                                 "DNNL_MAX_CPU_ISA caps oneDNN below it): training in fp32\n"),
            1)
      << capped.err;
  EXPECT_EQ(count_of(capped.err, "cpu, precision fp32"), 1) << capped.err;

  const Command info = run_lat("DNNL_MAX_CPU_ISA=AVX512_CORE", "info " + dir.path("c.yaml"), dir.dir());
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_EQ(count_of(info.out, "precision: train.precision bf16, in effect on this CPU: fp32\n"), 1) << info.out;

  if (!cpu_bf16()) return;
  const Command native = run_lat("", train_args + dir.path("native"), dir.dir());
  EXPECT_EQ(native.exit_code, 0) << native.err;
  EXPECT_EQ(count_of(native.err, "warning"), 0) << native.err;
  EXPECT_EQ(count_of(native.err, "cpu, precision bf16"), 1) << native.err;
  const Command native_info = run_lat("", "info " + dir.path("c.yaml"), dir.dir());
  EXPECT_EQ(count_of(native_info.out, "precision: train.precision bf16, in effect on this CPU: bf16\n"), 1)
      << native_info.out;
}

}  // namespace
}  // namespace lat
