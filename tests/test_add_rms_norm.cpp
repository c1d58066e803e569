// add_rms_norm (layers/fused/add_rms_norm.h), the residual addition fused with the RMSNorm
// that reads its sum: the same bits as add followed by rms_norm, forward and every gradient
// (f32 and f64, odd sizes, both outputs used), against finite differences in f64, through
// RMSNorm::forward_sum with both weight kinds, and its errors.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "lat/grad_check.h"
#include "lat/lat.h"
#include "layers/fused/add_rms_norm.h"
#include "layers/rms_norm.h"
#include "tests/bitwise.h"
#include "tests/expect_error.h"

namespace lat {
namespace {

using testing::expect_error;

using testing::differing_bits;

/// What a block does with the two outputs: the sum goes on along the residual stream (times
/// w_sum) and the normed sum into a layer (times w_normed).
Tensor block_loss(const Tensor& sum, const Tensor& normed, const Tensor& w_sum, const Tensor& w_normed) {
  return mean(sum * w_sum) + mean(normed * w_normed);
}

// Rows of 1, 37 and 5x7 with D = 1, 19 and 128; x and y are intermediates (x0 * 2, y0 * 3), as
// in a model, so that their gradients pass through the tape's sums.
TEST(AddRmsNorm, SameBitsAsAddThenRmsNorm) {
  for (DType dtype : {DType::f32, DType::f64})
    for (const Shape& shape : {Shape{1, 1}, Shape{37, 19}, Shape{5, 7, 128}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(shape));
      Generator gen(2);
      const int64_t D = shape.back();
      Tensor x0 = Tensor::randn(shape, gen, dtype).set_requires_grad(true);
      Tensor y0 = Tensor::randn(shape, gen, dtype).set_requires_grad(true);
      Tensor w = (Tensor::randn({D}, gen, dtype, 0.0, 0.3) + 1.0).detach().set_requires_grad(true);
      const Tensor w_sum = Tensor::randn(shape, gen, dtype), w_normed = Tensor::randn(shape, gen, dtype);

      const AddRmsNorm fused = add_rms_norm(x0 * 2.0, y0 * 3.0, w, 1e-5);
      backward(block_loss(fused.sum, fused.normed, w_sum, w_normed));
      const Tensor dx = x0.grad(), dy = y0.grad(), dw = w.grad();
      x0.set_grad(Tensor());
      y0.set_grad(Tensor());
      w.set_grad(Tensor());

      const Tensor sum = x0 * 2.0 + y0 * 3.0;
      const Tensor normed = rms_norm(sum, w, 1e-5);
      backward(block_loss(sum, normed, w_sum, w_normed));

      EXPECT_EQ(differing_bits(fused.sum, sum), 0) << "sum";
      EXPECT_EQ(differing_bits(fused.normed, normed), 0) << "normed";
      EXPECT_EQ(differing_bits(dx, x0.grad()), 0) << "dx";
      EXPECT_EQ(differing_bits(dy, y0.grad()), 0) << "dy";
      EXPECT_EQ(differing_bits(dw, w.grad()), 0) << "dweight";
    }
}

TEST(AddRmsNorm, GradientsMatchFiniteDifferences) {
  Generator gen(3);
  const std::vector<Tensor> inputs = {Tensor::randn({2, 3, 6}, gen, DType::f64).set_requires_grad(true),
                                      Tensor::randn({2, 3, 6}, gen, DType::f64).set_requires_grad(true),
                                      Tensor::randn({6}, gen, DType::f64).set_requires_grad(true)};
  const GradCheckResult r = grad_check(
      [](const std::vector<Tensor>& in) {
        const AddRmsNorm out = add_rms_norm(in[0], in[1], in[2], 1e-6);
        return concat({out.sum, out.normed}, 2);
      },
      inputs);
  EXPECT_LT(r.max_rel_error, 1e-7);
}

// The module form scales by the weight or, zero-centred, by 1 + weight, as forward() does.
TEST(AddRmsNorm, ForwardSumOfTheModuleEqualsAddThenForward) {
  Generator gen(4);
  const Tensor x = Tensor::randn({3, 4, 8}, gen), y = Tensor::randn({3, 4, 8}, gen);
  for (NormWeight kind : {NormWeight::plain, NormWeight::zero_centered}) {
    RMSNorm norm(8, 1e-6, kind);
    Tensor weight = norm.weight();  // a handle: writes reach the parameter
    weight.copy_(Tensor::randn({8}, gen, DType::f32, 0.0, 0.5));
    const AddRmsNorm out = norm.forward_sum(x, y);
    EXPECT_EQ(differing_bits(out.sum, x + y), 0);
    EXPECT_EQ(differing_bits(out.normed, norm.forward(x + y)), 0);
  }
}

// On CUDA the op is the composition of add and rms_norm: the CPU's values.
TEST(AddRmsNorm, CudaMatchesCpu) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << (cuda_built() ? "no CUDA device visible" : "lat was built without CUDA (LAT_CUDA=OFF)");
  const Device gpu = Device::cuda(0);
  Generator gen(5);
  const Tensor x = Tensor::randn({3, 5, 24}, gen), y = Tensor::randn({3, 5, 24}, gen);
  const Tensor weight = Tensor::randn({24}, gen, DType::f32, 1.0, 0.3);
  const Tensor w_sum = Tensor::randn({3, 5, 24}, gen), w_normed = Tensor::randn({3, 5, 24}, gen);
  auto run = [&](Device device) {
    Tensor xd = x.to(device).detach().set_requires_grad(true), yd = y.to(device).detach().set_requires_grad(true);
    Tensor wd = weight.to(device).detach().set_requires_grad(true);
    const AddRmsNorm out = add_rms_norm(xd, yd, wd, 1e-6);
    backward(block_loss(out.sum, out.normed, w_sum.to(device), w_normed.to(device)));
    std::vector<Tensor> results{out.sum.detach(), out.normed.detach(), xd.grad(), yd.grad(), wd.grad()};
    for (Tensor& t : results) t = t.to(Device::cpu());
    return results;
  };
  const std::vector<Tensor> cpu = run(Device::cpu()), cuda = run(gpu);
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_LT(relative_error(cuda[i], cpu[i]), 1e-5) << "result " << i;
}

TEST(AddRmsNorm, Errors) {
  const Tensor x = Tensor::zeros({2, 4}), w = Tensor::ones({4});
  expect_error([&] { add_rms_norm(x, Tensor::zeros({2, 5}), w); }, {"add_rms_norm", "y", "[2, 4]", "[2, 5]"});
  expect_error([&] { add_rms_norm(x, Tensor::zeros({2, 4}, DType::f64), w); }, {"add_rms_norm", "y", "f32", "f64"});
  expect_error([&] { add_rms_norm(x, x, Tensor::ones({3})); }, {"add_rms_norm", "weight", "[4]", "[3]"});
  expect_error(
      [&] {
        add_rms_norm(Tensor::zeros({2, 4}, DType::i64), Tensor::zeros({2, 4}, DType::i64), w);
      },
      {"add_rms_norm", "x", "f32 or f64", "i64"});
  expect_error([&] { add_rms_norm(x, x, w, -1.0); }, {"add_rms_norm", "eps", ">= 0", "-1"});
}

}  // namespace
}  // namespace lat
