// Fused neural-network ops over the last axis: RMSNorm, softmax, log-softmax and
// cross-entropy. Each validates its inputs, runs a kernel of autograd/cpu/nn_cpu.h (CUDA:
// autograd/cuda/nn.h) and records one tape node that keeps only what its backward needs.
#include <vector>

#include "autograd/cpu/nn_cpu.h"
#include "lat/ops.h"
#include "lat/tape.h"
#ifdef LAT_WITH_CUDA
#include "autograd/cuda/nn.h"
#endif

namespace lat {
namespace {

void check_float_rows(const Tensor& t, const char* op, const char* arg) {
  LAT_CHECK(t.defined(), op << ": " << arg << ": undefined tensor");
  LAT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64,
            op << ": " << arg << ": expected f32 or f64, got " << dtype_name(t.dtype()));
#ifndef LAT_WITH_CUDA
  LAT_CHECK(t.device().is_cpu(), op << ": " << arg << ": expected a cpu tensor, got " << t.device().str());
#endif
  LAT_CHECK(t.dim() >= 1, op << ": " << arg << ": expected at least 1 dim, got shape " << shape_str(t.shape()));
}

/// Rows and row length of a tensor normalized over its last axis. Callers copy the fields into
/// plain variables: the backward lambdas capture them, and clang before 16 cannot capture a
/// structured binding.
struct Rows {
  int64_t rows, dim;
};
Rows rows_of(const Tensor& t) {
  const int64_t dim = t.size(-1);
  return {dim == 0 ? 0 : t.numel() / dim, dim};
}

#ifdef LAT_WITH_CUDA
cuda::RowsArgs cuda_rows(const Tensor& t, const Rows& r) { return {t.dtype(), r.rows, r.dim, t.device().index}; }
#endif

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_float_rows(x, "rms_norm", "x");
  check_float_rows(weight, "rms_norm", "weight");
  LAT_CHECK(weight.dtype() == x.dtype(), "rms_norm: weight: expected dtype " << dtype_name(x.dtype()) << " like x, got "
                                                                             << dtype_name(weight.dtype()));
  LAT_CHECK(weight.shape() == Shape{x.size(-1)}, "rms_norm: weight: expected shape [" << x.size(-1) << "] for x "
                                                                                     << shape_str(x.shape()) << ", got "
                                                                                     << shape_str(weight.shape()));
  LAT_CHECK(weight.device() == x.device(), "rms_norm: weight: expected device " << x.device().str() << " like x, got "
                                                                               << weight.device().str());
  LAT_CHECK(eps >= 0.0, "rms_norm: eps: expected >= 0, got " << eps);
  const Rows r = rows_of(x);
  const int64_t rows = r.rows, dim = r.dim;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, DType::f64, x.device());
  if (x.device().is_cuda()) {
#ifdef LAT_WITH_CUDA
    cuda::rms_norm_forward(cuda_rows(x, {rows, dim}), x.raw_data(), weight.raw_data(), eps, y.raw_data(),
                           rstd.data<double>());
#endif
  } else if (x.dtype() == DType::f32)
    cpu::rms_norm_forward(x.data<float>(), weight.data<float>(), rows, dim, eps, y.data<float>(), rstd.data<double>());
  else
    cpu::rms_norm_forward(x.data<double>(), weight.data<double>(), rows, dim, eps, y.data<double>(),
                          rstd.data<double>());
  if (needs_grad({&x, &weight})) {
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    Tensor sx = x.detach(), sw = weight.detach();
    record("rms_norm", {x, weight}, {y}, [sx, sw, rstd, need_x, need_w, rows, dim](const std::vector<Tensor>& g) {
      Tensor dx = need_x ? Tensor::empty(sx.shape(), sx.dtype(), sx.device()) : Tensor();
      Tensor dw = need_w ? Tensor::empty(sw.shape(), sw.dtype(), sw.device()) : Tensor();
      if (sx.device().is_cuda()) {
#ifdef LAT_WITH_CUDA
        cuda::rms_norm_backward(cuda_rows(sx, {rows, dim}), sx.raw_data(), sw.raw_data(), rstd.data<double>(),
                                g[0].raw_data(), need_x ? dx.raw_data() : nullptr, need_w ? dw.raw_data() : nullptr);
#endif
      } else if (sx.dtype() == DType::f32)
        cpu::rms_norm_backward(sx.data<float>(), sw.data<float>(), rstd.data<double>(), g[0].data<float>(), rows, dim,
                               need_x ? dx.data<float>() : nullptr, need_w ? dw.data<float>() : nullptr);
      else
        cpu::rms_norm_backward(sx.data<double>(), sw.data<double>(), rstd.data<double>(), g[0].data<double>(), rows,
                               dim, need_x ? dx.data<double>() : nullptr, need_w ? dw.data<double>() : nullptr);
      return std::vector<Tensor>{dx, dw};
    });
  }
  return y;
}

Tensor softmax(const Tensor& x) {
  check_float_rows(x, "softmax", "x");
  const Rows r = rows_of(x);
  const int64_t rows = r.rows, dim = r.dim;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.device().is_cuda()) {
#ifdef LAT_WITH_CUDA
    cuda::softmax_forward(cuda_rows(x, {rows, dim}), x.raw_data(), y.raw_data());
#endif
  } else if (x.dtype() == DType::f32)
    cpu::softmax_forward(x.data<float>(), rows, dim, y.data<float>());
  else
    cpu::softmax_forward(x.data<double>(), rows, dim, y.data<double>());
  if (needs_grad({&x})) {
    Tensor sy = y.detach();
    record("softmax", {x}, {y}, [sy, rows, dim](const std::vector<Tensor>& g) {
      Tensor dx = Tensor::empty(sy.shape(), sy.dtype(), sy.device());
      if (sy.device().is_cuda()) {
#ifdef LAT_WITH_CUDA
        cuda::softmax_backward(cuda_rows(sy, {rows, dim}), sy.raw_data(), g[0].raw_data(), dx.raw_data());
#endif
      } else if (sy.dtype() == DType::f32)
        cpu::softmax_backward(sy.data<float>(), g[0].data<float>(), rows, dim, dx.data<float>());
      else
        cpu::softmax_backward(sy.data<double>(), g[0].data<double>(), rows, dim, dx.data<double>());
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

Tensor log_softmax(const Tensor& x) {
  check_float_rows(x, "log_softmax", "x");
  const Rows r = rows_of(x);
  const int64_t rows = r.rows, dim = r.dim;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.device().is_cuda()) {
#ifdef LAT_WITH_CUDA
    cuda::log_softmax_forward(cuda_rows(x, {rows, dim}), x.raw_data(), y.raw_data());
#endif
  } else if (x.dtype() == DType::f32)
    cpu::log_softmax_forward(x.data<float>(), rows, dim, y.data<float>());
  else
    cpu::log_softmax_forward(x.data<double>(), rows, dim, y.data<double>());
  if (needs_grad({&x})) {
    Tensor sy = y.detach();
    record("log_softmax", {x}, {y}, [sy, rows, dim](const std::vector<Tensor>& g) {
      Tensor dx = Tensor::empty(sy.shape(), sy.dtype(), sy.device());
      if (sy.device().is_cuda()) {
#ifdef LAT_WITH_CUDA
        cuda::log_softmax_backward(cuda_rows(sy, {rows, dim}), sy.raw_data(), g[0].raw_data(), dx.raw_data());
#endif
      } else if (sy.dtype() == DType::f32)
        cpu::log_softmax_backward(sy.data<float>(), g[0].data<float>(), rows, dim, dx.data<float>());
      else
        cpu::log_softmax_backward(sy.data<double>(), g[0].data<double>(), rows, dim, dx.data<double>());
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  check_float_rows(logits, "cross_entropy", "logits");
  LAT_CHECK(logits.dim() == 2, "cross_entropy: logits: expected shape [N, vocab], got " << shape_str(logits.shape()));
  LAT_CHECK(targets.defined(), "cross_entropy: targets: undefined tensor");
  LAT_CHECK(targets.device().is_cpu() || targets.device() == logits.device(),
            "cross_entropy: targets: expected a cpu tensor or one on " << logits.device().str() << ", got "
                                                                      << targets.device().str());
  LAT_CHECK(targets.dtype() == DType::i64, "cross_entropy: targets: expected i64, got " << dtype_name(targets.dtype()));
  const int64_t rows = logits.size(0), dim = logits.size(1);
  LAT_CHECK(targets.shape() == Shape{rows}, "cross_entropy: targets: expected shape [" << rows << "] for logits "
                                                                                       << shape_str(logits.shape())
                                                                                       << ", got "
                                                                                       << shape_str(targets.shape()));
  LAT_CHECK(dim >= 1 || rows == 0, "cross_entropy: logits: expected vocab >= 1, got shape "
                                       << shape_str(logits.shape()));
  // Targets are checked on the host (a copy when they live on a device).
  const Tensor targets_host = targets.to(Device::cpu());
  const int64_t* t = targets_host.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r)
    LAT_CHECK(t[r] == ignore_index || (t[r] >= 0 && t[r] < dim),
              "cross_entropy: targets: target " << t[r] << " at position " << r << " is out of range [0, " << dim
                                                << ") and not ignore_index " << ignore_index);
#ifdef LAT_WITH_CUDA
  if (logits.device().is_cuda()) {
    int64_t count = 0;
    for (int64_t r = 0; r < rows; ++r) count += t[r] != ignore_index;
    const double inv_count = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
    const Tensor targets_device = targets.to(logits.device());
    Tensor lse = Tensor::empty({rows}, DType::f64, logits.device());
    Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
    cuda::cross_entropy_forward(cuda_rows(logits, {rows, dim}), logits.raw_data(), targets_device.data<int64_t>(),
                                ignore_index, count, lse.data<double>(), loss.raw_data());
    if (needs_grad({&logits})) {
      Tensor sl = logits.detach();
      record("cross_entropy", {logits}, {loss},
             [sl, targets_device, lse, inv_count, rows, dim, ignore_index](const std::vector<Tensor>& g) {
               Tensor dl = Tensor::empty(sl.shape(), sl.dtype(), sl.device());
               cuda::cross_entropy_backward(cuda_rows(sl, {rows, dim}), sl.raw_data(), targets_device.data<int64_t>(),
                                            lse.data<double>(), ignore_index, g[0].raw_data(), inv_count,
                                            dl.raw_data());
               return std::vector<Tensor>{dl};
             });
    }
    return loss;
  }
#endif

  Tensor lse = Tensor::empty({rows}, DType::f64);
  int64_t count = 0;
  const double total = logits.dtype() == DType::f32
                           ? cpu::cross_entropy_forward(logits.data<float>(), t, rows, dim, ignore_index,
                                                        lse.data<double>(), &count)
                           : cpu::cross_entropy_forward(logits.data<double>(), t, rows, dim, ignore_index,
                                                        lse.data<double>(), &count);
  Tensor loss = Tensor::scalar(count > 0 ? total / static_cast<double>(count) : 0.0, logits.dtype());
  if (needs_grad({&logits})) {
    Tensor sl = logits.detach(), st = targets_host.detach();
    record("cross_entropy", {logits}, {loss},
           [sl, st, lse, count, rows, dim, ignore_index](const std::vector<Tensor>& g) {
             Tensor dl = Tensor::empty(sl.shape(), sl.dtype());
             // With no counted target the loss is the constant 0: every gradient is 0.
             const double scale = count > 0 ? g[0].item() / static_cast<double>(count) : 0.0;
             const int64_t* tt = st.data<int64_t>();
             if (sl.dtype() == DType::f32)
               cpu::cross_entropy_backward(sl.data<float>(), tt, lse.data<double>(), rows, dim, ignore_index, scale,
                                           dl.data<float>());
             else
               cpu::cross_entropy_backward(sl.data<double>(), tt, lse.data<double>(), rows, dim, ignore_index, scale,
                                           dl.data<double>());
             return std::vector<Tensor>{dl};
           });
  }
  return loss;
}

}  // namespace lat
