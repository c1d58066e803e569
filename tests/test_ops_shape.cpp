// Shape ops (transpose, permute, concat, split, slice) and embedding: forward values
// against index-by-index references, finite-difference gradients, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lat/grad_check.h"
#include "lat/ops.h"
#include "lat/tape.h"
#include "tests/expect_error.h"

namespace {

using lat::DType;
using lat::Shape;
using lat::Tensor;
using lat::testing::expect_error;

Tensor random(const Shape& shape, uint64_t seed, bool requires_grad = false) {
  lat::Generator gen(seed);
  Tensor t = Tensor::randn(shape, gen, DType::f64);
  t.set_requires_grad(requires_grad);
  return t;
}

/// 0, 1, 2, ... as f64 in `shape`.
Tensor iota(const Shape& shape) { return Tensor::arange(0, lat::shape_numel(shape), 1, DType::f64).reshape(shape); }

constexpr double kGradTol = 1e-7;

TEST(Transpose, KnownAnswer) {
  Tensor a = iota({2, 3});
  Tensor t = lat::transpose(a, 0, 1);
  ASSERT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(lat::transpose(a, -1, -2).to_vector<double>(), t.to_vector<double>());
}

TEST(Permute, MatchesIndexReferenceForEveryPermutationOf3D) {
  const Shape shape{2, 3, 4};
  Tensor a = iota(shape);
  std::vector<int64_t> perm{0, 1, 2};
  do {
    for (DType dtype : {DType::f32, DType::f64, DType::i64}) {
      Tensor p = lat::permute(a.to(dtype), perm);
      ASSERT_EQ(p.shape(), (Shape{shape[perm[0]], shape[perm[1]], shape[perm[2]]}));
      for (int64_t i = 0; i < p.size(0); ++i)
        for (int64_t j = 0; j < p.size(1); ++j)
          for (int64_t k = 0; k < p.size(2); ++k) {
            int64_t src[3];
            src[perm[0]] = i;
            src[perm[1]] = j;
            src[perm[2]] = k;
            EXPECT_EQ(p.at({i, j, k}), a.at({src[0], src[1], src[2]}));
          }
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(Permute, LargeTensorUsesParallelPathCorrectly) {
  // [B, T, H, D] -> [B, H, T, D], the attention re-layout; big enough for OpenMP.
  Tensor a = random({2, 129, 8, 33}, 1).to(DType::f32);
  Tensor p = lat::permute(a, {0, 2, 1, 3});
  Tensor back = lat::permute(p, {0, 2, 1, 3});
  EXPECT_EQ(back.to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(p.at({1, 7, 128, 32}), a.at({1, 128, 7, 32}));
  // The last dim moves: the tiled path, with partial tiles (129 and 33 are not multiples of 32).
  Tensor q = lat::permute(a, {3, 1, 0, 2});
  ASSERT_EQ(q.shape(), (Shape{33, 129, 2, 8}));
  std::vector<float> av = a.to_vector<float>(), qv = q.to_vector<float>();
  int64_t mismatches = 0;
  for (int64_t i0 = 0; i0 < 2; ++i0)
    for (int64_t i1 = 0; i1 < 129; ++i1)
      for (int64_t i2 = 0; i2 < 8; ++i2)
        for (int64_t i3 = 0; i3 < 33; ++i3)
          mismatches += av[((i0 * 129 + i1) * 8 + i2) * 33 + i3] != qv[((i3 * 129 + i1) * 2 + i0) * 8 + i2];
  EXPECT_EQ(mismatches, 0);
}

TEST(Permute, GradCheck) {
  Tensor a = random({2, 3, 4}, 2, true);
  auto r = lat::grad_check([](const std::vector<Tensor>& x) { return lat::permute(x[0], {2, 0, 1}); }, {a});
  EXPECT_LT(r.max_rel_error, kGradTol);
  auto t = lat::grad_check([](const std::vector<Tensor>& x) { return lat::transpose(x[0], 0, 2); }, {a});
  EXPECT_LT(t.max_rel_error, kGradTol);
}

TEST(Concat, KnownAnswerAlongEachAxis) {
  Tensor a = iota({2, 2});
  Tensor b = lat::add(iota({2, 1}), 10.0);
  Tensor c = lat::concat({a, b}, 1);
  ASSERT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{0, 1, 10, 2, 3, 11}));
  Tensor d = lat::concat({a, lat::add(iota({1, 2}), 10.0)}, -2);
  ASSERT_EQ(d.shape(), (Shape{3, 2}));
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{0, 1, 2, 3, 10, 11}));
}

TEST(Concat, GradCheck) {
  Tensor a = random({2, 3, 2}, 3, true);
  Tensor b = random({2, 1, 2}, 4, true);
  Tensor c = random({2, 4, 2}, 5, true);
  auto r = lat::grad_check([](const std::vector<Tensor>& x) { return lat::concat(x, 1); }, {a, b, c});
  ASSERT_EQ(r.rel_error.size(), 3u);
  EXPECT_LT(r.max_rel_error, kGradTol);
}

TEST(Split, KnownAnswerAndRoundTrip) {
  Tensor a = iota({2, 5});
  std::vector<Tensor> parts = lat::split(a, {2, 0, 3}, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].to_vector<double>(), (std::vector<double>{0, 1, 5, 6}));
  EXPECT_EQ(parts[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(parts[2].to_vector<double>(), (std::vector<double>{2, 3, 4, 7, 8, 9}));
  EXPECT_EQ(lat::concat(parts, 1).to_vector<double>(), a.to_vector<double>());
}

TEST(Split, GradCheckAllOutputsAndOneOutput) {
  Tensor a = random({3, 6, 2}, 6, true);
  // Every output used (in a different order), then only the middle one (the others get
  // zero gradients).
  auto all = lat::grad_check(
      [](const std::vector<Tensor>& x) {
        std::vector<Tensor> p = lat::split(x[0], {1, 3, 2}, 1);
        return lat::concat({lat::mul(p[2], 2.0), p[0], p[1]}, 1);
      },
      {a});
  EXPECT_LT(all.max_rel_error, kGradTol);
  auto one = lat::grad_check([](const std::vector<Tensor>& x) { return lat::split(x[0], {1, 3, 2}, -2)[1]; }, {a});
  EXPECT_LT(one.max_rel_error, kGradTol);
}

TEST(Slice, KnownAnswerAndGradCheck) {
  Tensor a = iota({2, 4, 3});
  Tensor s = lat::slice(a, 1, 1, 3);
  ASSERT_EQ(s.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{3, 4, 5, 6, 7, 8, 15, 16, 17, 18, 19, 20}));
  EXPECT_EQ(lat::slice(a, -1, 2, 3).to_vector<double>(), (std::vector<double>{2, 5, 8, 11, 14, 17, 20, 23}));

  Tensor x = random({2, 4, 3}, 7, true);
  auto r = lat::grad_check([](const std::vector<Tensor>& v) { return lat::slice(v[0], 1, 1, 3); }, {x});
  EXPECT_LT(r.max_rel_error, kGradTol);
}

TEST(Embedding, KnownAnswer) {
  Tensor weight = iota({4, 3});
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 0, 3, 1}, {2, 2});
  Tensor out = lat::embedding(weight, ids);
  ASSERT_EQ(out.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5}));
}

TEST(Embedding, GradCheckWithRepeatedIds) {
  Tensor weight = random({5, 3}, 8, true);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 4, 1, 1, 0, 4}, {2, 3});
  auto r = lat::grad_check([&](const std::vector<Tensor>& x) { return lat::embedding(x[0], ids); }, {weight});
  EXPECT_LT(r.max_rel_error, kGradTol);
}

TEST(Embedding, BackwardScatterAddsRepeatedIds) {
  // Large enough for the column-parallel scatter-add; the gradient of row i is the sum of
  // the output gradients of the positions holding id i.
  const int64_t num = 7, dim = 300, count = 400;
  Tensor weight = random({num, dim}, 9).to(DType::f32).set_requires_grad(true);
  std::vector<int64_t> id(count);
  for (int64_t i = 0; i < count; ++i) id[i] = (i * 5) % num;
  Tensor g = random({count, dim}, 10).to(DType::f32);
  lat::backward(lat::embedding(weight, Tensor::from_vector(id, {count})), g);
  std::vector<double> expected(num * dim, 0.0);
  std::vector<float> gv = g.to_vector<float>();
  for (int64_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < dim; ++j) expected[id[i] * dim + j] += gv[i * dim + j];
  EXPECT_LT(lat::relative_error(weight.grad(), Tensor::from_vector(expected, {num, dim})), 1e-6);
}

TEST(ShapeOps, Errors) {
  Tensor a = Tensor::zeros({2, 3});
  expect_error([&] { lat::transpose(a, 0, 2); }, {"transpose", "dim1", "[2, 3]"});
  expect_error([&] { lat::permute(a, {0}); }, {"permute", "perm", "[2, 3]"});
  expect_error([&] { lat::permute(a, {1, 1}); }, {"permute", "perm", "[1, 1]"});
  expect_error([&] { lat::concat({a, Tensor::zeros({3, 3})}, 1); }, {"concat", "tensors[1]", "[3, 3]"});
  expect_error([&] { lat::concat({a, Tensor::zeros({2, 3}, DType::f64)}, 0); }, {"concat", "tensors[1]", "f64"});
  expect_error([&] { lat::concat({a, Tensor::zeros({2})}, 0); }, {"concat", "tensors[1]", "[2]"});
  expect_error([&] { lat::concat({}, 0); }, {"concat", "tensors"});
  expect_error([&] { lat::split(a, {1, 1}, 1); }, {"split", "sizes", "[1, 1]", "[2, 3]"});
  expect_error([&] { lat::split(a, {4, -1}, 1); }, {"split", "sizes"});
  expect_error([&] { lat::slice(a, 1, 2, 4); }, {"slice", "[2, 3]", "[2, 4)"});
  expect_error([&] { lat::slice(a, 2, 0, 1); }, {"slice", "axis", "[2, 3]"});
}

TEST(Embedding, Errors) {
  Tensor weight = Tensor::zeros({5, 3});
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 7}, {2, 3});
  expect_error([&] { lat::embedding(weight, ids); }, {"embedding", "ids", "id 7", "[1, 2]", "[0, 5)"});
  Tensor negative = Tensor::from_vector(std::vector<int64_t>{-1}, {1});
  expect_error([&] { lat::embedding(weight, negative); }, {"embedding", "id -1", "[0]"});
  expect_error([&] { lat::embedding(weight, Tensor::zeros({2})); }, {"embedding", "ids", "i64", "f32"});
  expect_error([&] { lat::embedding(Tensor::zeros({5}), ids); }, {"embedding", "weight", "[5]"});
}

}  // namespace
