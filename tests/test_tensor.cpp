// Tensor handle: factories, seeded generators, views, element access, printing, dtype
// conversions and the errors of misuse.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "lat/lat.h"
#include "tests/expect_error.h"

namespace lat {
namespace {

using testing::expect_error;

// ---- factories ---------------------------------------------------------------------------

TEST(TensorFactory, ZerosOnesFull) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_TRUE(z.device().is_cpu());
  EXPECT_EQ(z.to_vector(), std::vector<float>(6, 0.0f));

  Tensor o = Tensor::ones({4}, DType::f64);
  EXPECT_EQ(o.dtype(), DType::f64);
  EXPECT_EQ(o.to_vector<double>(), std::vector<double>(4, 1.0));

  Tensor f = Tensor::full({3, 1}, -2.5, DType::f32);
  EXPECT_EQ(f.to_vector(), std::vector<float>(3, -2.5f));

  Tensor i = Tensor::full({2}, 7, DType::i64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{7, 7}));
}

TEST(TensorFactory, ScalarAndEmptyShapes) {
  Tensor s = Tensor::scalar(2.5);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_DOUBLE_EQ(s.item(), 2.5);

  Tensor e = Tensor::zeros({0, 3});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.to_vector().empty());
}

TEST(TensorFactory, FromVectorKeepsValuesAndRequiresGrad) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, true);
  EXPECT_EQ(a.dtype(), DType::f32);
  EXPECT_TRUE(a.requires_grad());
  EXPECT_TRUE(a.is_leaf());
  EXPECT_FALSE(a.grad().defined());
  EXPECT_EQ(a.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));

  Tensor d = Tensor::from_vector(std::vector<double>{0.5, -1.25}, {2});
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{0.5, -1.25}));

  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, -1, 4}, {3});
  EXPECT_EQ(ids.dtype(), DType::i64);
  EXPECT_EQ(ids.to_vector<int64_t>(), (std::vector<int64_t>{3, -1, 4}));
}

TEST(TensorFactory, Arange) {
  Tensor a = Tensor::arange(5);
  EXPECT_EQ(a.dtype(), DType::i64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Tensor::arange(2, 11, 3).to_vector<int64_t>(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(Tensor::arange(2, 10, 4).to_vector<int64_t>(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(Tensor::arange(5, 0, -2).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(Tensor::arange(3, 3).numel(), 0);
  Tensor f = Tensor::arange(0, 3, 1, DType::f32);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.to_vector(), (std::vector<float>{0, 1, 2}));
}

TEST(TensorFactory, RandnSameSeedSameValues) {
  Generator g1(42), g2(42), g3(43);
  Tensor a = Tensor::randn({3, 5}, g1);
  Tensor b = Tensor::randn({3, 5}, g2);
  Tensor c = Tensor::randn({3, 5}, g3);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_NE(a.to_vector(), c.to_vector());
  // The next draw continues the stream: different from the first.
  EXPECT_NE(Tensor::randn({3, 5}, g1).to_vector(), a.to_vector());
}

TEST(TensorFactory, RandnMoments) {
  Generator gen(7);
  const int64_t n = 20000;
  std::vector<double> x = Tensor::randn({n}, gen, DType::f64, 3.0, 2.0).to_vector<double>();
  double mean = std::accumulate(x.begin(), x.end(), 0.0) / n;
  double var = 0.0;
  for (double v : x) var += (v - mean) * (v - mean);
  double std = std::sqrt(var / (n - 1));
  // Standard error of the mean is 2 / sqrt(20000) ~ 0.014; of the std ~ 0.01.
  EXPECT_NEAR(mean, 3.0, 0.06);
  EXPECT_NEAR(std, 2.0, 0.05);
}

TEST(TensorFactory, UniformRangeAndSeed) {
  Generator g1(5), g2(5);
  std::vector<float> a = Tensor::uniform({1000}, g1, -0.5, 0.25).to_vector();
  std::vector<float> b = Tensor::uniform({1000}, g2, -0.5, 0.25).to_vector();
  EXPECT_EQ(a, b);
  double mean = 0.0;
  for (float v : a) {
    EXPECT_GE(v, -0.5f);
    EXPECT_LE(v, 0.25f);
    mean += v;
  }
  EXPECT_NEAR(mean / 1000, -0.125, 0.03);  // std of the mean: 0.217 / sqrt(1000) ~ 0.007
}

TEST(Generator, StateSaveRestore) {
  Generator gen(123);
  gen.normal();
  std::string saved = gen.state();
  std::vector<double> first = {gen.normal(), gen.uniform(), static_cast<double>(gen.randint(1000))};
  Tensor t1 = Tensor::randn({4}, gen);

  gen.set_state(saved);
  std::vector<double> second = {gen.normal(), gen.uniform(), static_cast<double>(gen.randint(1000))};
  Tensor t2 = Tensor::randn({4}, gen);
  EXPECT_EQ(first, second);
  EXPECT_EQ(t1.to_vector(), t2.to_vector());

  // A state moves between generators.
  Generator other(999);
  other.set_state(saved);
  EXPECT_DOUBLE_EQ(other.normal(), first[0]);
}

TEST(Generator, RandintRangeAndErrors) {
  Generator gen(1);
  for (int i = 0; i < 200; ++i) {
    int64_t r = gen.randint(3);
    EXPECT_GE(r, 0);
    EXPECT_LT(r, 3);
  }
  expect_error([&] { gen.randint(0); }, {"Generator::randint: n must be positive, got 0"});
  expect_error([&] { gen.set_state("not a state"); }, {"Generator::set_state"});
}

// ---- views ----------------------------------------------------------------------------------

TEST(TensorView, ReshapeSharesStorage) {
  Tensor a = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor b = a.reshape({3, 2});
  EXPECT_EQ(b.shape(), (Shape{3, 2}));
  EXPECT_EQ(b.raw_data(), a.raw_data());  // no copy
  EXPECT_NE(b.id(), a.id());              // a view is its own tensor for the tape
  EXPECT_DOUBLE_EQ(b.at({2, 1}), 5.0);
  b.set({0, 1}, 10.0);
  EXPECT_DOUBLE_EQ(a.at({0, 1}), 10.0);   // writes through the view

  Tensor c = a.view({6});
  EXPECT_EQ(c.raw_data(), a.raw_data());
  EXPECT_EQ(c.to_vector(), (std::vector<float>{0, 10, 2, 3, 4, 5}));
}

TEST(TensorView, ReshapeInfersMinusOne) {
  Tensor a = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(a.reshape({-1}).shape(), (Shape{24}));
  EXPECT_EQ(a.reshape({4, -1}).shape(), (Shape{4, 6}));
  EXPECT_EQ(a.reshape({-1, 2, 3}).shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(Tensor::scalar(1.0).reshape({-1}).shape(), (Shape{1}));
  EXPECT_EQ(Tensor::zeros({1}).reshape({}).shape(), Shape{});
}

TEST(TensorView, BadReshapeThrows) {
  Tensor a = Tensor::zeros({2, 3});
  expect_error([&] { a.reshape({4, 2}); }, {"reshape", "[4, 2]", "[2, 3]"});
  expect_error([&] { a.reshape({-1, -1}); }, {"reshape: more than one -1 in [-1, -1]"});
  expect_error([&] { a.reshape({4, -1}); }, {"reshape: cannot infer -1 in [4, -1] for 6 elements"});
  expect_error([&] { a.reshape({-2, -3}); }, {"reshape: negative dimension in [-2, -3]"});
}

TEST(TensorView, CloneCopiesDetachShares) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, true);
  Tensor c = a.clone();
  EXPECT_NE(c.raw_data(), a.raw_data());
  EXPECT_EQ(c.to_vector(), a.to_vector());
  c.set({0}, 9.0);
  EXPECT_DOUBLE_EQ(a.at({0}), 1.0);

  Tensor d = a.detach();
  EXPECT_EQ(d.raw_data(), a.raw_data());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  clear_tape();
}

// ---- element access ---------------------------------------------------------------------

TEST(TensorAccess, AtSetItemNegativeIndices) {
  Tensor t = Tensor::zeros({2, 3}, DType::f64);
  t.set({1, 2}, 4.5);
  t.set({-2, -3}, -1.0);
  EXPECT_DOUBLE_EQ(t.at({1, 2}), 4.5);
  EXPECT_DOUBLE_EQ(t.at({-1, -1}), 4.5);
  EXPECT_DOUBLE_EQ(t.at({0, 0}), -1.0);
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{-1, 0, 0, 0, 0, 4.5}));
  EXPECT_DOUBLE_EQ(t.reshape({6}).at({5}), 4.5);

  Tensor one = Tensor::full({1, 1}, 3.0);
  EXPECT_DOUBLE_EQ(one.item(), 3.0);
  expect_error([&] { t.item(); }, {"Tensor::item: expected one element, got shape [2, 3]"});
  expect_error([&] { t.at({2, 0}); }, {"Tensor::at: index 2 out of range for dim 0 of size 2"});
  expect_error([&] { t.at({0, -4}); }, {"Tensor::at: index -4 out of range for dim 1 of size 3"});
  expect_error([&] { t.at({0}); }, {"Tensor::at: index has 1 entries, tensor has 2 dims [2, 3]"});
  expect_error([&] { t.set({0, 3}, 1.0); }, {"Tensor::set: index 3 out of range for dim 1 of size 3"});
}

TEST(TensorAccess, FillAndCopyInPlace) {
  Tensor t = Tensor::zeros({2, 2});
  void* before = t.raw_data();
  t.fill_(1.5);
  EXPECT_EQ(t.to_vector(), std::vector<float>(4, 1.5f));
  t.copy_(Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(t.raw_data(), before);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  expect_error([&] { t.copy_(Tensor::zeros({4})); }, {"Tensor::copy_: src shape [4], expected [2, 2]"});
  expect_error([&] { t.copy_(Tensor::zeros({2, 2}, DType::f64)); }, {"Tensor::copy_: src dtype f64, expected f32"});
}

TEST(TensorAccess, TypedDataPointer) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  float* p = t.data<float>();
  EXPECT_EQ(static_cast<void*>(p), t.raw_data());
  p[1] = 7.0f;
  EXPECT_DOUBLE_EQ(t.at({1}), 7.0);
}

// ---- printing -------------------------------------------------------------------------------

TEST(TensorPrint, StrNamesShapeDtypeAndValues) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2.5, 3, 4, 5, 6}, {2, 3}, true);
  std::string s = t.str();
  EXPECT_NE(s.find("shape=[2, 3]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=f32"), std::string::npos) << s;
  EXPECT_NE(s.find("device=cpu"), std::string::npos) << s;
  EXPECT_NE(s.find("requires_grad"), std::string::npos) << s;
  EXPECT_NE(s.find("1, 2.5, 3"), std::string::npos) << s;
  EXPECT_NE(s.find("4, 5, 6"), std::string::npos) << s;

  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), s);
  EXPECT_EQ(Tensor().str(), "Tensor(undefined)");

  std::string big = Tensor::zeros({100}, DType::i64).str();
  EXPECT_NE(big.find("36 more"), std::string::npos) << big;
}

// ---- dtype conversions -----------------------------------------------------------------------

TEST(TensorDType, Conversions) {
  Tensor f = Tensor::from_vector(std::vector<float>{1.5f, -2.75f, 3.0f}, {3});
  Tensor d = f.to(DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1.5, -2.75, 3.0}));
  Tensor i = d.to(DType::i64);
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));  // truncates toward zero
  Tensor back = i.to(DType::f32);
  EXPECT_EQ(back.to_vector(), (std::vector<float>{1, -2, 3}));
  EXPECT_EQ(f.to(DType::f32).raw_data(), f.raw_data());  // same dtype: same tensor
  EXPECT_EQ(f.to(Device::cpu()).raw_data(), f.raw_data());

  // to_vector<T> converts without changing the tensor.
  EXPECT_EQ(f.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_STREQ(dtype_name(DType::f64), "f64");
}

// ---- errors of misuse ----------------------------------------------------------------------

TEST(TensorErrors, FromVectorSizeMismatch) {
  expect_error([] { Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5}, {2, 3}); },
               {"from_vector", "5", "[2, 3]", "6"});
  expect_error([&] { Tensor::zeros({2, -1}); }, {"Tensor::empty: shape [2, -1] has a negative dimension"});
}

TEST(TensorErrors, WrongDtypeData) {
  Tensor t = Tensor::zeros({2});
  expect_error([&] { t.data<double>(); }, {"f64", "f32"});
  expect_error([&] { t.data<int64_t>(); }, {"Tensor::data: requested i64, tensor is f32"});
  const Tensor& c = t;
  expect_error([&] { c.data<double>(); }, {"Tensor::data: requested f64, tensor is f32"});
}

TEST(TensorErrors, UndefinedAndGradMisuse) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  expect_error([&] { u.shape(); }, {"Tensor::shape: undefined tensor"});
  expect_error([&] { u.numel(); }, {"Tensor::numel: undefined tensor"});
  EXPECT_FALSE(u.requires_grad());

  Tensor ids = Tensor::arange(3);
  expect_error([&] { ids.set_requires_grad(true); },
               {"Tensor::set_requires_grad: i64 tensors cannot require grad"});  // integers have no gradient

  Tensor a = Tensor::zeros({2, 2});
  expect_error([&] { a.set_grad(Tensor::zeros({4})); }, {"Tensor::set_grad: grad shape [4], expected [2, 2]"});
  expect_error([&] { a.set_grad(Tensor::zeros({2, 2}, DType::f64)); },
               {"Tensor::set_grad: grad dtype f64, expected f32"});
  a.set_grad(Tensor::ones({2, 2}));
  EXPECT_EQ(a.grad().to_vector(), std::vector<float>(4, 1.0f));
  a.zero_grad();
  EXPECT_FALSE(a.grad().defined());

  Generator gen(0);
  expect_error([&] { Tensor::randn({2}, gen, DType::i64); }, {"Tensor::randn: dtype must be f32 or f64, got i64"});
  expect_error([&] { Tensor::uniform({2}, gen, 1.0, 0.0); }, {"Tensor::uniform: low 1 > high 0"});
  expect_error([&] { Tensor::arange(0, 4, 0); }, {"Tensor::arange: step must not be 0"});
}

// Without a usable GPU, asking for CUDA memory is a clear lat::Error, not a crash; with one,
// the data makes the round trip.
TEST(TensorDevice, CudaWithoutGpuIsAnError) {
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  EXPECT_EQ(Device::cpu().str(), "cpu");
  if (cuda_built() && cuda_device_count() > 0) {
    Tensor host = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
    Tensor dev = host.to(Device::cuda());
    EXPECT_TRUE(dev.device().is_cuda());
    EXPECT_EQ(dev.to_vector(), host.to_vector());
    return;
  }
  const std::string msg = expect_error([] { Tensor::zeros({2, 3}, DType::f32, Device::cuda()); }, {"cuda:0"});
  if (!cuda_built()) {
    EXPECT_NE(msg.find("without CUDA"), std::string::npos) << msg;
  }
  expect_error([&] { Tensor::from_vector(std::vector<float>{1}, {1}).to(Device::cuda()); },
               {"Storage: device cuda:0 requested"});
}

}  // namespace
}  // namespace lat
