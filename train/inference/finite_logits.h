// Finite weights can still overflow in the forward: a weight of 3e38 times an activation
// above 1 is inf, and inf - inf is nan. Logits that are not all finite mean nothing to sample
// from (the sampler would pick an arbitrary token, or none printable) or to score, so
// inference stops with an error instead of printing them.
#pragma once
#include <cstdint>
#include <string>

#include "lat/error.h"

namespace lat {

/// Non-finite logits, found where the model file is not known (generate_tokens); the
/// command that knows it names it (forward_overflow_message).
class ForwardOverflow : public Error {
 public:
  using Error::Error;
};

/// Throws ForwardOverflow ("the forward overflowed: the logits of position `position` hold
/// inf or nan") when any of the `vocab` floats at `logits` is not finite.
void check_finite_logits(const float* logits, int64_t vocab, int64_t position);

/// The one-line error of `command` ("generate") for `model_path` whose forward overflowed:
/// "generate: 'PATH': the forward overflowed: ... (a diverged or damaged checkpoint)".
std::string forward_overflow_message(const std::string& command, const std::string& model_path,
                                     const ForwardOverflow& e);

}  // namespace lat
