// How the bucketed collectives of Distributed cut a list of tensors into buckets: the
// tensors' elements as one flat stream in list order, cut every `bucket_elems` elements.
// A tensor larger than a bucket is split over several; small ones share one. The MPI (host)
// and NCCL (device) paths follow the same plan, copying each piece in, reducing the bucket,
// and copying each piece back.
#pragma once
#include <cstddef>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// A run of `bytes` bytes of one tensor, at `data` (host or device memory), that lands at
/// byte `offset` of its bucket.
struct BucketPiece {
  char* data = nullptr;
  size_t offset = 0;
  size_t bytes = 0;
};

/// One collective call: `elements` elements assembled from `pieces`.
struct Bucket {
  std::vector<BucketPiece> pieces;
  size_t elements = 0;
};

/// The buckets of `tensors` (defined, contiguous, all of one dtype of `elem_size` bytes) with
/// at most `bucket_elems` elements each; every bucket but the last holds exactly that many.
/// Empty tensors contribute nothing. Throws lat::Error when bucket_elems or elem_size is 0.
std::vector<Bucket> plan_buckets(const std::vector<Tensor>& tensors, size_t elem_size, size_t bucket_elems);

}  // namespace lat
