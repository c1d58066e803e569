// A one-rank libnccl.so.2 for the CUDA emulator (run.sh puts it first on LD_LIBRARY_PATH,
// where lat's dlopen finds it): the real library drives the GPU itself. With one rank a sum
// all-reduce is a copy. Types and values are nccl.h's, declared here so that the shim builds
// without the toolkit's header.
#include <cstddef>
#include <cstring>

namespace {
enum ncclResult_t { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5 };
struct ncclUniqueId {
  char internal[128];
};
enum ncclDataType_t { ncclNumTypes = 12 };
enum ncclRedOp_t { ncclSum = 0 };
int communicator;

size_t type_size(ncclDataType_t t) {
  // int8, uint8, int32, uint32, int64, uint64, f16, f32, f64, bf16, fp8 e4m3, fp8 e5m2
  static const size_t sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return t >= 0 && t < ncclNumTypes ? sizes[t] : 0;
}
}  // namespace

extern "C" {
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::memset(id->internal, 0, sizeof(id->internal));
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(void** comm, int nranks, ncclUniqueId, int rank) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (nranks != 1 || rank != 0) return ncclInvalidUsage;  // the emulator has one device
  *comm = &communicator;
  return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, void* comm,
                           void*) {
  if (comm != &communicator || type_size(type) == 0 || op != ncclSum) return ncclInvalidArgument;
  if (send != recv) std::memmove(recv, send, count * type_size(type));
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage: return "invalid usage: the emulated NCCL has one rank";
  }
  return "unknown error (emulated NCCL)";
}
}
