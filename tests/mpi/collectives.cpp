// The collectives of Distributed across real ranks: run under `mpirun -np N` (N >= 2).
// Every check is against a known answer: rank r's tensors hold integer-valued floats
// f(r, i), so the sum over ranks is exact in f32 and f64. Exits 1 (and mpirun non-zero)
// when any check fails on any rank; prints one line per failure naming the rank.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "train/distributed/buckets.h"
#include "train/distributed/distributed.h"

namespace {

int failures = 0;

void expect(bool ok, int rank, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "FAIL rank %d: %s\n", rank, what.c_str());
}

// Rank r's value of element i of tensor t: distinct per rank, tensor and element.
double value(int rank, int t, int64_t i) { return static_cast<double>((rank + 1) * 1000 + t * 100 + i % 97); }

std::vector<lat::Tensor> make_tensors(int rank, const std::vector<int64_t>& sizes, lat::DType dtype) {
  std::vector<lat::Tensor> out;
  for (size_t t = 0; t < sizes.size(); ++t) {
    std::vector<double> v(static_cast<size_t>(sizes[t]));
    for (int64_t i = 0; i < sizes[t]; ++i) v[static_cast<size_t>(i)] = value(rank, static_cast<int>(t), i);
    lat::Tensor x = lat::Tensor::from_vector(v, {sizes[t]});
    out.push_back(dtype == lat::DType::f64 ? x : x.to(dtype));
  }
  return out;
}

// all_reduce_sum over tensors of `sizes` with buckets of `bucket_bytes`: every element is
// the sum over ranks, and one collective call was made per planned bucket.
void check_all_reduce(lat::Distributed& dist, const std::vector<int64_t>& sizes, lat::DType dtype,
                      size_t bucket_bytes, const std::string& name) {
  const int rank = dist.rank(), n = dist.world_size();
  dist.set_bucket_bytes(bucket_bytes);
  std::vector<lat::Tensor> tensors = make_tensors(rank, sizes, dtype);
  const size_t elem = dtype == lat::DType::f64 ? 8 : 4;
  const size_t planned = lat::plan_buckets(tensors, elem, std::max<size_t>(1, bucket_bytes / elem)).size();
  dist.reset_stats();
  dist.all_reduce_sum(tensors);
  expect(dist.stats().all_reduce_buckets == static_cast<int64_t>(planned), rank,
         name + ": " + std::to_string(dist.stats().all_reduce_buckets) + " buckets reduced, planned " +
             std::to_string(planned));
  expect(dist.stats().all_reduce_calls == 1, rank, name + ": all_reduce_calls != 1");
  int64_t wrong = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    const std::vector<double> got = tensors[t].to_vector<double>();
    for (int64_t i = 0; i < sizes[t]; ++i) {
      double expected = 0.0;
      for (int r = 0; r < n; ++r) expected += value(r, static_cast<int>(t), i);
      if (got[static_cast<size_t>(i)] != expected) ++wrong;
    }
  }
  expect(wrong == 0, rank, name + ": " + std::to_string(wrong) + " elements differ from the sum over ranks");
}

void check_broadcast(lat::Distributed& dist) {
  const int rank = dist.rank();
  dist.set_bucket_bytes(40);  // 10 floats: the 23-element tensor spans buckets
  const std::vector<int64_t> sizes = {3, 23, 1, 0, 9};
  std::vector<lat::Tensor> tensors = make_tensors(rank, sizes, lat::DType::f32);
  const std::vector<lat::Tensor> root = make_tensors(0, sizes, lat::DType::f32);
  dist.broadcast(tensors);
  for (size_t t = 0; t < sizes.size(); ++t)
    expect(tensors[t].to_vector<float>() == root[t].to_vector<float>(), rank,
           "broadcast: tensor " + std::to_string(t) + " differs from rank 0's");
  std::vector<lat::Tensor> ids = {lat::Tensor::from_vector(std::vector<int64_t>{rank, 7 * rank}, {2})};
  dist.broadcast(ids);
  expect(ids[0].to_vector<int64_t>() == std::vector<int64_t>{0, 0}, rank, "broadcast: i64 tensor differs from rank 0's");
  const std::string text = dist.broadcast(rank == 0 ? std::string("checkpoint path\0with nul", 24) : std::string("x"));
  expect(text == std::string("checkpoint path\0with nul", 24), rank, "broadcast: string differs from rank 0's");
  expect(dist.broadcast(rank == 0 ? std::string() : std::string("y")).empty(), rank,
         "broadcast: empty string of rank 0 not received");
}

void check_scalars(lat::Distributed& dist) {
  const int rank = dist.rank(), n = dist.world_size();
  std::vector<double> values = {1.0 + rank, 0.5 * rank, -2.0};
  dist.all_reduce_sum(values);
  const double sum_r = n * (n - 1) / 2.0;
  expect(values == std::vector<double>{n + sum_r, 0.5 * sum_r, -2.0 * n}, rank, "all_reduce_sum(scalars) wrong");
  expect(dist.all_reduce_max(10 * rank - 3) == 10 * (n - 1) - 3, rank, "all_reduce_max wrong");
}

}  // namespace

int main() {
  lat::Distributed& dist = lat::Distributed::get();
  const int rank = dist.rank();
  expect(dist.world_size() >= 2, rank, "run under mpirun -np N with N >= 2, got " + std::to_string(dist.world_size()));
  expect(dist.local_size() == dist.world_size(), rank, "one host: local_size should equal world_size");
  expect(dist.local_rank() == rank, rank, "one host: local_rank should equal rank");
  expect(dist.default_threads() >= 1, rank, "default_threads < 1");

  // Buckets of 40 bytes (10 f32): many buckets, tensors split across them and sharing them.
  check_all_reduce(dist, {3, 23, 1, 0, 9, 40}, lat::DType::f32, 40, "f32 small buckets");
  check_all_reduce(dist, {3, 23, 1, 0, 9, 40}, lat::DType::f64, 40, "f64 small buckets");
  // The default 4 MiB: one bucket for small tensors; a 1.5M-element tensor alone spans two.
  check_all_reduce(dist, {5, 7, 11}, lat::DType::f32, size_t{4} << 20, "f32 one bucket");
  check_all_reduce(dist, {1500000, 3}, lat::DType::f32, size_t{4} << 20, "f32 large tensor");
  check_broadcast(dist);
  check_scalars(dist);

  // A mixed list is rejected on every rank before any message is sent, so no rank hangs.
  // (No GoogleTest under mpirun: the type and the message are checked by hand.)
  std::string message;
  try {
    dist.all_reduce_sum({lat::Tensor::zeros({2}), lat::Tensor::zeros({2}, lat::DType::f64)});
  } catch (const lat::Error& e) {
    message = e.what();
  }
  expect(message.find("tensors[1]: expected dtype f32 like tensors[0], got f64") != std::string::npos, rank,
         "mixed dtypes: expected a lat::Error naming tensors[1] and both dtypes, got '" + message + "'");

  const int64_t any_failed = dist.all_reduce_max(failures > 0 ? 1 : 0);
  if (rank == 0) std::printf("collectives on %d ranks: %s\n", dist.world_size(), any_failed ? "FAILED" : "ok");
  return failures > 0 ? 1 : 0;
}
