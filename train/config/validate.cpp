// The bounds of each schema row, and the rules in between (validate.h).
#include "train/config/validate.h"

#include <algorithm>
#include <sstream>
#include <type_traits>

#include "train/config/schema.h"
#include "train/config/suggest.h"
#include "train/text/format.h"

namespace lat {
namespace {

bool in_range(const FloatRange& r, double x) {
  const bool above_low = r.low_open ? x > r.low : x >= r.low;
  const bool below_high = !r.high || (r.high_open ? x < *r.high : x <= *r.high);
  return above_low && below_high;
}

/// "a float > 0", "floats in [0, 1)", "multipliers >= 0", "a float >= 0 (0 = off)".
std::string describe_range(const FloatRange& r, const char* noun) {
  std::ostringstream os;
  os << noun << " ";
  if (r.high)
    os << "in " << (r.low_open ? "(" : "[") << r.low << ", " << *r.high << (r.high_open ? ")" : "]");
  else
    os << (r.low_open ? "> " : ">= ") << r.low;
  os << r.note;
  return os.str();
}

void check_int(const Validation& v, const char* key, const Bounds& b, int64_t value) {
  const bool below = b.min_int && value < *b.min_int, above = b.max_int && value > *b.max_int;
  if (!below && !above) return;
  std::string expected = "an int";
  if (b.min_int && b.max_int)
    expected += " in [" + std::to_string(*b.min_int) + ", " + std::to_string(*b.max_int) + "]";
  else if (b.min_int)
    expected += " >= " + std::to_string(*b.min_int);
  else
    expected += " <= " + std::to_string(*b.max_int);
  v.fail(key, "expected " + expected + ", got " + std::to_string(value));
}

void check_float(const Validation& v, const char* key, const Bounds& b, double value, const char* noun) {
  if (!b.range || in_range(*b.range, value)) return;
  std::ostringstream os;
  os << "expected " << describe_range(*b.range, noun) << ", got " << value;
  v.fail(key, os.str());
}

void check_string(const Validation& v, const char* key, const Bounds& b, const std::string& value) {
  if (value.empty() && b.if_empty) v.fail(key, b.if_empty);
  if (!b.one_of.empty() && std::find(b.one_of.begin(), b.one_of.end(), value) == b.one_of.end())
    v.fail(key, "unknown value '" + value + "'" + did_you_mean(value, b.one_of) + " (expected one of " +
                    join(b.one_of, ", ") + ")");
}

/// The bounds of `spec` on its value in `config`.
void check_bounds(const Validation& v, const KeySpec& spec, Config& config) {
  const Bounds& b = spec.bounds;
  std::visit(
      [&](auto* field) {
        using T = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          check_int(v, spec.key, b, *field);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          for (int64_t item : *field) check_int(v, spec.key, b, item);
        } else if constexpr (std::is_same_v<T, double>) {
          check_float(v, spec.key, b, *field, "a float");
        } else if constexpr (std::is_same_v<T, std::array<double, 2>>) {
          for (double item : *field) check_float(v, spec.key, b, item, "floats");
        } else if constexpr (std::is_same_v<T, std::string>) {
          check_string(v, spec.key, b, *field);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          for (const std::string& item : *field) check_string(v, spec.key, b, item);
        } else if constexpr (std::is_same_v<T, FloatMap>) {
          for (const auto& [pattern, mult] : *field) {
            check_string(v, spec.key, b, pattern);
            check_float(v, spec.key, b, mult, "multipliers");
          }
        }
      },
      spec.field(config));
}

}  // namespace

void validate(Validation& v) {
  for (const KeySpec& spec : schema()) {
    check_bounds(v, spec, v.config());
    if (spec.rule) spec.rule(v);
  }
}

}  // namespace lat
