// The products of several weights with one input as one tape node: the input projections of
// a layer (q, k, v, gates) all read the same normalized x.
//
// Letters: M rows of x, K = in_features, N_i = out_features of weight i.
#pragma once
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// y_i = x W_i^T for x [M, K] and each weight W_i [N_i, K] (torch.nn.Linear's layout) -> the
/// list of y_i [M, N_i]; f32 (in the thread's compute precision, lat/precision.h) or f64, all
/// on one device. One tape node: dx = sum_i dy_i W_i accumulates in one buffer and
/// dW_i = dy_i^T x. On the CPU each product writes its own output (no concatenation or split
/// copies), and in bf16 x, each W_i and each dy_i are rounded once for all the products that
/// read them. On CUDA it is the composition split(matmul(x, concat(W)^T)) of the
/// device-generic ops. Each y_i and dW_i is the same product as matmul's, and dx adds the
/// products last weight first, as the tape adds the gradients of separate matmuls recorded
/// in list order: on the CPU the results are those of separate matmuls, bit for bit. Throws
/// lat::Error for an empty list, x not 2-D, a weight not [N_i, K], or mixed dtypes or
/// devices.
std::vector<Tensor> shared_input_linear(const Tensor& x, const std::vector<Tensor>& weights);

}  // namespace lat
