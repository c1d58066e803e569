// shared_input_linear: one GEMM per weight on the CPU, sharing x (and its bf16 copy) in the
// forward and one dx buffer in the backward; the concat/matmul/split composition on CUDA.
//
// Why not one GEMM over the concatenated weights on the CPU as well: at the model's sizes
// (M = 1024 rows, K = 128, N_i = 128) oneDNN already runs each product near its peak, and
// the concatenated form measured no faster, its gain eaten by the copies that split its
// output and concatenate the output gradients. What separate Linears cost beyond the
// products is x's bf16 rounding once per product and one dx tensor plus one add per
// product in the backward; this op keeps only the products.
#include "layers/fused/shared_input_linear.h"

#include <string>

#include "autograd/cpu/bf16.h"
#include "autograd/cpu/gemm.h"
#include "lat/ops.h"
#include "lat/precision.h"
#include "lat/tape.h"

namespace lat {
namespace {

/// A CPU matrix operand [rows, cols]: its elements (f32 or f64; null for a bf16 operand
/// kept only as its rounded copy) and, in a bf16 product, its rounded copy (null otherwise).
struct Operand {
  int64_t rows, cols;
  const void* values;
  const uint16_t* rounded;
};

/// `t` [rows, cols] with its elements, and `rounded` in a bf16 product.
Operand operand(const Tensor& t, const uint16_t* rounded) {
  const void* values = t.dtype() == DType::f64 ? static_cast<const void*>(t.data<double>()) : t.data<float>();
  return {t.size(0), t.size(1), values, rounded};
}

/// c = op(a) op(b) (+ c when accumulate) for row-major CPU matrices of f32 (rounded copies
/// used when given) or f64; op(a) is [M, K], op(b) is [K, N], c is [M, N].
enum class Into { overwrite, accumulate };
void product(const Operand& a, bool trans_a, const Operand& b, bool trans_b, Tensor& c, Into into) {
  const int64_t M = c.size(0), N = c.size(1), K = trans_a ? a.rows : a.cols;
  const int64_t lda = a.cols, ldb = b.cols;
  const double beta = into == Into::accumulate ? 1.0 : 0.0;
  if (c.dtype() == DType::f64) {
    cpu::gemm_batched_f64(1, M, N, K, static_cast<const double*>(a.values), lda, 0, trans_a,
                          static_cast<const double*>(b.values), ldb, 0, trans_b, c.data<double>(), N, 0, 1.0, beta);
    return;
  }
  cpu::GemmBatch g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = static_cast<const float*>(a.values);
  g.lda = lda;
  g.trans_a = trans_a;
  g.B = static_cast<const float*>(b.values);
  g.ldb = ldb;
  g.trans_b = trans_b;
  g.C = c.data<float>();
  g.ldc = N;
  g.stride_c = M * N;  // a real stride gives oneDNN a plain layout even for batch 1
  g.beta = static_cast<float>(beta);
  if (a.rounded != nullptr)
    cpu::gemm_batched_bf16(g, a.rounded, b.rounded);
  else
    cpu::gemm_batched(g);
}

void check_args(const Tensor& x, const std::vector<Tensor>& weights) {
  const char* op = "shared_input_linear";
  LAT_CHECK(!weights.empty(), op << ": weights: expected at least one weight, got none");
  LAT_CHECK(x.defined() && x.dim() == 2,
            op << ": x: expected shape [M, K], got " << (x.defined() ? shape_str(x.shape()) : "an undefined tensor"));
  LAT_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64,
            op << ": x: expected f32 or f64, got " << dtype_name(x.dtype()));
  for (size_t i = 0; i < weights.size(); ++i) {
    const Tensor& w = weights[i];
    const std::string arg = "weights[" + std::to_string(i) + "]";
    LAT_CHECK(w.defined() && w.dim() == 2 && w.size(1) == x.size(1),
              op << ": " << arg << ": expected shape [N, " << x.size(1) << "], got "
                 << (w.defined() ? shape_str(w.shape()) : "an undefined tensor"));
    LAT_CHECK(w.dtype() == x.dtype(),
              op << ": " << arg << ": expected dtype " << dtype_name(x.dtype()) << ", got " << dtype_name(w.dtype()));
    LAT_CHECK(w.device() == x.device(),
              op << ": " << arg << ": expected device " << x.device().str() << ", got " << w.device().str());
  }
}

}  // namespace

std::vector<Tensor> shared_input_linear(const Tensor& x, const std::vector<Tensor>& weights) {
  check_args(x, weights);
  if (!x.device().is_cpu()) {
    std::vector<int64_t> widths;
    for (const Tensor& w : weights) widths.push_back(w.size(0));
    constexpr bool kTransposeX = false, kTransposeWeights = true;
    return split(matmul(x, concat(weights, 0), kTransposeX, kTransposeWeights), widths, 1);
  }
  const int64_t M = x.size(0), n = static_cast<int64_t>(weights.size());
  // In bf16 every operand is rounded once, here or (the output gradients) in the backward.
  const bool bf16 = x.dtype() == DType::f32 && bf16_compute(x.device());
  const cpu::Bf16Copy rx = bf16 ? cpu::bf16_copy(x.data<float>(), x.numel()) : nullptr;
  std::vector<cpu::Bf16Copy> rw(weights.size());
  std::vector<Tensor> outs;
  for (int64_t i = 0; i < n; ++i) {
    if (bf16) rw[i] = cpu::bf16_copy(weights[i].data<float>(), weights[i].numel());
    Tensor y = Tensor::empty({M, weights[i].size(0)}, x.dtype());
    constexpr bool kTransposeX = false, kTransposeW = true;
    if (M > 0) product(operand(x, rx.get()), kTransposeX, operand(weights[i], rw[i].get()), kTransposeW, y, Into::overwrite);
    outs.push_back(y);
  }
  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  if (needs_grad(inputs)) {
    std::vector<Tensor> saved_w;
    std::vector<bool> need_w;
    for (const Tensor& w : weights) {
      saved_w.push_back(w.detach());
      need_w.push_back(w.requires_grad());
    }
    // In bf16 the products read x's rounded copy only: the node keeps that, not x.
    const Tensor sx = bf16 ? Tensor() : x.detach();
    record(
        "shared_input_linear", inputs, outs,
        [sx, x_shape = x.shape(), dtype = x.dtype(), saved_w, need_w, rx, rw, bf16,
         need_x = x.requires_grad()](const std::vector<Tensor>& grads) {
          const int64_t M = x_shape[0];
          const Operand ox = bf16 ? Operand{x_shape[0], x_shape[1], nullptr, rx.get()} : operand(sx, nullptr);
          std::vector<Tensor> d(saved_w.size() + 1);
          if (need_x) d[0] = Tensor::empty(x_shape, dtype);
          // Last weight first: the order in which the tape adds the gradients of separate
          // products recorded in list order, so that dx keeps their bits.
          for (size_t i = saved_w.size(); i-- > 0;) {
            const Tensor& g = grads[i];
            const cpu::Bf16Copy rg = bf16 ? cpu::bf16_copy(g.data<float>(), g.numel()) : nullptr;
            constexpr bool kPlain = false, kTransposed = true;
            // dx (+)= dy_i W_i: [M, N_i] x [N_i, K].
            if (need_x && M > 0)
              product(operand(g, rg.get()), kPlain, operand(saved_w[i], rw[i].get()), kPlain, d[0],
                      i + 1 == saved_w.size() ? Into::overwrite : Into::accumulate);
            // dW_i = dy_i^T x: [N_i, M] x [M, K] (zeros for M = 0, an empty sum).
            if (need_w[i]) {
              d[i + 1] = Tensor::empty(saved_w[i].shape(), dtype);
              product(operand(g, rg.get()), kTransposed, ox, kPlain, d[i + 1], Into::overwrite);
            }
          }
          return d;
        });
  }
  return outs;
}

}  // namespace lat
