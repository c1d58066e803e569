// Elementwise ops: binary arithmetic with NumPy broadcasting, tensor-scalar arithmetic and
// the unary math and activation functions. Each op validates, computes through one device
// switch (CPU loops in autograd/cpu/elementwise_cpu.h, CUDA kernels in
// autograd/cuda/elementwise.h), and records one tape node whose backward is written with
// these same ops (it runs under NoGradGuard).
#include <algorithm>
#include <cmath>

#include "autograd/cpu/elementwise_cpu.h"
#include "autograd/cpu/fast_exp.h"
#include "autograd/cuda/elementwise.h"
#include "autograd/float_checks.h"
#include "lat/ops.h"
#include "lat/tape.h"

namespace lat {
namespace {

using Grads = std::vector<Tensor>;

// out = f(a) elementwise, without a tape node. f is a generic lambda (float and double);
// `code` (with `scalar`) names the same function for the CUDA kernel.
template <class F>
Tensor map_unary(const Tensor& a, const char* op, F f, [[maybe_unused]] cuda::UnaryOp code,
                 [[maybe_unused]] double scalar = 0.0) {
  detail::check_float(a, op, "a");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  switch (a.device().type) {
    case DeviceType::cpu:
      if (a.dtype() == DType::f32) {
        cpu::unary_map(a.data<float>(), out.data<float>(), a.numel(), f);
      } else {
        cpu::unary_map(a.data<double>(), out.data<double>(), a.numel(), f);
      }
      return out;
    case DeviceType::cuda:
#ifdef LAT_WITH_CUDA
      cuda::unary({code, scalar, a.dtype(), a.raw_data(), out.raw_data(), a.numel(), a.device().index});
      return out;
#else
      break;
#endif
  }
  detail::not_implemented_on(op, a.device());
}

// out = f(a, b) with broadcasting, without a tape node; `code` names f for the CUDA kernel.
template <class F>
Tensor map_binary(const Tensor& a, const Tensor& b, const char* op, F f, [[maybe_unused]] cuda::BinaryOp code) {
  detail::check_float_pair(a, b, op);
  const Shape out_shape = broadcast_shape(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  switch (a.device().type) {
    case DeviceType::cpu:
      if (a.dtype() == DType::f32) {
        cpu::binary_map(a.data<float>(), a.shape(), b.data<float>(), b.shape(), out.data<float>(), out_shape, f);
      } else {
        cpu::binary_map(a.data<double>(), a.shape(), b.data<double>(), b.shape(), out.data<double>(), out_shape, f);
      }
      return out;
    case DeviceType::cuda:
#ifdef LAT_WITH_CUDA
      cuda::binary({code, a.dtype(), a.raw_data(), b.raw_data(), out.raw_data(), a.shape(), b.shape(), out_shape,
                    a.device().index});
      return out;
#else
      break;
#endif
  }
  detail::not_implemented_on(op, a.device());
}

// Records the node of a one-input op: `grad_fn(g)` maps the output gradient to a's.
template <class G>
void record_unary(const char* op, const Tensor& a, const Tensor& y, G grad_fn) {
  record(op, {a}, {y}, [grad_fn = std::move(grad_fn)](const Grads& g) { return Grads{grad_fn(g[0])}; });
}

// d silu(x) / dx = s (1 + x (1 - s)), s = sigmoid(x).
template <class T>
T silu_grad_of(T x) {
  const T s = cpu::fast_sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

// GELU, tanh form (Hendrycks & Gimpel 2016, section 2): u = c (x + k x^3), c = sqrt(2/pi),
// gelu = 0.5 x (1 + tanh u). Written as x s with s = 0.5 (1 + tanh u) = sigmoid(2u): one exp
// instead of tanh (several times faster on the CPU), and for very negative x the exp
// overflows to inf, giving s = 0 rather than a NaN.
constexpr double kGeluC = 0.7978845608028654;
constexpr double kGeluK = 0.044715;

template <class T>
T gelu_gate(T x) {
  return T(1) / (T(1) + std::exp(T(-2 * kGeluC) * (x + T(kGeluK) * x * x * x)));
}

template <class T>
T gelu_of(T x) {
  return x * gelu_gate(x);
}

// d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 k x^2), t = tanh u; with
// 0.5 (1 + t) = s and 1 - t^2 = 4 s (1 - s): s + 2 x s (1 - s) c (1 + 3 k x^2).
template <class T>
T gelu_grad_of(T x) {
  const T s = gelu_gate(x);
  return s + T(2 * kGeluC) * x * s * (T(1) - s) * (T(1) + T(3 * kGeluK) * x * x);
}

}  // namespace

// ---- broadcasting ------------------------------------------------------------------------
Shape broadcast_shape(const Shape& a, const Shape& b, const char* op) {
  const size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (size_t i = 0; i < nd; ++i) {  // i counts from the last dimension
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    LAT_CHECK(da == db || da == 1 || db == 1,
              op << ": b: shape " << shape_str(b) << " does not broadcast with a: shape " << shape_str(a)
                 << " (dimension -" << i + 1 << ": " << db << " vs " << da << ")");
    out[nd - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

// ---- binary, tensor-tensor -----------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary(a, b, "add", [](auto x, auto y) { return x + y; }, cuda::BinaryOp::add);
  if (needs_grad({&a, &b})) {
    record("add", {a, b}, {out},
           [as = a.shape(), bs = b.shape(), da = a.requires_grad(), db = b.requires_grad()](const Grads& g) {
             return Grads{da ? sum_to(g[0], as) : Tensor(), db ? sum_to(g[0], bs) : Tensor()};
           });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary(a, b, "sub", [](auto x, auto y) { return x - y; }, cuda::BinaryOp::sub);
  if (needs_grad({&a, &b})) {
    record("sub", {a, b}, {out},
           [as = a.shape(), bs = b.shape(), da = a.requires_grad(), db = b.requires_grad()](const Grads& g) {
             return Grads{da ? sum_to(g[0], as) : Tensor(), db ? sum_to(neg(g[0]), bs) : Tensor()};
           });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary(a, b, "mul", [](auto x, auto y) { return x * y; }, cuda::BinaryOp::mul);
  if (needs_grad({&a, &b})) {
    const bool da = a.requires_grad(), db = b.requires_grad();
    // d(a b)/da = b and d(a b)/db = a: each input is saved only for the other's gradient.
    record("mul", {a, b}, {out},
           [as = a.shape(), bs = b.shape(), sa = db ? a : Tensor(), sb = da ? b : Tensor()](const Grads& g) {
             return Grads{sb.defined() ? sum_to(mul(g[0], sb), as) : Tensor(),
                          sa.defined() ? sum_to(mul(g[0], sa), bs) : Tensor()};
           });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary(a, b, "div", [](auto x, auto y) { return x / y; }, cuda::BinaryOp::div);
  if (needs_grad({&a, &b})) {
    // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2.
    record("div", {a, b}, {out}, [a, b, da = a.requires_grad(), db = b.requires_grad()](const Grads& g) {
      return Grads{da ? sum_to(div(g[0], b), a.shape()) : Tensor(),
                   db ? sum_to(neg(div(mul(g[0], a), mul(b, b))), b.shape()) : Tensor()};
    });
  }
  return out;
}

// ---- binary, tensor-scalar ------------------------------------------------------------------
Tensor add(const Tensor& a, double s) {
  Tensor y = map_unary(a, "add", [s](auto x) { return x + static_cast<decltype(x)>(s); }, cuda::UnaryOp::add_scalar, s);
  if (needs_grad({&a})) record_unary("add_scalar", a, y, [](const Tensor& g) { return g; });
  return y;
}

Tensor sub(const Tensor& a, double s) {
  Tensor y = map_unary(a, "sub", [s](auto x) { return x - static_cast<decltype(x)>(s); }, cuda::UnaryOp::sub_scalar, s);
  if (needs_grad({&a})) record_unary("sub_scalar", a, y, [](const Tensor& g) { return g; });
  return y;
}

Tensor rsub(const Tensor& a, double s) {
  Tensor y =
      map_unary(a, "rsub", [s](auto x) { return static_cast<decltype(x)>(s) - x; }, cuda::UnaryOp::rsub_scalar, s);
  if (needs_grad({&a})) record_unary("rsub", a, y, [](const Tensor& g) { return neg(g); });
  return y;
}

Tensor mul(const Tensor& a, double s) {
  Tensor y = map_unary(a, "mul", [s](auto x) { return x * static_cast<decltype(x)>(s); }, cuda::UnaryOp::mul_scalar, s);
  if (needs_grad({&a})) record_unary("mul_scalar", a, y, [s](const Tensor& g) { return mul(g, s); });
  return y;
}

Tensor div(const Tensor& a, double s) {
  Tensor y = map_unary(a, "div", [s](auto x) { return x / static_cast<decltype(x)>(s); }, cuda::UnaryOp::div_scalar, s);
  if (needs_grad({&a})) record_unary("div_scalar", a, y, [s](const Tensor& g) { return div(g, s); });
  return y;
}

Tensor rdiv(const Tensor& a, double s) {
  Tensor y =
      map_unary(a, "rdiv", [s](auto x) { return static_cast<decltype(x)>(s) / x; }, cuda::UnaryOp::rdiv_scalar, s);
  // d(s/a)/da = -s/a^2.
  if (needs_grad({&a})) record_unary("rdiv", a, y, [a, s](const Tensor& g) { return mul(div(g, mul(a, a)), -s); });
  return y;
}

// ---- operators ---------------------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double s) { return add(a, s); }
Tensor operator+(double s, const Tensor& a) { return add(a, s); }
Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
Tensor operator-(double s, const Tensor& a) { return rsub(a, s); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
Tensor operator/(const Tensor& a, double s) { return div(a, s); }
Tensor operator/(double s, const Tensor& a) { return rdiv(a, s); }
Tensor operator-(const Tensor& a) { return neg(a); }

// ---- unary -------------------------------------------------------------------------------
Tensor neg(const Tensor& a) {
  Tensor y = map_unary(a, "neg", [](auto x) { return -x; }, cuda::UnaryOp::neg);
  if (needs_grad({&a})) record_unary("neg", a, y, [](const Tensor& g) { return neg(g); });
  return y;
}

Tensor exp(const Tensor& a) {
  Tensor y = map_unary(a, "exp", [](auto x) { return std::exp(x); }, cuda::UnaryOp::exp);
  if (needs_grad({&a})) record_unary("exp", a, y, [y = y.detach()](const Tensor& g) { return mul(g, y); });
  return y;
}

Tensor log(const Tensor& a) {
  Tensor y = map_unary(a, "log", [](auto x) { return std::log(x); }, cuda::UnaryOp::log);
  if (needs_grad({&a})) record_unary("log", a, y, [a](const Tensor& g) { return div(g, a); });
  return y;
}

Tensor sqrt(const Tensor& a) {
  Tensor y = map_unary(a, "sqrt", [](auto x) { return std::sqrt(x); }, cuda::UnaryOp::sqrt);
  // d sqrt(a) = 1 / (2 sqrt(a)).
  if (needs_grad({&a})) record_unary("sqrt", a, y, [y = y.detach()](const Tensor& g) { return div(g, mul(y, 2.0)); });
  return y;
}

Tensor rsqrt(const Tensor& a) {
  Tensor y = map_unary(a, "rsqrt", [](auto x) { return decltype(x)(1) / std::sqrt(x); }, cuda::UnaryOp::rsqrt);
  // d a^(-1/2) = -a^(-3/2) / 2 = -y^3 / 2.
  if (needs_grad({&a}))
    record_unary("rsqrt", a, y, [y = y.detach()](const Tensor& g) { return mul(g, mul(mul(y, mul(y, y)), -0.5)); });
  return y;
}

Tensor pow(const Tensor& a, double p) {
  Tensor y =
      map_unary(a, "pow", [p](auto x) { return std::pow(x, static_cast<decltype(x)>(p)); }, cuda::UnaryOp::pow, p);
  if (needs_grad({&a})) {
    // d a^p = p a^(p-1); p = 0 is a constant (and 0 * a^-1 would be NaN at a = 0).
    record_unary("pow", a, y, [a, p](const Tensor& g) {
      return p == 0.0 ? Tensor::zeros(a.shape(), a.dtype(), a.device()) : mul(g, mul(pow(a, p - 1.0), p));
    });
  }
  return y;
}

Tensor tanh(const Tensor& a) {
  Tensor y = map_unary(a, "tanh", [](auto x) { return std::tanh(x); }, cuda::UnaryOp::tanh);
  if (needs_grad({&a}))
    record_unary("tanh", a, y, [y = y.detach()](const Tensor& g) { return mul(g, rsub(mul(y, y), 1.0)); });
  return y;
}

Tensor sigmoid(const Tensor& a) {
  Tensor y = map_unary(a, "sigmoid", [](auto x) { return cpu::fast_sigmoid(x); }, cuda::UnaryOp::sigmoid);
  if (needs_grad({&a}))
    record_unary("sigmoid", a, y, [y = y.detach()](const Tensor& g) { return mul(g, mul(y, rsub(y, 1.0))); });
  return y;
}

namespace {
// The gradient of silu at a times the upstream g: one fused pass on the CPU (this backward
// runs for every SwiGLU and output gate, so its extra tensor and pass were measurable).
Tensor silu_backward(const Tensor& g, const Tensor& a) {
  if (a.device().type == DeviceType::cpu && g.shape() == a.shape() && g.dtype() == a.dtype()) {
    Tensor dx = Tensor::empty(a.shape(), a.dtype(), a.device());
    if (a.dtype() == DType::f32) {
      cpu::binary_map(g.data<float>(), g.shape(), a.data<float>(), a.shape(), dx.data<float>(), a.shape(),
                      [](float gi, float x) { return gi * silu_grad_of(x); });
    } else {
      cpu::binary_map(g.data<double>(), g.shape(), a.data<double>(), a.shape(), dx.data<double>(), a.shape(),
                      [](double gi, double x) { return gi * silu_grad_of(x); });
    }
    return dx;
  }
  return mul(g, map_unary(a, "silu", [](auto x) { return silu_grad_of(x); }, cuda::UnaryOp::silu_grad));
}
}  // namespace

Tensor silu(const Tensor& a) {
  Tensor y = map_unary(a, "silu", [](auto x) { return x * cpu::fast_sigmoid(x); }, cuda::UnaryOp::silu);
  if (needs_grad({&a})) record_unary("silu", a, y, [a](const Tensor& g) { return silu_backward(g, a); });
  return y;
}

namespace {
// The CPU loops of swiglu: y = silu(a) u; and da = g u silu'(a), du = g silu(a).
template <class T>
void swiglu_forward_cpu(const T* a, const T* u, T* y, int64_t n) {
#pragma omp parallel for if (n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * cpu::fast_sigmoid(a[i]) * u[i];
}

template <class T>
void swiglu_backward_cpu(const T* g, const T* a, const T* u, T* da, T* du, int64_t n) {
#pragma omp parallel for if (n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const T s = cpu::fast_sigmoid(a[i]);
    du[i] = g[i] * a[i] * s;
    da[i] = g[i] * u[i] * s * (T(1) + a[i] * (T(1) - s));
  }
}
}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  detail::check_float_pair(gate, up, "swiglu");
  LAT_CHECK(gate.shape() == up.shape(), "swiglu: up: shape " << shape_str(up.shape())
                                            << " differs from gate: shape " << shape_str(gate.shape())
                                            << " (expected equal shapes)");
  if (gate.device().type != DeviceType::cpu) return mul(silu(gate), up);  // no fused CUDA kernel yet
  const Tensor a = gate.detach(), u = up.detach();  // the node keeps data, not the graph
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  if (a.dtype() == DType::f32)
    swiglu_forward_cpu(a.data<float>(), u.data<float>(), y.data<float>(), n);
  else
    swiglu_forward_cpu(a.data<double>(), u.data<double>(), y.data<double>(), n);
  if (needs_grad({&gate, &up})) {
    record("swiglu", {gate, up}, {y}, [a, u](const Grads& grads) {
      const int64_t n = a.numel();
      const Tensor& g = grads[0];
      Tensor da = Tensor::empty(a.shape(), a.dtype(), a.device());
      Tensor du = Tensor::empty(a.shape(), a.dtype(), a.device());
      if (a.dtype() == DType::f32)
        swiglu_backward_cpu(g.data<float>(), a.data<float>(), u.data<float>(), da.data<float>(), du.data<float>(), n);
      else
        swiglu_backward_cpu(g.data<double>(), a.data<double>(), u.data<double>(), da.data<double>(),
                            du.data<double>(), n);
      return Grads{da, du};
    });
  }
  return y;
}

Tensor gelu(const Tensor& a) {
  Tensor y = map_unary(a, "gelu", [](auto x) { return gelu_of(x); }, cuda::UnaryOp::gelu);
  if (needs_grad({&a})) {
    record_unary("gelu", a, y, [a](const Tensor& g) {
      return mul(g, map_unary(a, "gelu", [](auto x) { return gelu_grad_of(x); }, cuda::UnaryOp::gelu_grad));
    });
  }
  return y;
}

Tensor softplus(const Tensor& a) {
  // log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large x, no lost digits for
  // very negative x.
  Tensor y = map_unary(a, "softplus", [](auto x) {
    using T = decltype(x);
    return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
  }, cuda::UnaryOp::softplus);
  if (needs_grad({&a})) record_unary("softplus", a, y, [a](const Tensor& g) { return mul(g, sigmoid(a)); });
  return y;
}

Tensor elu(const Tensor& a, double alpha) {
  Tensor y = map_unary(a, "elu", [alpha](auto x) {
    using T = decltype(x);
    return x > T(0) ? x : static_cast<T>(alpha) * std::expm1(x);
  }, cuda::UnaryOp::elu, alpha);
  if (needs_grad({&a})) {
    record_unary("elu", a, y, [a, alpha](const Tensor& g) {
      return mul(g, map_unary(a, "elu", [alpha](auto x) {
                   using T = decltype(x);
                   return x > T(0) ? T(1) : static_cast<T>(alpha) * std::exp(x);
                 }, cuda::UnaryOp::elu_grad, alpha));
    });
  }
  return y;
}

Tensor relu(const Tensor& a) {
  Tensor y = map_unary(a, "relu", [](auto x) { return std::max(x, decltype(x)(0)); }, cuda::UnaryOp::relu);
  if (needs_grad({&a})) {
    // The derivative at exactly 0 is taken as 0.
    record_unary("relu", a, y, [a](const Tensor& g) {
      return mul(g, map_unary(a, "relu", [](auto x) {
                   using T = decltype(x);
                   return x > T(0) ? T(1) : T(0);
                 }, cuda::UnaryOp::relu_grad));
    });
  }
  return y;
}

}  // namespace lat
