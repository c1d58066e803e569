// ncclAllReduce of gradient buckets on lat's CUDA stream; libnccl.so.2 loaded on first use.
#include "train/distributed/nccl.h"

#include "lat/error.h"

#if defined(LAT_WITH_CUDA) && __has_include(<nccl.h>)
#define LAT_WITH_NCCL 1
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "autograd/cuda/stream.h"
#include "autograd/dynamic_library.h"
#include "train/distributed/buckets.h"
#endif

namespace lat::nccl {

#ifdef LAT_WITH_NCCL
namespace {

// The NCCL entry points lat uses, resolved from libnccl.so.2 (dlopen keeps CPU-only runs of a
// CUDA build free of the library and the link free of a path CMake would have to find).
struct Api {
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
};

const Api& api() {
  static const Api loaded = [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
    LAT_CHECK(lib != nullptr, "nccl: cannot load libnccl.so.2 (" << dlerror()
                                  << "): install NCCL or add its directory to LD_LIBRARY_PATH");
    const std::string name = "nccl: libnccl.so.2";
    Api a;
    resolve_symbol(lib, "ncclGetUniqueId", name, a.get_unique_id);
    resolve_symbol(lib, "ncclCommInitRank", name, a.comm_init_rank);
    resolve_symbol(lib, "ncclAllReduce", name, a.all_reduce);
    resolve_symbol(lib, "ncclGetErrorString", name, a.error_string);
    return a;
  }();
  return loaded;
}

void check(ncclResult_t result, const char* call) {
  LAT_CHECK(result == ncclSuccess, "nccl: " << call << " failed: " << api().error_string(result));
}

void cuda_check(cudaError_t result, const char* call) {
  LAT_CHECK(result == cudaSuccess, "nccl: " << call << " failed: " << cudaGetErrorString(result));
}

// One communicator per process, for the device of the first all-reduce (the ranks' GPUs do
// not change during a run). Never destroyed: it lives until the process exits.
ncclComm_t communicator(const Ranks& ranks, int device) {
  static ncclComm_t comm = nullptr;
  static int comm_device = -1;
  if (comm != nullptr) {
    LAT_CHECK(device == comm_device, "nccl: all_reduce_sum: expected tensors on cuda:" << comm_device
                                         << " (the communicator's device), got cuda:" << device);
    return comm;
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (ranks.rank == 0) check(api().get_unique_id(&id), "ncclGetUniqueId");
  const std::string shared = ranks.broadcast(std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  std::memcpy(&id, shared.data(), sizeof(id));
  cuda::DeviceGuard guard(device);
  check(api().comm_init_rank(&comm, ranks.world_size, id, ranks.rank), "ncclCommInitRank");
  comm_device = device;
  return comm;
}

}  // namespace

bool built() { return true; }

int64_t all_reduce_sum(const std::vector<Tensor>& tensors, size_t bucket_elems, const Ranks& ranks) {
  if (tensors.empty()) return 0;
  const int device = tensors[0].device().index;
  const DType dtype = tensors[0].dtype();
  const size_t elem = dtype == DType::f64 ? sizeof(double) : sizeof(float);
  const ncclDataType_t type = dtype == DType::f64 ? ncclFloat64 : ncclFloat32;
  ncclComm_t comm = communicator(ranks, device);
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device);

  // Everything is queued on lat's stream, in order: pack, reduce, unpack; the next bucket
  // reuses the buffer only after the previous unpack (same stream). A bucket that is one piece
  // of one tensor is reduced in place.
  const std::vector<Bucket> buckets = plan_buckets(tensors, elem, bucket_elems);
  if (buckets.empty()) return 0;
  Tensor buffer = Tensor::empty({static_cast<int64_t>(buckets[0].elements)}, dtype, tensors[0].device());
  char* buffer_data = static_cast<char*>(buffer.raw_data());
  for (const Bucket& bucket : buckets) {
    if (bucket.pieces.size() == 1) {
      char* data = bucket.pieces[0].data;
      check(api().all_reduce(data, data, bucket.elements, type, ncclSum, comm, stream), "ncclAllReduce");
      continue;
    }
    for (const BucketPiece& p : bucket.pieces)
      cuda_check(cudaMemcpyAsync(buffer_data + p.offset, p.data, p.bytes, cudaMemcpyDeviceToDevice, stream),
                 "cudaMemcpyAsync");
    check(api().all_reduce(buffer_data, buffer_data, bucket.elements, type, ncclSum, comm, stream), "ncclAllReduce");
    for (const BucketPiece& p : bucket.pieces)
      cuda_check(cudaMemcpyAsync(p.data, buffer_data + p.offset, p.bytes, cudaMemcpyDeviceToDevice, stream),
                 "cudaMemcpyAsync");
  }
  cuda::synchronize_stream(device);
  return static_cast<int64_t>(buckets.size());
}

#else

bool built() { return false; }

int64_t all_reduce_sum(const std::vector<Tensor>&, size_t, const Ranks&) {
  LAT_CHECK(false, "nccl: all_reduce_sum: train.device cuda with several ranks needs NCCL, and this lat was built "
                   "without it (a CUDA build finds nccl.h in the CUDA toolkit; rebuild with LAT_CUDA=ON where "
                   "the toolkit ships NCCL)");
  return 0;
}

#endif

}  // namespace lat::nccl
