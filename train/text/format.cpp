// List and number formatting (format.h).
#include "train/text/format.h"

#include <sstream>

namespace lat {

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::string format_fixed(double value, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << value;
  return os.str();
}

std::string format_significant(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

}  // namespace lat
