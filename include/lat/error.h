// lat::Error and the argument-check macro used at every API boundary.
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace lat {

/// The one exception type of lat. Messages name the function, the argument and
/// expected versus actual, e.g. "matmul: b: expected shape [..., 3, N], got [4, 5]".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// "[2, 3, 4]" for a shape; "[]" for a scalar.
std::string shape_str(const std::vector<int64_t>& shape);

namespace detail {
[[noreturn]] void throw_error(const std::string& message, const char* file, int line);
}  // namespace detail

}  // namespace lat

/// Throws lat::Error with the streamed message plus file:line when `cond` is false.
/// Usage: LAT_CHECK(a.dim() == 2, "matmul: a: expected 2 dims, got " << a.dim());
#define LAT_CHECK(cond, msg)                                              \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::ostringstream lat_check_stream_;                               \
      lat_check_stream_ << msg;                                           \
      ::lat::detail::throw_error(lat_check_stream_.str(), __FILE__, __LINE__); \
    }                                                                     \
  } while (0)
