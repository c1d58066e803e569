// Finite weights (finite_weights.h).
#include "train/files/finite_weights.h"

#include <cmath>

#include "lat/error.h"

namespace lat {

void check_finite_weights(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path) {
  for (const auto& [name, tensor] : tensors) {
    const float* x = tensor.data<float>();
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      if (std::isfinite(x[i])) continue;
      const std::string value = std::isnan(x[i]) ? "nan" : x[i] > 0 ? "inf" : "-inf";
      throw Error("load_model_weights: '" + path + "': tensor '" + name + "' " + shape_str(tensor.shape()) + " holds " +
                  value + " at element " + std::to_string(i) + ": expected finite weights");
    }
  }
}

}  // namespace lat
