#include "lat/error.h"

namespace lat {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace detail {
[[noreturn]] void throw_error(const std::string& message, const char* file, int line) {
  // Strip the directory: "autograd/ops.cpp:12" is enough to find the check.
  std::string path(file);
  std::string where = path;
  for (const char* top : {"/autograd/", "/layers/", "/optim/", "/data/", "/train/", "/include/"}) {
    auto pos = path.rfind(top);
    if (pos != std::string::npos) {
      where = path.substr(pos + 1);
      break;
    }
  }
  throw Error(message + " (" + where + ":" + std::to_string(line) + ")");
}
}  // namespace detail

}  // namespace lat
