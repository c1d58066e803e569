// Text for messages and logs: lists joined with a separator and numbers in the forms the
// logs use (the log lines are part of what a run prints, so their forms are fixed here once).
#pragma once
#include <string>
#include <vector>

namespace lat {

/// The items with `separator` between them: join({"a", "b"}, ", ") = "a, b".
std::string join(const std::vector<std::string>& items, const std::string& separator);

/// `value` with `digits` digits after the point: format_fixed(0.03412, 3) = "0.034".
std::string format_fixed(double value, int digits);

/// `value` with up to 6 significant digits, trailing zeros dropped, exponent when needed (as
/// printf's %g): 0.003 -> "0.003", 1e-05 -> "1e-05". Learning rates in the logs.
std::string format_significant(double value);

}  // namespace lat
