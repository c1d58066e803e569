// "Did you mean" for config keys and values: the nearest candidate by edit distance.
#pragma once
#include <string>
#include <vector>

namespace lat {

/// ", did you mean 'x'?" for the candidate nearest to `name`, or "" when none is near. A
/// dotted key also matches by its last component, so `lr` at the top level suggests `train.lr`.
std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace lat
