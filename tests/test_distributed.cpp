// Distributed in one process: the bucket plan of the collectives, and the one-rank context
// of a plain launch (every collective leaves the values as they are). The collectives across
// ranks are tested under mpirun by tests/mpi/collectives.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>

#include "tests/expect_error.h"
#include "train/distributed/buckets.h"
#include "train/distributed/distributed.h"

namespace lat {
namespace {

using testing::expect_error;

Tensor iota(int64_t n, DType dtype = DType::f32) {
  std::vector<double> values(static_cast<size_t>(n));
  std::iota(values.begin(), values.end(), 1.0);
  Tensor t = Tensor::from_vector(values, {n});
  return dtype == DType::f64 ? t : t.to(dtype);
}

// Reassembles the flat stream from the plan: every element exactly once, in list order,
// at its bucket offset.
TEST(Buckets, PlanCoversTheStreamInOrder) {
  const std::vector<Tensor> tensors = {iota(5), iota(0), iota(17), iota(3), iota(8)};
  const size_t bucket_elems = 7;
  const std::vector<Bucket> buckets = plan_buckets(tensors, sizeof(float), bucket_elems);
  // 33 elements: 4 full buckets of 7 and one of 5.
  ASSERT_EQ(buckets.size(), 5u);
  std::vector<float> stream;
  for (size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_EQ(buckets[b].elements, b + 1 < buckets.size() ? bucket_elems : 5u);
    size_t offset = 0;
    for (const BucketPiece& p : buckets[b].pieces) {
      EXPECT_EQ(p.offset, offset);
      const float* data = reinterpret_cast<const float*>(p.data);
      stream.insert(stream.end(), data, data + p.bytes / sizeof(float));
      offset += p.bytes;
    }
    EXPECT_EQ(offset, buckets[b].elements * sizeof(float));
  }
  std::vector<float> expected;
  for (const Tensor& t : tensors)
    for (float v : t.to_vector<float>()) expected.push_back(v);
  EXPECT_EQ(stream, expected);
}

TEST(Buckets, SmallTensorsShareOneBucketAndLargeOnesSplit) {
  const std::vector<Bucket> small = plan_buckets({iota(3), iota(4), iota(2)}, sizeof(float), 1 << 20);
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(small[0].pieces.size(), 3u);
  EXPECT_EQ(small[0].elements, 9u);

  const std::vector<Bucket> large = plan_buckets({iota(10, DType::f64)}, sizeof(double), 4);
  ASSERT_EQ(large.size(), 3u);
  for (const Bucket& b : large) EXPECT_EQ(b.pieces.size(), 1u);
  EXPECT_EQ(large[2].elements, 2u);
  EXPECT_TRUE(plan_buckets({}, sizeof(float), 4).empty());
  expect_error([&] { plan_buckets({iota(3)}, sizeof(float), 0); }, {"plan_buckets: bucket_elems: expected > 0, got 0"});
}

// A plain launch (no MPI launcher in the environment) is rank 0 of 1, and the collectives
// return the values unchanged.
TEST(Distributed, PlainLaunchIsOneRankAndCollectivesKeepValues) {
  ASSERT_FALSE(launched_by_mpi()) << "run this test without mpirun";
  Distributed& dist = Distributed::get();
  EXPECT_EQ(dist.rank(), 0);
  EXPECT_EQ(dist.world_size(), 1);
  EXPECT_EQ(dist.local_size(), 1);
  EXPECT_TRUE(dist.is_root());
  EXPECT_GE(dist.default_threads(), 1);

  Tensor a = iota(6), b = iota(3);
  dist.all_reduce_sum({a, b});
  EXPECT_EQ(a.to_vector<float>(), iota(6).to_vector<float>());
  dist.broadcast({a, b});
  EXPECT_EQ(b.to_vector<float>(), iota(3).to_vector<float>());
  std::vector<double> scalars = {1.5, -2.0};
  dist.all_reduce_sum(scalars);
  EXPECT_EQ(scalars, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(dist.all_reduce_max(7), 7);
  EXPECT_EQ(dist.broadcast(std::string("abc")), "abc");
}

TEST(Distributed, LauncherRankComesFromTheLaunchersEnvironment) {
  ASSERT_FALSE(launched_by_mpi()) << "run this test without mpirun";
  EXPECT_EQ(launcher_rank(), 0);
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    setenv(name, "3", 1);
    EXPECT_EQ(launcher_rank(), 3) << name;
    unsetenv(name);
  }
  EXPECT_EQ(launcher_rank(), 0);
}

TEST(Distributed, RejectsMixedDtypesAndIntegerSums) {
  Distributed& dist = Distributed::get();
  expect_error([&] { dist.all_reduce_sum({iota(2), iota(2, DType::f64)}); },
               {"Distributed::all_reduce_sum: tensors[1]: expected dtype f32 like tensors[0], got f64"});
  expect_error([&] { dist.all_reduce_sum({Tensor::from_vector(std::vector<int64_t>{1, 2}, {2})}); },
               {"Distributed::all_reduce_sum: tensors: expected f32 or f64, got i64"});
  expect_error([&] { dist.all_reduce_sum({iota(2), Tensor()}); },
               {"Distributed::all_reduce_sum: tensors[1]: expected a defined tensor"});
  expect_error([&] { dist.all_reduce_sum({Tensor(), iota(2)}); },
               {"Distributed::all_reduce_sum: tensors[0]: expected a defined tensor"});
  expect_error([&] { dist.broadcast({Tensor()}); }, {"Distributed::broadcast: tensors[0]: expected a defined tensor"});
  expect_error([&] { dist.set_bucket_bytes(4); }, {"Distributed::set_bucket_bytes: bytes: expected >= 8, got 4"});
}

}  // namespace
}  // namespace lat
