// Global-norm gradient clipping (Pascanu et al. 2013, sec. 3.2), PyTorch's
// clip_grad_norm_ conventions.
#pragma once
#include <vector>

#include "optim/optimizer.h"

namespace lat {

struct ClipResult {
  double norm = 0.0;    ///< global L2 norm of all gradients before clipping (may be inf/NaN)
  bool finite = true;   ///< false: the caller must skip the optimizer step (warn and count)
  bool clipped = false; ///< true when the gradients are to be (clip_factor) or were (clip_grad_norm) scaled down
  double factor = 1.0;  ///< the gradients' scale: max_norm / (norm + 1e-6) when clipped, else 1
};

/// The L2 norm over every defined gradient of `params`, accumulated in double in fixed
/// chunks, so the value does not depend on the thread count. Parameters without a
/// gradient count as zero. f32 or f64, on the CPU (one parallel region for all of them) or
/// CUDA. Throws lat::Error naming the parameter on another device.
double grad_norm(const std::vector<NamedParameter>& params);

/// Computes the global norm; when it is finite and max_norm > 0 and norm > max_norm,
/// multiplies every gradient by max_norm / (norm + 1e-6) (as PyTorch). A non-finite norm
/// leaves the gradients untouched and returns finite = false. max_norm 0 = off (the norm
/// is still reported). Throws lat::Error when max_norm < 0.
ClipResult clip_grad_norm(const std::vector<NamedParameter>& params, double max_norm);

/// What clip_grad_norm would do, without touching the gradients: pass `factor` to
/// Optimizer::step as its grad_scale, which then gives the same bits without a pass over
/// the gradients. Throws lat::Error when max_norm < 0.
ClipResult clip_factor(const std::vector<NamedParameter>& params, double max_norm);

}  // namespace lat
