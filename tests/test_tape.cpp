// The thread-local tape: recording order, backward with and without an explicit output
// gradient, accumulation, zero_grad, the no-grad guard, detach, freeing after backward,
// and no growth of live storages over 10,000 training steps (a leak would grow with every
// step of a long run).
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "lat/lat.h"
#include "tests/expect_error.h"

namespace lat {
namespace {

using testing::expect_error;

Tensor f64(const std::vector<double>& values, const Shape& shape, bool requires_grad = false) {
  return Tensor::from_vector(values, shape, requires_grad);
}

// An identity op whose backward appends `name` to `log`: shows the order in which
// backward visits the nodes. `name` must be a string literal (the tape keeps the pointer).
Tensor logged_identity(const Tensor& x, const char* name, std::vector<std::string>& log) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x.clone();
  }
  if (needs_grad({&x})) {
    record(name, {x}, {out}, [name, &log](const std::vector<Tensor>& g) {
      log.emplace_back(name);
      return std::vector<Tensor>{g[0]};
    });
  }
  return out;
}

class TapeTest : public ::testing::Test {
 protected:
  void SetUp() override { clear_tape(); }
  void TearDown() override { clear_tape(); }
};

TEST_F(TapeTest, RecordsOneNodePerOpInExecutionOrder) {
  Tensor a = f64({1, 2, 3}, {3}, true);
  EXPECT_EQ(tape_size(), 0u);
  std::vector<std::string> log;
  Tensor x1 = logged_identity(a, "first", log);
  EXPECT_EQ(tape_size(), 1u);
  Tensor x2 = logged_identity(x1, "second", log);
  Tensor x3 = logged_identity(x2, "third", log);
  EXPECT_EQ(tape_size(), 3u);
  Tensor loss = sum(x3);
  EXPECT_EQ(tape_size(), 4u);

  backward(loss);
  EXPECT_EQ(log, (std::vector<std::string>{"third", "second", "first"}));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 1, 1}));
}

TEST_F(TapeTest, NothingRecordedWithoutRequiresGrad) {
  Tensor a = f64({1, 2}, {2});
  Tensor b = f64({3, 4}, {2});
  Tensor c = mul(add(a, b), 2.0);
  EXPECT_EQ(tape_size(), 0u);
  EXPECT_FALSE(c.requires_grad());
  EXPECT_TRUE(c.is_leaf());
  expect_error([&] { backward(sum(c)); },
               {"backward: loss does not require grad (no recorded op leads to it)"});  // nothing leads to the loss
}

TEST_F(TapeTest, RequiresGradPropagates) {
  Tensor a = f64({1, 2}, {2}, true);
  Tensor b = f64({3, 4}, {2});
  Tensor c = mul(a, b);
  EXPECT_TRUE(c.requires_grad());
  EXPECT_FALSE(c.is_leaf());
  Tensor d = add(b, 1.0);
  EXPECT_FALSE(d.requires_grad());
  Tensor e = sub(d, c);  // one input requires grad: the output does
  EXPECT_TRUE(e.requires_grad());
  expect_error([&] { c.set_requires_grad(false); },
               {"Tensor::set_requires_grad: only leaf tensors can change requires_grad"});
  EXPECT_TRUE(c.detach().is_leaf());
}

TEST_F(TapeTest, BackwardScalarLoss) {
  // loss = sum(a * a * b): da = 2 a b, db = a^2.
  Tensor a = f64({1, -2, 3}, {3}, true);
  Tensor b = f64({0.5, 4, -1}, {3}, true);
  backward(sum(mul(mul(a, a), b)));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, -16, -6}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 4, 9}));
}

TEST_F(TapeTest, BackwardWithExplicitGradOutput) {
  Tensor a = f64({1, 2, 3, 4}, {2, 2}, true);
  Tensor y = mul(a, 3.0);
  Tensor g = f64({1, 0.5, -1, 2}, {2, 2});
  expect_error([&] { backward(y); }, {"backward: grad_output is required for a non-scalar loss of shape [2, 2]"});
  expect_error([&] { backward(y, f64({1, 2, 3, 4}, {4})); }, {"backward: grad_output shape [4], expected [2, 2]"});
  backward(y, g);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{3, 1.5, -3, 6}));
}

TEST_F(TapeTest, TensorUsedTwiceSumsItsGradients) {
  // b = 2a (non-leaf, used twice); loss = sum(b * b + b): da = 2 (2 b + 1).
  Tensor a = f64({1, -1}, {2}, true);
  Tensor b = mul(a, 2.0);
  backward(sum(add(mul(b, b), b)));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{10, -6}));
}

TEST_F(TapeTest, GradientsAccumulateAcrossBackwardCalls) {
  Tensor a = f64({1, 2}, {2}, true);
  backward(sum(mul(a, a)));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{2, 4}));
  backward(sum(mul(a, 3.0)));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{5, 7}));

  a.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  backward(sum(mul(a, 3.0)));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{3, 3}));
}

TEST_F(TapeTest, AccumulationDoesNotAliasAnotherGradient) {
  // Both leaves get the same incoming gradient; each must own its copy.
  Tensor a = f64({1, 2}, {2}, true);
  Tensor b = f64({3, 4}, {2}, true);
  backward(sum(add(a, b)));
  EXPECT_NE(a.grad().raw_data(), b.grad().raw_data());
  backward(sum(a));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{2, 2}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 1}));
}

TEST_F(TapeTest, LeafLossGetsGradientOne) {
  Tensor a = Tensor::scalar(2.0, DType::f64).set_requires_grad(true);
  backward(a);
  EXPECT_DOUBLE_EQ(a.grad().item(), 1.0);
}

TEST_F(TapeTest, NoGradGuardStopsRecordingAndNests) {
  Tensor a = f64({1, 2}, {2}, true);
  EXPECT_TRUE(grad_enabled());
  {
    NoGradGuard outer;
    EXPECT_FALSE(grad_enabled());
    Tensor b = mul(a, a);
    EXPECT_FALSE(b.requires_grad());
    {
      NoGradGuard inner;
      EXPECT_FALSE(grad_enabled());
      Tensor c = add(a, 1.0);
      EXPECT_FALSE(c.requires_grad());
    }
    EXPECT_FALSE(grad_enabled());  // the inner guard restores the outer state
    Tensor d = exp(a);
    EXPECT_FALSE(d.requires_grad());
    EXPECT_EQ(tape_size(), 0u);
  }
  EXPECT_TRUE(grad_enabled());
  Tensor e = mul(a, a);
  EXPECT_TRUE(e.requires_grad());
  EXPECT_EQ(tape_size(), 1u);
}

TEST_F(TapeTest, DetachStopsTheGradient) {
  // loss = sum(detach(a) * b + a): da = 1 only, db = a.
  Tensor a = f64({2, 3}, {2}, true);
  Tensor b = f64({5, 7}, {2}, true);
  Tensor d = a.detach();
  EXPECT_FALSE(d.requires_grad());
  backward(sum(add(mul(d, b), a)));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{2, 3}));
  EXPECT_FALSE(d.grad().defined());
}

TEST_F(TapeTest, TapeClearedAfterBackwardAndSavedTensorsFreed) {
  const int64_t live_before = Storage::live_count();
  {
    Tensor a = f64({1, 2, 3}, {3}, true);
    Tensor unused = exp(a);  // a branch that does not lead to the loss
    Tensor loss = sum(tanh(mul(a, a)));
    EXPECT_EQ(tape_size(), 4u);
    backward(loss);
    EXPECT_EQ(tape_size(), 0u);
    EXPECT_TRUE(a.grad().defined());
  }
  EXPECT_EQ(Storage::live_count(), live_before);

  Tensor a = f64({1}, {1}, true);
  Tensor y = exp(a);
  EXPECT_EQ(tape_size(), 1u);
  clear_tape();
  EXPECT_EQ(tape_size(), 0u);
}

TEST_F(TapeTest, EachThreadHasItsOwnTape) {
  Tensor a = f64({1}, {1}, true);
  Tensor y = exp(a);
  size_t other_size = 99;
  bool other_enabled = false;
  std::thread worker([&] {
    other_size = tape_size();
    other_enabled = grad_enabled();
  });
  worker.join();
  EXPECT_EQ(other_size, 0u);
  EXPECT_TRUE(other_enabled);
  EXPECT_EQ(tape_size(), 1u);
}

// A 2-layer MLP (matmul, tanh, cross-entropy) trained with plain SGD under the no-grad
// guard. After the first steps every allocation is transient: the number of live
// storages after step 10 and after step 10,000 must be the same.
class TinyMlp {
 public:
  explicit TinyMlp(Generator& gen)
      : w1_(Tensor::randn({8, 16}, gen, DType::f32, 0.0, 0.35).set_requires_grad(true)),
        b1_(Tensor::zeros({16}).set_requires_grad(true)),
        w2_(Tensor::randn({16, 4}, gen, DType::f32, 0.0, 0.25).set_requires_grad(true)),
        b2_(Tensor::zeros({4}).set_requires_grad(true)),
        x_(Tensor::randn({12, 8}, gen)),
        targets_(Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 3, 2, 1, 0, 1, 1, 2, 0}, {12})) {}

  /// One forward, backward and SGD update; returns the loss before the update.
  double step(double lr) {
    Tensor h = tanh(add(matmul(x_, w1_), b1_));
    Tensor loss = cross_entropy(add(matmul(h, w2_), b2_), targets_);
    backward(loss);
    NoGradGuard no_grad;
    for (Tensor* p : {&w1_, &b1_, &w2_, &b2_}) {
      p->copy_(sub(*p, mul(p->grad(), lr)));
      p->zero_grad();
    }
    return loss.item();
  }

 private:
  Tensor w1_, b1_, w2_, b2_, x_, targets_;
};

TEST_F(TapeTest, TenThousandTrainingStepsDoNotGrowMemory) {
  Generator gen(2024);
  TinyMlp model(gen);
  double first_loss = 0.0, loss = 0.0;
  int64_t live_after_10 = 0;
  for (int step = 1; step <= 10000; ++step) {
    loss = model.step(0.2);
    if (step == 1) first_loss = loss;
    if (step == 10) live_after_10 = Storage::live_count();
    ASSERT_EQ(tape_size(), 0u) << "step " << step;
  }
  EXPECT_EQ(Storage::live_count(), live_after_10);
  // And it did train: 12 points, 4 classes, 16 hidden units can be fitted.
  EXPECT_LT(loss, 0.1 * first_loss) << "first " << first_loss << ", last " << loss;
}

}  // namespace
}  // namespace lat
