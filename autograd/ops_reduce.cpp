// Reductions: sum and mean (all elements or one axis), max over one axis, and sum_to (the
// inverse of broadcasting, used by every broadcasting backward). A reduction over `axis`
// views the contiguous input as [outer, n, inner] with n = shape[axis]; the loops are in
// autograd/cpu/reduce_cpu.h (CUDA: autograd/cuda/reduce.h).
#include <cstdint>

#include "autograd/cpu/reduce_cpu.h"
#include "autograd/float_checks.h"
#ifdef LAT_WITH_CUDA
#include "autograd/cuda/reduce.h"
#endif
#include "lat/ops.h"
#include "lat/tape.h"

namespace lat {
namespace {

using Grads = std::vector<Tensor>;

struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};

int64_t normalize_axis(const Tensor& a, int64_t axis, const char* op) {
  const int64_t nd = a.dim();
  LAT_CHECK(axis >= -nd && axis < nd, op << ": axis: expected in [" << -nd << ", " << nd << ") for a: shape "
                                         << shape_str(a.shape()) << ", got " << axis);
  return axis < 0 ? axis + nd : axis;
}

AxisView axis_view(const Shape& shape, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < axis; ++d) v.outer *= shape[d];
  v.n = shape[axis];
  for (size_t d = axis + 1; d < shape.size(); ++d) v.inner *= shape[d];
  return v;
}

// The whole tensor as one reduced axis.
AxisView all_view(const Tensor& a) { return {1, a.numel(), 1}; }

Shape reduced_shape(const Shape& shape, int64_t axis, bool keepdim) {
  Shape out = shape;
  if (keepdim) {
    out[axis] = 1;
  } else {
    out.erase(out.begin() + axis);
  }
  return out;
}

// scale * (sum over the view's axis) with shape out_shape; no tape node.
Tensor sum_raw(const Tensor& a, const AxisView& v, const Shape& out_shape, double scale, const char* op) {
  detail::check_float(a, op, "a");
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  switch (a.device().type) {
    case DeviceType::cpu:
      if (a.dtype() == DType::f32) {
        cpu::sum_axis(a.data<float>(), out.data<float>(), v.outer, v.n, v.inner, scale);
      } else {
        cpu::sum_axis(a.data<double>(), out.data<double>(), v.outer, v.n, v.inner, scale);
      }
      return out;
    case DeviceType::cuda:
#ifdef LAT_WITH_CUDA
      cuda::sum_axis({a.dtype(), v.outer, v.n, v.inner, scale, a.device().index}, a.raw_data(), out.raw_data());
      return out;
#else
      break;
#endif
  }
  detail::not_implemented_on(op, a.device());
}

// scale * g broadcast along the view's axis to `shape`: the backward of sum_raw.
Tensor expand_raw(const Tensor& g, const AxisView& v, const Shape& shape, double scale, const char* op) {
  Tensor out = Tensor::empty(shape, g.dtype(), g.device());
  switch (g.device().type) {
    case DeviceType::cpu:
      if (g.dtype() == DType::f32) {
        cpu::expand_axis(g.data<float>(), out.data<float>(), v.outer, v.n, v.inner, scale);
      } else {
        cpu::expand_axis(g.data<double>(), out.data<double>(), v.outer, v.n, v.inner, scale);
      }
      return out;
    case DeviceType::cuda:
#ifdef LAT_WITH_CUDA
      cuda::expand_axis({g.dtype(), v.outer, v.n, v.inner, scale, g.device().index}, g.raw_data(), out.raw_data());
      return out;
#else
      break;
#endif
  }
  detail::not_implemented_on(op, g.device());
}

// The differentiable sum/mean: scale = 1 (sum) or 1/n (mean).
Tensor scaled_sum(const Tensor& a, const AxisView& v, const Shape& out_shape, double scale, const char* op) {
  Tensor out = sum_raw(a, v, out_shape, scale, op);
  if (needs_grad({&a})) {
    record(op, {a}, {out}, [v, shape = a.shape(), scale, op](const Grads& g) {
      return Grads{expand_raw(g[0], v, shape, scale, op)};
    });
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& a) {
  detail::check_float(a, "sum", "a");
  return scaled_sum(a, all_view(a), {}, 1.0, "sum");
}

Tensor sum(const Tensor& a, int64_t axis, bool keepdim) {
  detail::check_float(a, "sum", "a");
  const int64_t ax = normalize_axis(a, axis, "sum");
  return scaled_sum(a, axis_view(a.shape(), ax), reduced_shape(a.shape(), ax, keepdim), 1.0, "sum");
}

Tensor mean(const Tensor& a) {
  detail::check_float(a, "mean", "a");
  return scaled_sum(a, all_view(a), {}, 1.0 / static_cast<double>(a.numel()), "mean");
}

Tensor mean(const Tensor& a, int64_t axis, bool keepdim) {
  detail::check_float(a, "mean", "a");
  const int64_t ax = normalize_axis(a, axis, "mean");
  const AxisView v = axis_view(a.shape(), ax);
  return scaled_sum(a, v, reduced_shape(a.shape(), ax, keepdim), 1.0 / static_cast<double>(v.n), "mean");
}

Tensor max(const Tensor& a, int64_t axis, bool keepdim) {
  detail::check_float(a, "max", "a");
  const int64_t ax = normalize_axis(a, axis, "max");
  const AxisView v = axis_view(a.shape(), ax);
  LAT_CHECK(v.n > 0, "max: a: axis " << axis << " of shape " << shape_str(a.shape()) << " is empty");
  const Shape out_shape = reduced_shape(a.shape(), ax, keepdim);
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  Tensor arg = Tensor::empty(out_shape, DType::i64, a.device());  // the first argmax, for backward
  switch (a.device().type) {
    case DeviceType::cpu:
      if (a.dtype() == DType::f32) {
        cpu::max_axis(a.data<float>(), out.data<float>(), arg.data<int64_t>(), v.outer, v.n, v.inner);
      } else {
        cpu::max_axis(a.data<double>(), out.data<double>(), arg.data<int64_t>(), v.outer, v.n, v.inner);
      }
      break;
    case DeviceType::cuda:
#ifdef LAT_WITH_CUDA
      cuda::max_axis({a.dtype(), v.outer, v.n, v.inner, 1.0, a.device().index}, a.raw_data(), out.raw_data(),
                     arg.data<int64_t>());
      break;
#else
      detail::not_implemented_on("max", a.device());
#endif
  }
  if (needs_grad({&a})) {
    record("max", {a}, {out}, [v, arg, shape = a.shape()](const Grads& g) {
      Tensor dx = Tensor::empty(shape, g[0].dtype(), g[0].device());
      switch (dx.device().type) {
        case DeviceType::cpu:
          if (dx.dtype() == DType::f32) {
            cpu::max_axis_backward(g[0].data<float>(), arg.data<int64_t>(), dx.data<float>(), v.outer, v.n, v.inner);
          } else {
            cpu::max_axis_backward(g[0].data<double>(), arg.data<int64_t>(), dx.data<double>(), v.outer, v.n,
                                   v.inner);
          }
          break;
        case DeviceType::cuda:
#ifdef LAT_WITH_CUDA
          cuda::max_axis_backward({dx.dtype(), v.outer, v.n, v.inner, 1.0, dx.device().index}, g[0].raw_data(),
                                  arg.data<int64_t>(), dx.raw_data());
          break;
#else
          detail::not_implemented_on("max", dx.device());
#endif
      }
      return Grads{dx};
    });
  }
  return out;
}

Tensor sum_to(const Tensor& t, const Shape& shape) {
  detail::check_float(t, "sum_to", "t");
  if (t.shape() == shape) return t;
  const int64_t lead = t.dim() - static_cast<int64_t>(shape.size());
  bool compatible = lead >= 0;
  for (size_t d = 0; compatible && d < shape.size(); ++d)
    compatible = shape[d] == 1 || shape[d] == t.shape()[lead + d];
  LAT_CHECK(compatible, "sum_to: shape: expected a shape that broadcasts to t: " << shape_str(t.shape()) << ", got "
                                                                                  << shape_str(shape));
  // Leading dimensions that `shape` lacks collapse into one axis summed in a single pass;
  // then each remaining size-1 dimension of `shape` is summed with keepdim.
  Tensor r = t;
  if (lead > 0) {
    int64_t rows = 1;
    for (int64_t d = 0; d < lead; ++d) rows *= t.shape()[d];
    Shape collapsed{rows};
    collapsed.insert(collapsed.end(), t.shape().begin() + lead, t.shape().end());
    r = sum(r.reshape(collapsed), 0);
  }
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] == 1 && r.shape()[d] != 1) r = sum(r, static_cast<int64_t>(d), true);
  return r;
}

}  // namespace lat
