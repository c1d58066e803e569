// Which parameters get weight decay, and the groups as a log line.
#pragma once
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace lat {

/// True for matmul weights: a 2-D tensor named `*.weight` that is not a norm gain, an
/// embedding table or a convolution filter. So: no decay for norms (any name containing
/// "norm"), biases, 1-D and >2-D tensors, `embeddings.weight`, short-convolution filters
/// (names containing "conv"), `A_log`, `dt_bias`. An untied `lm_head.weight` IS decayed:
/// it is the output projection [vocab, d_model], a matmul weight like the others (as in
/// nanoGPT and Llama); when embeddings are tied it does not exist and the shared table is
/// `embeddings.weight`, which is not decayed.
bool applies_weight_decay(const std::string& name, const Tensor& t);

/// Two lines: "decay (weight_decay W): N tensors, P parameters: name, name, ..." and
/// "no decay: N tensors, P parameters: name, ...". `decay[i]` tells whether params[i] decays.
std::string describe_weight_decay_groups(const std::vector<NamedParameter>& params,
                                         const std::vector<bool>& decay, double weight_decay);

}  // namespace lat
