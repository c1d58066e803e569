// CUDA kernels of the elementwise ops (plain-struct launch API, no tensors). One kernel per
// dtype; the operation is a runtime code, uniform across threads, so adding an operation
// adds a switch case, not a kernel instantiation. f32 and f64.
#pragma once
#include <cstdint>

#include "lat/tensor.h"

namespace lat::cuda {

/// y = f(x) elementwise. The *_grad codes are derivatives used by backward passes; the
/// *_scalar codes combine x with `scalar` (rsub: scalar - x, rdiv: scalar / x).
enum class UnaryOp : uint8_t {
  neg, exp, log, sqrt, rsqrt, pow, tanh, sigmoid, silu, silu_grad, gelu, gelu_grad, softplus,
  elu, elu_grad, relu, relu_grad, add_scalar, sub_scalar, rsub_scalar, mul_scalar, div_scalar, rdiv_scalar
};

struct UnaryArgs {
  UnaryOp op = UnaryOp::neg;
  double scalar = 0.0;  // pow's exponent, elu's alpha, the *_scalar operand
  DType dtype = DType::f32;
  const void* x = nullptr;
  void* y = nullptr;  // may alias x
  int64_t n = 0;
  int device = 0;
};
void unary(const UnaryArgs& a);

enum class BinaryOp : uint8_t { add, sub, mul, div };

/// out = a op b with NumPy broadcasting of a_shape and b_shape to out_shape (compatibility
/// checked by the caller; at most 8 dimensions).
struct BinaryArgs {
  BinaryOp op = BinaryOp::add;
  DType dtype = DType::f32;
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  Shape a_shape, b_shape, out_shape;
  int device = 0;
};
void binary(const BinaryArgs& a);

/// p[0..n) = value, converted to dtype (f32, f64 or i64).
void fill(void* p, DType dtype, int64_t n, double value, int device);

}  // namespace lat::cuda
