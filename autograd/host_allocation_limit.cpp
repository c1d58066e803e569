#include "autograd/host_allocation_limit.h"

#include <unistd.h>

#include <cstdint>
#include <sstream>

namespace lat {
namespace {

thread_local HostAllocationLimit* t_limit = nullptr;

std::string gib(size_t bytes) {
  std::ostringstream s;
  s.precision(3);
  s << static_cast<double>(bytes) / double(size_t{1} << 30) << " GiB";
  return s.str();
}

}  // namespace

size_t host_physical_memory() {
  static const size_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) : SIZE_MAX;
  }();
  return bytes;
}

HostAllocationLimit::HostAllocationLimit(size_t limit_bytes, std::string what)
    : limit_bytes_(limit_bytes), what_(std::move(what)), previous_(t_limit) {
  t_limit = this;
}

HostAllocationLimit::~HostAllocationLimit() { t_limit = previous_; }

void check_host_allocation(size_t nbytes) {
  if (HostAllocationLimit* limit = t_limit; limit != nullptr) {
    if (nbytes > limit->limit_bytes_ - limit->allocated_bytes_)
      throw AllocationLimitError(limit->what_ + " need more than " + gib(limit->limit_bytes_) + " (allocated " +
                                 gib(limit->allocated_bytes_) + ", next tensor " + gib(nbytes) + ")");
    limit->allocated_bytes_ += nbytes;
  }
  const size_t physical = host_physical_memory();
  if (nbytes > physical)
    throw HostMemoryError("Storage: out of host memory: a tensor of " + std::to_string(nbytes) + " bytes (" + gib(nbytes) +
                ") is larger than this machine's memory (" + gib(physical) + ")");
}

}  // namespace lat
