// The NCCL side of Distributed (train.device cuda): the gradient all-reduce between GPUs.
//
// Compiled when the build has CUDA and the toolkit ships nccl.h (CUDA 13 does); libnccl.so.2
// is loaded at the first CUDA all-reduce, so a CPU run never needs it. Without NCCL the
// functions throw a clear error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lat/tensor.h"

namespace lat::nccl {

/// The ranks of the job as NCCL needs them (Distributed::nccl_ranks() makes it): this rank,
/// their number, and how rank 0's bytes reach every rank (the communicator's id travels
/// through MPI before NCCL can carry anything).
struct Ranks {
  int rank = 0;
  int world_size = 1;
  std::function<std::string(const std::string&)> broadcast;  // rank 0's string, on every rank
};

/// Whether this build has the NCCL path (CUDA built and nccl.h found).
bool built();

/// Sums `tensors` (f32 or f64, all on one CUDA device, checked by the caller) over `ranks`,
/// in place, in buckets of `bucket_elems` elements packed on the device and
/// reduced with ncclAllReduce on lat's stream of that device. The communicator is created
/// on the first call (rank 0's ncclUniqueId broadcast through MPI); each rank must use its
/// own GPU (cuda:local_rank). Returns the number of ncclAllReduce calls. Blocks until the
/// sums are in place. Throws lat::Error when the build has no NCCL, libnccl.so.2 cannot be
/// loaded, or NCCL fails (with its message).
int64_t all_reduce_sum(const std::vector<Tensor>& tensors, size_t bucket_elems, const Ranks& ranks);

}  // namespace lat::nccl
