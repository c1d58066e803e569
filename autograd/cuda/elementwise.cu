// CUDA kernels of the elementwise ops (see elementwise.h). The formulas are the CPU ones
// of autograd/ops_elementwise.cpp, in the same floating type.
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/elementwise.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/stream.h"

namespace lat::cuda {
namespace {

constexpr int kMaxDims = 8;

template <class T>
__device__ T stable_sigmoid(T x) {
  // exp of a non-positive argument only: neither branch overflows.
  if (x >= T(0)) return T(1) / (T(1) + exp(-x));
  const T e = exp(x);
  return e / (T(1) + e);
}

// GELU, tanh form, as x * sigmoid(2u) (see ops_elementwise.cpp).
constexpr double kGeluC = 0.7978845608028654;
constexpr double kGeluK = 0.044715;

template <class T>
__device__ T gelu_gate(T x) {
  return T(1) / (T(1) + exp(T(-2 * kGeluC) * (x + T(kGeluK) * x * x * x)));
}

template <class T>
__device__ T apply_unary(UnaryOp op, T x, T s) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return exp(x);
    case UnaryOp::log: return log(x);
    case UnaryOp::sqrt: return sqrt(x);
    case UnaryOp::rsqrt: return T(1) / sqrt(x);
    case UnaryOp::pow: return pow(x, s);
    case UnaryOp::tanh: return tanh(x);
    case UnaryOp::sigmoid: return stable_sigmoid(x);
    case UnaryOp::silu: return x * stable_sigmoid(x);
    case UnaryOp::silu_grad: {
      const T sg = stable_sigmoid(x);
      return sg * (T(1) + x * (T(1) - sg));
    }
    case UnaryOp::gelu: return x * gelu_gate(x);
    case UnaryOp::gelu_grad: {
      const T g = gelu_gate(x);
      return g + T(2 * kGeluC) * x * g * (T(1) - g) * (T(1) + T(3 * kGeluK) * x * x);
    }
    case UnaryOp::softplus: return (x > T(0) ? x : T(0)) + log1p(exp(-fabs(x)));
    case UnaryOp::elu: return x > T(0) ? x : s * expm1(x);
    case UnaryOp::elu_grad: return x > T(0) ? T(1) : s * exp(x);
    case UnaryOp::relu: return x > T(0) ? x : T(0);
    case UnaryOp::relu_grad: return x > T(0) ? T(1) : T(0);
    case UnaryOp::add_scalar: return x + s;
    case UnaryOp::sub_scalar: return x - s;
    case UnaryOp::rsub_scalar: return s - x;
    case UnaryOp::mul_scalar: return x * s;
    case UnaryOp::div_scalar: return x / s;
    case UnaryOp::rdiv_scalar: return s / x;
  }
  return x;
}

template <class T>
__device__ T apply_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
  }
  return a;
}

template <class T>
__global__ void unary_kernel(UnaryOp op, T s, const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = apply_unary(op, x[i], s);
}

// Broadcast layout of a binary op: the output's shape and, per output dimension, the
// element strides of a and b (0 where broadcast). Passed by value as a kernel argument.
struct Broadcast {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride_a[kMaxDims] = {};
  int64_t stride_b[kMaxDims] = {};
};

// Modes: both operands as large as the output, b a single value, a a single value, or the
// general strided walk.
enum class Mode : uint8_t { same, b_scalar, a_scalar, strided };

template <class T>
__global__ void binary_kernel(BinaryOp op, Mode mode, Broadcast bc, const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t ia = i, ib = i;
    if (mode == Mode::b_scalar) {
      ib = 0;
    } else if (mode == Mode::a_scalar) {
      ia = 0;
    } else if (mode == Mode::strided) {
      ia = 0, ib = 0;
      int64_t rest = i;
      for (int d = bc.ndim - 1; d >= 0; --d) {
        const int64_t idx = rest % bc.shape[d];
        rest /= bc.shape[d];
        ia += idx * bc.stride_a[d];
        ib += idx * bc.stride_b[d];
      }
    }
    out[i] = apply_binary(op, a[ia], b[ib]);
  }
}

template <class T>
__global__ void fill_kernel(T* p, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = value;
}

// Element strides of a contiguous `in` read as broadcast to `out` (0 where broadcast).
void broadcast_strides(const Shape& in, const Shape& out, int64_t* strides) {
  const size_t nd = out.size(), lead = out.size() - in.size();
  int64_t stride = 1;
  for (size_t d = nd; d-- > 0;) {
    if (d < lead) {
      strides[d] = 0;
      continue;
    }
    const int64_t size = in[d - lead];
    strides[d] = size == 1 ? 0 : stride;
    stride *= size;
  }
}

}  // namespace

void unary(const UnaryArgs& a) {
  if (a.n == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  if (a.dtype == DType::f32) {
    unary_kernel<float><<<grid_for(a.n), kBlock, 0, stream>>>(a.op, static_cast<float>(a.scalar),
                                                              static_cast<const float*>(a.x),
                                                              static_cast<float*>(a.y), a.n);
  } else {
    LAT_CHECK(a.dtype == DType::f64, "cuda unary: dtype: expected f32 or f64, got " << dtype_name(a.dtype));
    unary_kernel<double><<<grid_for(a.n), kBlock, 0, stream>>>(a.op, a.scalar, static_cast<const double*>(a.x),
                                                               static_cast<double*>(a.y), a.n);
  }
  LAT_CUDA_CHECK_LAUNCH();
}

void binary(const BinaryArgs& a) {
  const int64_t n = shape_numel(a.out_shape);
  if (n == 0) return;
  const int64_t na = shape_numel(a.a_shape), nb = shape_numel(a.b_shape);
  Mode mode = Mode::strided;
  Broadcast bc;
  if (na == n && nb == n) {
    mode = Mode::same;
  } else if (nb == 1 && na == n) {
    mode = Mode::b_scalar;
  } else if (na == 1 && nb == n) {
    mode = Mode::a_scalar;
  } else {
    LAT_CHECK(a.out_shape.size() <= static_cast<size_t>(kMaxDims),
              "cuda binary: broadcasting supports at most " << kMaxDims << " dims, got shape "
                                                            << shape_str(a.out_shape));
    bc.ndim = static_cast<int>(a.out_shape.size());
    for (int d = 0; d < bc.ndim; ++d) bc.shape[d] = a.out_shape[d];
    broadcast_strides(a.a_shape, a.out_shape, bc.stride_a);
    broadcast_strides(a.b_shape, a.out_shape, bc.stride_b);
  }
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device);
  if (a.dtype == DType::f32) {
    binary_kernel<float><<<grid_for(n), kBlock, 0, stream>>>(a.op, mode, bc, static_cast<const float*>(a.a),
                                                             static_cast<const float*>(a.b),
                                                             static_cast<float*>(a.out), n);
  } else {
    LAT_CHECK(a.dtype == DType::f64, "cuda binary: dtype: expected f32 or f64, got " << dtype_name(a.dtype));
    binary_kernel<double><<<grid_for(n), kBlock, 0, stream>>>(a.op, mode, bc, static_cast<const double*>(a.a),
                                                              static_cast<const double*>(a.b),
                                                              static_cast<double*>(a.out), n);
  }
  LAT_CUDA_CHECK_LAUNCH();
}

void fill(void* p, DType dtype, int64_t n, double value, int device) {
  if (n == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  switch (dtype) {
    case DType::f32:
      fill_kernel<float><<<grid_for(n), kBlock, 0, stream>>>(static_cast<float*>(p), n, static_cast<float>(value));
      break;
    case DType::f64:
      fill_kernel<double><<<grid_for(n), kBlock, 0, stream>>>(static_cast<double*>(p), n, value);
      break;
    case DType::i64:
      fill_kernel<int64_t><<<grid_for(n), kBlock, 0, stream>>>(static_cast<int64_t*>(p), n,
                                                               static_cast<int64_t>(value));
      break;
  }
  LAT_CUDA_CHECK_LAUNCH();
}

}  // namespace lat::cuda
