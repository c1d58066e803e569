// add_rms_norm: checks, the CPU kernels of autograd/cpu/nn_cpu.h, one tape node; add and
// rms_norm on CUDA.
#include "layers/fused/add_rms_norm.h"

#include "autograd/cpu/nn_cpu.h"
#include "lat/ops.h"
#include "lat/tape.h"

namespace lat {
namespace {

void check_args(const Tensor& x, const Tensor& y, const Tensor& weight, double eps) {
  const char* op = "add_rms_norm";
  LAT_CHECK(x.defined() && y.defined() && weight.defined(), op << ": x, y and weight must be defined");
  LAT_CHECK(
      x.dim() >= 1 && (x.dtype() == DType::f32 || x.dtype() == DType::f64),
      op << ": x: expected f32 or f64 of shape [..., D], got " << dtype_name(x.dtype()) << " " << shape_str(x.shape()));
  LAT_CHECK(y.shape() == x.shape() && y.dtype() == x.dtype() && y.device() == x.device(),
            op << ": y: expected " << dtype_name(x.dtype()) << " " << shape_str(x.shape()) << " on " << x.device().str()
               << " like x, got " << dtype_name(y.dtype()) << " " << shape_str(y.shape()) << " on "
               << y.device().str());
  LAT_CHECK(weight.shape() == Shape{x.size(-1)} && weight.dtype() == x.dtype() && weight.device() == x.device(),
            op << ": weight: expected " << dtype_name(x.dtype()) << " [" << x.size(-1) << "] on " << x.device().str()
               << ", got " << dtype_name(weight.dtype()) << " " << shape_str(weight.shape()) << " on "
               << weight.device().str());
  LAT_CHECK(eps >= 0.0, op << ": eps: expected >= 0, got " << eps);
}

template <class T>
void forward_cpu(const Tensor& x, const Tensor& y, const Tensor& weight, double eps, AddRmsNorm& out, Tensor& rstd) {
  const int64_t dim = x.size(-1), rows = dim == 0 ? 0 : x.numel() / dim;
  cpu::add_rms_norm_forward(x.data<T>(), y.data<T>(), weight.data<T>(), rows, dim, eps, out.sum.data<T>(),
                            out.normed.data<T>(), rstd.data<double>());
}

template <class T>
void backward_cpu(const Tensor& sum, const Tensor& weight, const Tensor& rstd, const Tensor& dsum,
                  const Tensor& dnormed, Tensor& dx, Tensor& dweight) {
  const int64_t dim = sum.size(-1), rows = dim == 0 ? 0 : sum.numel() / dim;
  cpu::add_rms_norm_backward(sum.data<T>(), weight.data<T>(), rstd.data<double>(), dsum.data<T>(), dnormed.data<T>(),
                             rows, dim, dx.data<T>(), dweight.defined() ? dweight.data<T>() : nullptr);
}

}  // namespace

AddRmsNorm add_rms_norm(const Tensor& x, const Tensor& y, const Tensor& weight, double eps) {
  check_args(x, y, weight, eps);
  if (!x.device().is_cpu()) {
    Tensor sum = x + y;
    return {sum, rms_norm(sum, weight, eps)};
  }
  AddRmsNorm out{Tensor::empty(x.shape(), x.dtype()), Tensor::empty(x.shape(), x.dtype())};
  const int64_t dim = x.size(-1);
  Tensor rstd = Tensor::empty({dim == 0 ? 0 : x.numel() / dim}, DType::f64);
  if (x.dtype() == DType::f32)
    forward_cpu<float>(x, y, weight, eps, out, rstd);
  else
    forward_cpu<double>(x, y, weight, eps, out, rstd);
  if (needs_grad({&x, &y, &weight})) {
    record("add_rms_norm", {x, y, weight}, {out.sum, out.normed},
           [sum = out.sum.detach(), w = weight.detach(), rstd,
            need_w = weight.requires_grad()](const std::vector<Tensor>& grads) {
             // One gradient for x and y: d(x + y) reaches both unchanged.
             Tensor dsum = Tensor::empty(sum.shape(), sum.dtype());
             Tensor dweight = need_w ? Tensor::empty(w.shape(), w.dtype()) : Tensor();
             if (sum.dtype() == DType::f32)
               backward_cpu<float>(sum, w, rstd, grads[0], grads[1], dsum, dweight);
             else
               backward_cpu<double>(sum, w, rstd, grads[0], grads[1], dsum, dweight);
             return std::vector<Tensor>{dsum, dsum, dweight};
           });
  }
  return out;
}

}  // namespace lat
