// Refusing host allocations that cannot fit, before their pages are touched: a tensor larger
// than the machine's memory (from a file header or a config) would otherwise be granted by
// overcommit and fail minutes later, page by page, in the out-of-memory killer.
#pragma once
#include <cstddef>
#include <string>

#include "lat/error.h"

namespace lat {

/// Thrown when a HostAllocationLimit is exceeded (the message names its `what` and limit).
class AllocationLimitError : public Error {
 public:
  using Error::Error;
};

/// Thrown when a host allocation fails or is larger than this machine's memory: the cause is
/// the size asked for, not the values computed.
class HostMemoryError : public Error {
 public:
  using Error::Error;
};

/// This machine's physical memory in bytes (sysconf _SC_PHYS_PAGES x _SC_PAGE_SIZE).
size_t host_physical_memory();

/// While alive, CPU tensor allocations made on this thread that together exceed `limit_bytes`
/// throw AllocationLimitError naming `what` and the limit. Frees do not give budget back, so
/// it bounds what a construction allocates (a model's parameters, for example). Scopes do not
/// nest: an inner one replaces the outer one until it ends.
class HostAllocationLimit {
 public:
  HostAllocationLimit(size_t limit_bytes, std::string what);
  ~HostAllocationLimit();
  HostAllocationLimit(const HostAllocationLimit&) = delete;
  HostAllocationLimit& operator=(const HostAllocationLimit&) = delete;

  size_t limit_bytes() const { return limit_bytes_; }
  size_t allocated_bytes() const { return allocated_bytes_; }

 private:
  friend void check_host_allocation(size_t nbytes);
  size_t limit_bytes_;
  size_t allocated_bytes_ = 0;
  std::string what_;
  HostAllocationLimit* previous_;
};

/// Throws AllocationLimitError past the limit of this thread's HostAllocationLimit (then
/// counts nbytes against it), HostMemoryError when nbytes exceeds the machine's physical memory.
void check_host_allocation(size_t nbytes);

}  // namespace lat
