// The check every model reader makes after the shapes: a NaN or inf weight passes every shape
// check and shows only as garbage text or a NaN loss.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// Throws lat::Error "load_model_weights: '<path>': tensor '<name>' [shape] holds nan at
/// element i: expected finite weights" for the first tensor of `tensors` (f32, CPU) holding a
/// NaN or inf, under the name `tensors` gives it.
void check_finite_weights(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path);

}  // namespace lat
