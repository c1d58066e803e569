// lat::matmul: batched matrix product with transpose flags and broadcast batch dimensions.
// f32 goes through the cached oneDNN primitive (lat::cpu::gemm_batched), f64 through the
// reference loop (gemm_batched_f64); on CUDA both through cuBLAS (autograd/cuda/blas.h).
// f32 products take the thread's compute precision (lat/precision.h): in bf16 the inputs
// are rounded to bf16 and accumulated in fp32, forward and both backward products alike. On
// the CPU each input is rounded once: the tape node keeps the forward's rounded copies of a
// and b for the backward products (and not the f32 tensors, which it no longer reads), and
// the incoming gradient is rounded once for both.
// Shapes: op(a) is [..., M, K], op(b) is [..., K, N].
#include <algorithm>
#include <memory>
#include <vector>

#include "autograd/cpu/bf16.h"
#include "autograd/cpu/gemm.h"
#ifdef LAT_WITH_CUDA
#include "autograd/cuda/blas.h"
#include "autograd/cuda/elementwise.h"
#endif
#include "lat/ops.h"
#include "lat/precision.h"
#include "lat/tape.h"

namespace lat {
namespace {

/// One strided-batched product C[i] = op(A[i]) op(B[i]), offsets in elements.
struct GemmCall {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  int64_t offset_a = 0, lda = 0, stride_a = 0;
  bool trans_a = false;
  int64_t offset_b = 0, ldb = 0, stride_b = 0;
  bool trans_b = false;
  int64_t offset_c = 0, ldc = 0, stride_c = 0;
  Precision precision = Precision::fp32;  // bf16 only for f32 operands
};

/// A CPU f32 tensor's elements rounded to bf16, in its own row-major layout; shared by the
/// products (and the tape node) that read it.
using Bf16Copy = std::shared_ptr<const uint16_t[]>;

Bf16Copy round_to_bf16(const Tensor& t) {
  std::shared_ptr<uint16_t[]> bits(new uint16_t[static_cast<size_t>(t.numel())]);
  cpu::float_to_bf16(t.data<float>(), bits.get(), t.numel());
  return bits;
}

/// The rounded operands of a bf16 product on the CPU: both set, or both null (an fp32 or
/// f64 product, or CUDA, whose bf16 products round inside the cuBLAS call).
struct Bf16Operands {
  Bf16Copy a, b;
};

/// One operand of a product: its shape, dtype and device, and its elements, `values`, or
/// none when the product reads only the operand's rounded copy (a bf16 product on the CPU).
/// The backward keeps its operands so, and not the f32 activation a bf16 product never
/// reads again.
struct Operand {
  Shape shape;
  DType dtype = DType::f32;
  Device device;
  Tensor values;  // undefined: only the rounded copy is read

  /// `t` with its elements, or (when `rounded`) without them.
  static Operand of(const Tensor& t, const Bf16Copy& rounded = nullptr) {
    return {t.shape(), t.dtype(), t.device(), rounded ? Tensor() : t.detach()};
  }
  int64_t size(int64_t d) const { return shape[static_cast<size_t>(d < 0 ? d + dim() : d)]; }
  int64_t dim() const { return static_cast<int64_t>(shape.size()); }
  /// The operand as [rows, its last dimension] (row-major: the same elements in order).
  Operand rows() const {
    const Shape flat{shape_numel(shape) / size(-1), size(-1)};
    return {flat, dtype, device, values.defined() ? values.reshape(flat) : Tensor()};
  }
  /// Its f32 elements, or null when only the rounded copy is kept.
  const float* f32() const { return values.defined() ? values.data<float>() : nullptr; }
};

void run_gemm(const GemmCall& c, const Operand& a, const Operand& b, Tensor& out, const Bf16Operands& rounded) {
#ifdef LAT_WITH_CUDA
  if (out.device().is_cuda()) {
    const int device = out.device().index;
    if (c.K == 0) {  // an empty sum: every product is 0
      cuda::fill(out.raw_data(), out.dtype(), out.numel(), 0.0, device);
      return;
    }
    const size_t esize = dtype_size(out.dtype());
    cuda::GemmArgs g;
    g.dtype = out.dtype();
    g.device = device;
    g.batch = c.batch;
    g.M = c.M;
    g.N = c.N;
    g.K = c.K;
    g.A = static_cast<const char*>(a.values.raw_data()) + c.offset_a * esize;
    g.lda = c.lda;
    g.stride_a = c.stride_a;
    g.trans_a = c.trans_a;
    g.B = static_cast<const char*>(b.values.raw_data()) + c.offset_b * esize;
    g.ldb = c.ldb;
    g.stride_b = c.stride_b;
    g.trans_b = c.trans_b;
    g.C = static_cast<char*>(out.raw_data()) + c.offset_c * esize;
    g.ldc = c.ldc;
    g.stride_c = c.stride_c;
    g.precision = c.precision;
    cuda::gemm_batched(g);
    return;
  }
#endif
  if (out.dtype() == DType::f32) {
    cpu::GemmBatch g;
    g.batch = c.batch;
    g.M = c.M;
    g.N = c.N;
    g.K = c.K;
    g.A = a.f32() != nullptr ? a.f32() + c.offset_a : nullptr;
    g.lda = c.lda;
    g.stride_a = c.stride_a;
    g.trans_a = c.trans_a;
    g.B = b.f32() != nullptr ? b.f32() + c.offset_b : nullptr;
    g.ldb = c.ldb;
    g.stride_b = c.stride_b;
    g.trans_b = c.trans_b;
    g.C = out.data<float>() + c.offset_c;
    g.ldc = c.ldc;
    g.stride_c = c.stride_c;
    if (rounded.a)
      cpu::gemm_batched_bf16(g, rounded.a.get() + c.offset_a, rounded.b.get() + c.offset_b);
    else
      cpu::gemm_batched(g);
  } else {
    cpu::gemm_batched_f64(c.batch, c.M, c.N, c.K, a.values.data<double>() + c.offset_a, c.lda, c.stride_a,
                          c.trans_a, b.values.data<double>() + c.offset_b, c.ldb, c.stride_b, c.trans_b,
                          out.data<double>() + c.offset_c, c.ldc, c.stride_c, 1.0, 0.0);
  }
}

Shape batch_dims(const Shape& shape) { return Shape(shape.begin(), shape.end() - 2); }

/// Row-major strides of `batch` seen from `out_batch` (right-aligned): 0 where the
/// dimension is missing or broadcast (size 1).
std::vector<int64_t> broadcast_strides(const Shape& batch, const Shape& out_batch, int64_t matrix_size) {
  std::vector<int64_t> strides(out_batch.size(), 0);
  int64_t stride = matrix_size;
  int64_t shift = static_cast<int64_t>(out_batch.size() - batch.size());
  for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
    if (batch[d] != 1) strides[d + shift] = stride;
    stride *= batch[d];
  }
  return strides;
}

void check_operand(const Tensor& t, const char* arg) {
  LAT_CHECK(t.defined(), "matmul: " << arg << ": undefined tensor");
  LAT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64,
            "matmul: " << arg << ": expected f32 or f64, got " << dtype_name(t.dtype()));
#ifndef LAT_WITH_CUDA
  LAT_CHECK(t.device().is_cpu(), "matmul: " << arg << ": expected a cpu tensor, got " << t.device().str());
#endif
  LAT_CHECK(t.dim() >= 2, "matmul: " << arg << ": expected at least 2 dims, got shape " << shape_str(t.shape()));
}

/// The forward product without recording; a bf16 product on the CPU reads `rounded`.
Tensor matmul_forward(const Operand& a, const Operand& b, bool transpose_a, bool transpose_b,
                      const Bf16Operands& rounded = {}) {
  LAT_CHECK(a.dtype == b.dtype, "matmul: b: expected dtype " << dtype_name(a.dtype) << " like a, got "
                                                             << dtype_name(b.dtype));
  LAT_CHECK(a.device == b.device, "matmul: b: expected device " << a.device.str() << " like a, got "
                                                               << b.device.str());
  const int64_t a_rows = a.size(-2), a_cols = a.size(-1), b_rows = b.size(-2), b_cols = b.size(-1);
  const int64_t M = transpose_a ? a_cols : a_rows, K = transpose_a ? a_rows : a_cols;
  const int64_t K_b = transpose_b ? b_cols : b_rows, N = transpose_b ? b_rows : b_cols;
  LAT_CHECK(K == K_b, "matmul: b: expected shape " << (transpose_b ? "[..., N, " : "[..., ") << K
                                                   << (transpose_b ? "]" : ", N]") << " to match a "
                                                   << shape_str(a.shape) << (transpose_a ? " (transposed)" : "")
                                                   << ", got " << shape_str(b.shape)
                                                   << (transpose_b ? " (transposed)" : ""));

  const Shape a_batch = batch_dims(a.shape), b_batch = batch_dims(b.shape);
  Shape out_batch(std::max(a_batch.size(), b_batch.size()));
  for (size_t i = 0; i < out_batch.size(); ++i) {
    size_t from_end = out_batch.size() - i;
    int64_t da = from_end <= a_batch.size() ? a_batch[a_batch.size() - from_end] : 1;
    int64_t db = from_end <= b_batch.size() ? b_batch[b_batch.size() - from_end] : 1;
    LAT_CHECK(da == db || da == 1 || db == 1, "matmul: batch dimensions of a " << shape_str(a.shape) << " and b "
                                                                               << shape_str(b.shape)
                                                                               << " do not broadcast");
    out_batch[i] = da == 1 ? db : da;
  }
  Shape out_shape = out_batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape, a.dtype, a.device);
  if (out.numel() == 0) return out;

  const int64_t total = shape_numel(out_batch);
  const int64_t a_count = shape_numel(a_batch), b_count = shape_numel(b_batch);
  GemmCall c;
  c.M = M;
  c.N = N;
  c.K = K;
  c.lda = a_cols;
  c.trans_a = transpose_a;
  c.ldb = b_cols;
  c.trans_b = transpose_b;
  c.ldc = N;
  // CUDA rounds inside its product; the CPU reads the copies rounded once by the caller.
  if (a.device.is_cuda() && a.dtype == DType::f32 && bf16_compute(a.device)) c.precision = Precision::bf16;
  if (b_count == 1 && !transpose_a) {
    // One b shared by every batch item and a's rows contiguous: a single [total*M, K] product.
    c.M = total * M;
    c.stride_c = total * M * N;  // a real stride gives oneDNN a plain layout even for batch 1
    run_gemm(c, a, b, out, rounded);
  } else if (b_count == 1 || (a_count == total && b_count == total)) {
    c.batch = total;
    c.stride_a = M * K;
    c.stride_b = b_count == 1 ? 0 : K * N;
    c.stride_c = M * N;
    run_gemm(c, a, b, out, rounded);
  } else {
    // General broadcasting: one product per batch item on the same cached primitive.
    std::vector<int64_t> sa = broadcast_strides(a_batch, out_batch, M * K);
    std::vector<int64_t> sb = broadcast_strides(b_batch, out_batch, K * N);
    for (int64_t i = 0; i < total; ++i) {
      int64_t rest = i, offset_a = 0, offset_b = 0;
      for (int64_t d = static_cast<int64_t>(out_batch.size()) - 1; d >= 0; --d) {
        int64_t index = rest % out_batch[d];
        rest /= out_batch[d];
        offset_a += index * sa[d];
        offset_b += index * sb[d];
      }
      c.offset_a = offset_a;
      c.offset_b = offset_b;
      c.offset_c = i * M * N;
      c.stride_c = M * N;
      run_gemm(c, a, b, out, rounded);
    }
  }
  return out;
}

/// Reduces a full-batch gradient to the operand's (possibly broadcast) shape.
Tensor reduce_to(const Tensor& grad, const Shape& shape) {
  return grad.shape() == shape ? grad : sum_to(grad, shape);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  // Checked before rounding reads a's and b's elements.
  check_operand(a, "a");
  check_operand(b, "b");
  const bool round_on_cpu = a.dtype() == DType::f32 && b.dtype() == DType::f32 && a.device().is_cpu() &&
                            b.device().is_cpu() && bf16_compute(a.device());
  Bf16Operands rounded;
  if (round_on_cpu) rounded = {round_to_bf16(a), round_to_bf16(b)};
  Tensor out = matmul_forward(Operand::of(a), Operand::of(b), transpose_a, transpose_b, rounded);
  if (needs_grad({&a, &b})) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    const Operand sa = Operand::of(a, rounded.a), sb = Operand::of(b, rounded.b);
    const Precision precision = compute_precision();
    record("matmul", {a, b}, {out},
           [sa, sb, rounded, transpose_a, transpose_b, need_a, need_b, precision](const std::vector<Tensor>& grads) {
             const PrecisionGuard forward_precision(precision);
             const Tensor& g = grads[0];  // [..., M, N]
             const Bf16Copy rg = rounded.a ? round_to_bf16(g) : nullptr;
             // The product x y with x, y each one of sa, sb, g: their rounded copies when the
             // forward product was bf16 on the CPU.
             const Operand og = Operand::of(g);
             auto product = [&](const Operand& x, const Bf16Copy& rx, const Operand& y, const Bf16Copy& ry, bool tx,
                                bool ty) {
               return matmul_forward(x, y, tx, ty, rounded.a ? Bf16Operands{rx, ry} : Bf16Operands{});
             };
             Tensor da, db;
             // d op(a) = g op(b)^T and d op(b) = op(a)^T g, transposed back when stored transposed.
             if (need_a) {
               da = transpose_a ? product(sb, rounded.b, og, rg, transpose_b, true)
                                : product(og, rg, sb, rounded.b, false, !transpose_b);
               da = reduce_to(da, sa.shape);
             }
             if (need_b) {
               if (shape_numel(batch_dims(sb.shape)) == 1 && !transpose_a) {
                 // Shared b: sum over the batch inside one product of the flattened rows (the
                 // rounded copies have the same row-major layout).
                 const Operand a2 = sa.rows(), g2 = og.rows();
                 db = transpose_b ? product(g2, rg, a2, rounded.a, true, false)
                                  : product(a2, rounded.a, g2, rg, true, false);
                 db = db.reshape(sb.shape);
               } else {
                 db = transpose_b ? product(og, rg, sa, rounded.a, true, transpose_a)
                                  : product(sa, rounded.a, og, rg, !transpose_a, false);
                 db = reduce_to(db, sb.shape);
               }
             }
             return std::vector<Tensor>{da, db};
           });
  }
  return out;
}

}  // namespace lat
