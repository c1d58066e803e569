// Data-parallel training over processes (DESIGN.md "Scale-out"): the one place that
// talks to MPI (Open MPI for CPU ranks) and, for train.device cuda, to NCCL.
//
// A run launched with `mpirun -np N lat train ...` has N ranks; a plain launch, or a build
// without MPI, is one rank and every collective is a no-op. MPI is initialized only when the
// environment shows an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK), so a plain
// launch never pays MPI's start-up or needs its runtime, and finalized at process exit.
//
// The collectives work on flat buffers: tensors are packed in list order into buckets of
// bucket_bytes() (4 MiB by default) and each bucket is one MPI_Allreduce (or ncclAllReduce),
// so a model with hundreds of parameters costs a few calls per step, not hundreds. Every rank
// must pass the same list (same order, shapes and dtypes); ranks of a data-parallel run build
// the same model, so they do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lat/tensor.h"
#include "train/distributed/nccl.h"

namespace lat {

/// Time spent in the gradient all-reduce, for the trainer's report.
struct CollectiveStats {
  double all_reduce_seconds = 0.0;  // wall time inside all_reduce_sum(tensors), packing included
  int64_t all_reduce_calls = 0;     // all_reduce_sum(tensors) calls
  int64_t all_reduce_buckets = 0;   // MPI/NCCL calls those made
};

/// This process's place in the data-parallel job. One per process (get()).
class Distributed {
 public:
  /// The process's context, set up on the first call: MPI_Init_thread (MPI_THREAD_FUNNELED:
  /// only the calling thread uses MPI; OpenMP workers never do) when launched by an MPI
  /// launcher in an MPI build, with MPI_Finalize registered to run at exit. Otherwise rank 0
  /// of 1. Throws lat::Error when MPI fails to start.
  static Distributed& get();

  /// Whether this build can run several ranks (built with MPI).
  static bool built_with_mpi();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  /// Rank among the ranks of this host, and their number (for threads and GPUs per rank).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  bool is_root() const { return rank_ == 0; }

  /// Threads per rank for train.threads = 0: this host's cores divided among its ranks,
  /// at most the cores this process may run on (a launcher may bind it), at least 1.
  int default_threads() const;

  /// Overwrites every tensor with rank 0's values (in place; CPU, f32/f64/i64, contiguous).
  /// Packed into buckets like all_reduce_sum. Throws lat::Error on an undefined or CUDA tensor.
  void broadcast(const std::vector<Tensor>& tensors) const;
  /// Rank 0's `text` on every rank.
  std::string broadcast(const std::string& text) const;
  /// This job's ranks for the NCCL path (broadcast through this context).
  nccl::Ranks nccl_ranks() const;

  /// Sums every tensor over all ranks, in place: packed in list order into buckets of
  /// bucket_bytes(), one all-reduce per bucket. All tensors share one dtype (f32 or f64) and
  /// one device: CPU tensors go through MPI, CUDA tensors through NCCL (throws lat::Error
  /// when this build has no NCCL). Counts into stats(). No-op with one rank.
  void all_reduce_sum(const std::vector<Tensor>& tensors);
  /// Sums `values` over all ranks, in place (one MPI call).
  void all_reduce_sum(std::vector<double>& values) const;
  /// The maximum of `value` over all ranks.
  int64_t all_reduce_max(int64_t value) const;

  /// Bytes per bucket of the bucketed collectives (default 4 MiB). Throws lat::Error below
  /// 8 bytes. Every rank must use the same value.
  size_t bucket_bytes() const { return bucket_bytes_; }
  void set_bucket_bytes(size_t bytes);

  const CollectiveStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

  /// Prints "error: rank R: <message>" (one line) to stderr and ends every rank of the job:
  /// MPI_Abort with `exit_code` under MPI, so mpirun exits non-zero at once instead of the
  /// other ranks waiting forever in their next collective; std::exit(exit_code) otherwise.
  [[noreturn]] void abort(const std::string& message, int exit_code) const;

  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

 private:
  Distributed();

  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  bool mpi_ = false;  // MPI was initialized by this process
  size_t bucket_bytes_ = size_t{4} << 20;
  CollectiveStats stats_;
};

/// Whether the environment shows an MPI launcher (mpirun/mpiexec of Open MPI, MPICH or a
/// PMIx launcher): OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set.
bool launched_by_mpi();

/// This process's rank as the MPI launcher's environment gives it (OMPI_COMM_WORLD_RANK,
/// PMI_RANK or PMIX_RANK), without starting MPI; 0 for a plain launch.
int launcher_rank();

}  // namespace lat
