// The data-parallel context: MPI start-up and the bucketed collectives (CPU tensors through
// MPI, CUDA tensors through train/distributed/nccl.h).
#include "train/distributed/distributed.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "lat/error.h"
#include "train/distributed/buckets.h"
#include "train/distributed/nccl.h"

#ifdef LAT_WITH_MPI
#include <mpi.h>
#endif

namespace lat {
namespace {

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return sizeof(float);
    case DType::f64: return sizeof(double);
    case DType::i64: return sizeof(int64_t);
    default: break;
  }
  LAT_CHECK(false, "Distributed: dtype " << dtype_name(dtype) << " is not supported (f32, f64, i64)");
  return 0;
}

// The host path of a bucketed collective: each bucket assembled in `buffer`, combined by
// `reduce(data, elements)`, copied back. A bucket that is one piece of one tensor is
// combined in place, without the copies.
template <class Reduce>
void reduce_buckets(const std::vector<Tensor>& tensors, size_t elem_size, size_t bucket_elems, Reduce reduce) {
  const std::vector<Bucket> buckets = plan_buckets(tensors, elem_size, bucket_elems);
  std::vector<char> buffer;
  for (const Bucket& bucket : buckets) {
    if (bucket.pieces.size() == 1) {
      reduce(bucket.pieces[0].data, bucket.elements);
      continue;
    }
    buffer.resize(bucket.elements * elem_size);
    for (const BucketPiece& p : bucket.pieces) std::memcpy(buffer.data() + p.offset, p.data, p.bytes);
    reduce(buffer.data(), bucket.elements);
    for (const BucketPiece& p : bucket.pieces) std::memcpy(p.data, buffer.data() + p.offset, p.bytes);
  }
}

// Every tensor defined (contiguous by construction) and of the dtype and device of the first.
void check_tensors(const std::vector<Tensor>& tensors, const char* op) {
  for (size_t i = 0; i < tensors.size(); ++i)
    LAT_CHECK(tensors[i].defined(), op << ": tensors[" << i << "]: expected a defined tensor");
  const DType dtype = tensors[0].dtype();
  const Device device = tensors[0].device();
  for (size_t i = 1; i < tensors.size(); ++i) {
    LAT_CHECK(tensors[i].dtype() == dtype, op << ": tensors[" << i << "]: expected dtype " << dtype_name(dtype)
                                              << " like tensors[0], got " << dtype_name(tensors[i].dtype()));
    LAT_CHECK(tensors[i].device() == device, op << ": tensors[" << i << "]: expected device " << device.str()
                                                << " like tensors[0], got " << tensors[i].device().str());
  }
}

#ifdef LAT_WITH_MPI
MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    default: break;
  }
  LAT_CHECK(false, "Distributed: dtype " << dtype_name(dtype) << " has no MPI type");
  return MPI_DATATYPE_NULL;
}

// MPI's default error handler on MPI_COMM_WORLD aborts the job with its own message, which
// is what a failed collective should do; the return codes are checked for other handlers.
void mpi_check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  LAT_CHECK(false, "Distributed: " << call << " failed: " << std::string(text, static_cast<size_t>(length)));
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
#endif

// MPI counts are int: buckets are far below 2^31 elements, but a caller may choose a huge one.
size_t bucket_elements(size_t bucket_bytes, size_t elem_size) {
  return std::clamp<size_t>(bucket_bytes / elem_size, 1, size_t{1} << 30);
}

}  // namespace

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* value = std::getenv(name)) return std::atoi(value);
  return 0;
}

bool Distributed::built_with_mpi() {
#ifdef LAT_WITH_MPI
  return true;
#else
  return false;
#endif
}

Distributed& Distributed::get() {
  static Distributed instance;
  return instance;
}

Distributed::Distributed() {
#ifdef LAT_WITH_MPI
  if (!launched_by_mpi()) return;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    LAT_CHECK(provided >= MPI_THREAD_FUNNELED,
              "Distributed: MPI provides thread level " << provided << ", lat needs MPI_THREAD_FUNNELED");
    std::atexit(finalize_mpi);
  }
  mpi_ = true;
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size");
  // The ranks sharing this host's memory: their count splits the cores (and the GPUs).
  MPI_Comm local;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
            "MPI_Comm_split_type");
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
#endif
}

int Distributed::default_threads() const {
  const int host_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int allowed = omp_get_num_procs();  // the cores of this process's affinity mask
  return std::max(1, std::min(allowed, host_cores / local_size_));
}

void Distributed::set_bucket_bytes(size_t bytes) {
  LAT_CHECK(bytes >= 8, "Distributed::set_bucket_bytes: bytes: expected >= 8, got " << bytes);
  bucket_bytes_ = bytes;
}

void Distributed::broadcast(const std::vector<Tensor>& tensors) const {
  if (tensors.empty()) return;
  check_tensors(tensors, "Distributed::broadcast");
  LAT_CHECK(tensors[0].device().is_cpu(),
            "Distributed::broadcast: tensors: expected CPU tensors, got " << tensors[0].device().str());
  if (world_size_ == 1) return;
#ifdef LAT_WITH_MPI
  const DType dtype = tensors[0].dtype();
  const size_t elem = element_size(dtype);
  const size_t bucket_elems = bucket_elements(bucket_bytes_, elem);
  reduce_buckets(tensors, elem, bucket_elems, [&](char* data, size_t count) {
    mpi_check(MPI_Bcast(data, static_cast<int>(count), mpi_type(dtype), 0, MPI_COMM_WORLD), "MPI_Bcast");
  });
#endif
}

std::string Distributed::broadcast(const std::string& text) const {
  if (world_size_ == 1) return text;
  std::string out = text;
#ifdef LAT_WITH_MPI
  int64_t size = static_cast<int64_t>(text.size());
  mpi_check(MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
  out.resize(static_cast<size_t>(size));
  if (size > 0) mpi_check(MPI_Bcast(out.data(), static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
#endif
  return out;
}

void Distributed::all_reduce_sum(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return;
  check_tensors(tensors, "Distributed::all_reduce_sum");
  const DType dtype = tensors[0].dtype();
  const Device device = tensors[0].device();
  LAT_CHECK(dtype == DType::f32 || dtype == DType::f64,
            "Distributed::all_reduce_sum: tensors: expected f32 or f64, got " << dtype_name(dtype));
  if (world_size_ == 1) return;
  const auto start = std::chrono::steady_clock::now();
  const size_t elem = element_size(dtype);
  const size_t bucket_elems = bucket_elements(bucket_bytes_, elem);
  if (device.is_cuda()) {
    stats_.all_reduce_buckets += nccl::all_reduce_sum(tensors, bucket_elems, nccl_ranks());
  } else {
#ifdef LAT_WITH_MPI
    reduce_buckets(tensors, elem, bucket_elems, [&](char* data, size_t count) {
      mpi_check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(dtype), MPI_SUM, MPI_COMM_WORLD),
                "MPI_Allreduce");
      ++stats_.all_reduce_buckets;
    });
#endif
  }
  stats_.all_reduce_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.all_reduce_calls;
}

void Distributed::all_reduce_sum(std::vector<double>& values) const {
  if (world_size_ == 1 || values.empty()) return;
#ifdef LAT_WITH_MPI
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM,
                          MPI_COMM_WORLD),
            "MPI_Allreduce");
#endif
}

int64_t Distributed::all_reduce_max(int64_t value) const {
  if (world_size_ == 1) return value;
#ifdef LAT_WITH_MPI
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
#endif
  return value;
}

nccl::Ranks Distributed::nccl_ranks() const {
  return {rank_, world_size_, [this](const std::string& text) { return broadcast(text); }};
}

void Distributed::abort(const std::string& message, int exit_code) const {
  std::string line = message;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::fprintf(stderr, "error: rank %d: %s\n", rank_, line.c_str());
  std::fflush(stderr);
#ifdef LAT_WITH_MPI
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, exit_code);
#endif
  std::exit(exit_code);
}

}  // namespace lat
