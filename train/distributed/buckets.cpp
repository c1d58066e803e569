// The flat-stream bucket plan of the collectives.
#include "train/distributed/buckets.h"

#include <algorithm>
#include <utility>

#include "lat/error.h"

namespace lat {

std::vector<Bucket> plan_buckets(const std::vector<Tensor>& tensors, size_t elem_size, size_t bucket_elems) {
  LAT_CHECK(bucket_elems > 0, "plan_buckets: bucket_elems: expected > 0, got 0");
  LAT_CHECK(elem_size > 0, "plan_buckets: elem_size: expected > 0, got 0");
  std::vector<Bucket> buckets;
  Bucket current;
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    char* data = static_cast<char*>(const_cast<Tensor&>(t).raw_data());
    size_t left = static_cast<size_t>(t.numel());
    while (left > 0) {
      const size_t take = std::min(left, bucket_elems - current.elements);
      current.pieces.push_back({data, current.elements * elem_size, take * elem_size});
      data += take * elem_size;
      left -= take;
      current.elements += take;
      if (current.elements == bucket_elems) buckets.push_back(std::exchange(current, Bucket{}));
    }
  }
  if (current.elements > 0) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace lat
