// Non-finite logits (finite_logits.h).
#include "train/inference/finite_logits.h"

#include <cmath>

namespace lat {

void check_finite_logits(const float* logits, int64_t vocab, int64_t position) {
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isfinite(logits[i]))
      throw ForwardOverflow("the forward overflowed: the logits of position " + std::to_string(position) + " hold " +
                            (std::isnan(logits[i]) ? "nan" : "inf") + " (token id " + std::to_string(i) + ")");
}

std::string forward_overflow_message(const std::string& command, const std::string& model_path,
                                     const ForwardOverflow& e) {
  return command + ": '" + model_path + "': " + e.what() + " (a diverged or damaged checkpoint)";
}

}  // namespace lat
