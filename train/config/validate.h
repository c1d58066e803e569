// The one validator of a loaded config: every key's bounds from its schema row, each followed
// by the row's rule (checks against earlier keys, derived defaults), in schema order, so the
// first problem in DESIGN.md's order is the one reported. Internal to train/config/.
#pragma once
#include "train/config/validation.h"

namespace lat {

/// Checks every value of `v.config()` and resolves the derived defaults (model.head_dim,
/// model.attn.n_kv_heads, train.out_dir). Throws ConfigError at the first problem.
void validate(Validation& v);

}  // namespace lat
