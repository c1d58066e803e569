// Error messages: for each kind of mistake (shape, dtype, device) a representative op
// throws lat::Error whose message starts with the op, names the argument and shows both the
// expected and the actual shape (or dtype, or device), so the user can fix the call from
// the message alone.
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <source_location>
#include <string>
#include <string_view>

#include "lat/lat.h"
#include "tests/expect_error.h"

namespace lat {
namespace {

// testing::expect_error (a lat::Error containing each of `parts`), and the message starts
// with "<op>: ".
void expect_op_error(const std::function<void()>& f, const std::string& op,
                     std::initializer_list<std::string_view> parts,
                     std::source_location where = std::source_location::current()) {
  const std::string message = testing::expect_error(f, parts, where);
  if (message.empty()) return;  // reported by testing::expect_error
  const ::testing::ScopedTrace trace(where.file_name(), static_cast<int>(where.line()), "expect_op_error");
  EXPECT_EQ(message.rfind(op + ": ", 0), 0u) << message;
}

Tensor f32(const Shape& shape) { return Tensor::zeros(shape, DType::f32); }
Tensor f64(const Shape& shape) { return Tensor::zeros(shape, DType::f64); }
Tensor i64(const Shape& shape) { return Tensor::zeros(shape, DType::i64); }

// ---- shapes -----------------------------------------------------------------------------

TEST(ShapeErrors, MatmulInnerDimensions) {
  expect_op_error([] { matmul(f32({2, 3}), f32({4, 5})); }, "matmul", {"b:", "[2, 3]", "[4, 5]"});
  expect_op_error([] { matmul(f32({2, 3}), f32({4, 5}), false, true); }, "matmul", {"b:", "[2, 3]", "[4, 5]"});
}

TEST(ShapeErrors, BroadcastingBinaryOp) {
  expect_op_error([] { add(f32({2, 3}), f32({4})); }, "add", {"b:", "[2, 3]", "[4]"});
  expect_op_error([] { mul(f64({5, 1, 3}), f64({2, 2})); }, "mul", {"b:", "[5, 1, 3]", "[2, 2]"});
}

TEST(ShapeErrors, RmsNormWeight) {
  expect_op_error([] { rms_norm(f32({2, 4}), f32({3})); }, "rms_norm", {"weight:", "[2, 4]", "[3]"});
}

TEST(ShapeErrors, CrossEntropyTargets) {
  expect_op_error([] { cross_entropy(f32({3, 5}), i64({4})); }, "cross_entropy", {"targets:", "[3, 5]", "[4]"});
}

TEST(ShapeErrors, ConcatOtherDimensions) {
  expect_op_error([] { concat({f32({2, 3}), f32({2, 4})}, 0); }, "concat", {"tensors[1]", "[2, 3]", "[2, 4]"});
}

// ---- dtypes -----------------------------------------------------------------------------

TEST(DTypeErrors, BinaryOpMixedFloats) {
  expect_op_error([] { add(f32({2}), f64({2})); }, "add", {"b:", "f32", "f64"});
}

TEST(DTypeErrors, MatmulMixedFloats) {
  expect_op_error([] { matmul(f64({2, 2}), f32({2, 2})); }, "matmul", {"b:", "f64", "f32"});
}

TEST(DTypeErrors, UnaryOpOnIntegers) {
  expect_op_error([] { exp(i64({3})); }, "exp", {"a:", "f32 or f64", "i64"});
}

TEST(DTypeErrors, IntegerArguments) {
  expect_op_error([] { embedding(f32({10, 4}), f32({3})); }, "embedding", {"ids:", "i64", "f32"});
  expect_op_error([] { cross_entropy(f32({3, 5}), f32({3})); }, "cross_entropy", {"targets:", "i64", "f32"});
}

// ---- devices ----------------------------------------------------------------------------

// Needs a tensor on a GPU: skipped where there is none (DESIGN.md: CUDA tests skip without
// a GPU); test_tensor covers the error of asking for CUDA memory there.
TEST(DeviceErrors, MixedDevicesNameBoth) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Tensor on_gpu = Tensor::zeros({2, 2}, DType::f32, Device::cuda(0));
  expect_op_error([&] { add(f32({2, 2}), on_gpu); }, "add", {"b:", "cpu", "cuda:0"});
  expect_op_error([&] { matmul(f32({2, 2}), on_gpu); }, "matmul", {"b:", "cpu", "cuda:0"});
}

}  // namespace
}  // namespace lat
