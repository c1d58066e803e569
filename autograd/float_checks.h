// Argument checks shared by the floating-point ops (elementwise and reductions). Each
// throws lat::Error naming the op, the argument and expected versus actual.
#pragma once
#include "lat/tensor.h"

namespace lat::detail {

/// `t` is defined and f32 or f64.
inline void check_float(const Tensor& t, const char* op, const char* arg) {
  LAT_CHECK(t.defined(), op << ": " << arg << ": undefined tensor");
  LAT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64,
            op << ": " << arg << ": expected dtype f32 or f64, got " << dtype_name(t.dtype()));
}

/// Both floating, with the same dtype and device (b is compared against a).
inline void check_float_pair(const Tensor& a, const Tensor& b, const char* op) {
  check_float(a, op, "a");
  check_float(b, op, "b");
  LAT_CHECK(b.dtype() == a.dtype(), op << ": b: expected dtype " << dtype_name(a.dtype()) << " (the dtype of a), got "
                                       << dtype_name(b.dtype()));
  LAT_CHECK(b.device() == a.device(), op << ": b: expected device " << a.device().str()
                                         << " (the device of a), got " << b.device().str());
}

/// The `cuda` branch of an op's device switch while the op has only a CPU kernel.
[[noreturn]] inline void not_implemented_on(const char* op, Device device) {
  std::ostringstream message;
  message << op << ": not implemented on cuda (tensor is on " << device.str() << ")";
  throw_error(message.str(), __FILE__, __LINE__);
}

}  // namespace lat::detail
