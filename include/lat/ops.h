// Differentiable core ops. Every op checks shapes, dtypes and devices and throws
// lat::Error naming the op, the argument and expected versus actual. Binary ops follow
// NumPy broadcasting. Floating ops accept f32 and f64 (both operands the same dtype).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "lat/tensor.h"

namespace lat {

// ---- elementwise, binary (NumPy broadcasting) ----------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
/// Tensor-scalar forms: a + s, a - s, s - a, a * s, a / s, s / a.
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor rsub(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor rdiv(const Tensor& a, double s);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(const Tensor& a, double s);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(const Tensor& a, double s);
Tensor operator/(double s, const Tensor& a);
Tensor operator-(const Tensor& a);

/// Broadcast result shape of a and b; throws lat::Error naming `op` when incompatible.
Shape broadcast_shape(const Shape& a, const Shape& b, const char* op);
/// Sums `t` down to `shape` (the inverse of broadcasting), for backward passes.
Tensor sum_to(const Tensor& t, const Shape& shape);

// ---- elementwise, unary -----------------------------------------------------------
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
/// a^p for a scalar exponent p.
Tensor pow(const Tensor& a, double p);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
/// x * sigmoid(x).
Tensor silu(const Tensor& a);
/// silu(gate) * up, the gated linear unit of SwiGLU (Shazeer 2020, "GLU Variants Improve
/// Transformer", eq. 6), as one fused node: one pass forward, one pass for both gradients.
/// gate and up: same shape and dtype (f32/f64), else throws lat::Error naming both shapes.
Tensor swiglu(const Tensor& gate, const Tensor& up);
/// Tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016).
Tensor gelu(const Tensor& a);
/// log(1 + exp(x)), stable for large |x|.
Tensor softplus(const Tensor& a);
/// x for x > 0, alpha (exp(x) - 1) otherwise.
Tensor elu(const Tensor& a, double alpha = 1.0);
Tensor relu(const Tensor& a);

// ---- reductions -------------------------------------------------------------------
/// Sum of all elements, shape {}.
Tensor sum(const Tensor& a);
/// Sum over `axis` (negative counts from the end); keepdim keeps it as size 1.
Tensor sum(const Tensor& a, int64_t axis, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t axis, bool keepdim = false);
/// Maximum over `axis`; the gradient goes to the first maximal element.
Tensor max(const Tensor& a, int64_t axis, bool keepdim = false);

// ---- linear algebra ---------------------------------------------------------------
/// a: [..., M, K] (or [..., K, M] with transpose_a), b: [..., K, N] (or [..., N, K] with
/// transpose_b) -> [..., M, N]. Leading (batch) dimensions broadcast; a 2-D b is shared by
/// every batch. f32 runs on oneDNN's matmul primitive (cached by shape); f64 on a plain loop.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

// ---- shape ops (copying) ----------------------------------------------------------
/// Swaps two dimensions (a copy).
Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1);
/// Reorders dimensions: result dim i is a's dim perm[i] (a copy).
Tensor permute(const Tensor& a, const std::vector<int64_t>& perm);
/// Concatenates along `axis`; all other dimensions must match.
Tensor concat(const std::vector<Tensor>& tensors, int64_t axis);
/// Splits along `axis` into pieces of the given sizes (they must sum to the dimension).
std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t axis);
/// Elements [start, end) along `axis` (a copy).
Tensor slice(const Tensor& a, int64_t axis, int64_t start, int64_t end);

// ---- neural-network ops -----------------------------------------------------------
/// weight: [num_embeddings, dim], ids: i64 of any shape -> [*ids.shape, dim]. Backward
/// scatter-adds into weight. Throws when an id is out of range (names the id and position).
Tensor embedding(const Tensor& weight, const Tensor& ids);
/// Fused RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich
/// 2019). x: [..., D], weight: [D]. One tape node.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
/// Softmax over the last axis (max-subtracted). One tape node.
Tensor softmax(const Tensor& x);
/// Log-softmax over the last axis (log-sum-exp). One tape node.
Tensor log_softmax(const Tensor& x);
/// Mean cross-entropy of logits [N, vocab] against i64 targets [N]; targets equal to
/// ignore_index are skipped (the mean is over the others; 0 when none). Stable for logits
/// of magnitude 1e4. One tape node; backward is (softmax - onehot) / count.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

// ---- threads ----------------------------------------------------------------------
/// Threads used by CPU kernels (OpenMP and oneDNN); n <= 0 means all cores.
void set_num_threads(int n);
int get_num_threads();

}  // namespace lat
