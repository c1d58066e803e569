// CPU loops of the elementwise ops: unary maps and binary maps with NumPy broadcasting.
// Templated on the element type (float, double) and on the functor, so the per-element
// operation inlines into the loop (no per-element indirect call). Loops over more than
// kParallelMin elements run as OpenMP `parallel for`.
#pragma once
#include <cstdint>
#include <vector>

#include "lat/tensor.h"

namespace lat::cpu {

/// Below this many elements a loop stays on one thread (thread start-up would dominate).
constexpr int64_t kParallelMin = 1 << 15;

/// y[i] = f(x[i]) for i < n. x and y may alias.
template <class T, class F>
void unary_map(const T* x, T* y, int64_t n, F f) {
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

/// Strides (in elements) of a contiguous tensor of shape `in` read as if broadcast to
/// `out`: one entry per dimension of `out`, 0 where `in` is broadcast (missing or size 1).
/// Requires `in` to be broadcast-compatible with `out` (checked by the caller).
inline std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  const size_t nd = out.size(), lead = out.size() - in.size();
  std::vector<int64_t> strides(nd, 0);
  int64_t stride = 1;
  for (size_t d = nd; d-- > lead;) {
    int64_t size = in[d - lead];
    strides[d] = size == 1 ? 0 : stride;
    stride *= size;
  }
  return strides;
}

/// True when `small`, without its leading 1s, equals the trailing dimensions of `out`:
/// then a contiguous `small` repeats once per "row" of `out` ([N, D] op [D]).
inline bool is_row_broadcast(const Shape& small, const Shape& out) {
  size_t first = 0;
  while (first < small.size() && small[first] == 1) ++first;
  const size_t tail = small.size() - first;
  if (tail > out.size()) return false;
  for (size_t i = 0; i < tail; ++i)
    if (small[first + i] != out[out.size() - tail + i]) return false;
  return true;
}

/// out = f(a, b) elementwise, a and b broadcast to out_shape (NumPy rules; the caller has
/// checked compatibility and computed out_shape). Fast paths: equal shapes, a one-element
/// operand, a row broadcast ([N, D] op [D]); a general strided walk for the rest.
template <class T, class F>
void binary_map(const T* a, const Shape& a_shape, const T* b, const Shape& b_shape, T* out,
                const Shape& out_shape, F f) {
  const int64_t n = shape_numel(out_shape);
  if (n == 0) return;
  const int64_t na = shape_numel(a_shape), nb = shape_numel(b_shape);
  if (na == n && nb == n) {  // equal shapes (up to leading 1s)
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
    return;
  }
  if (nb == 1 && na == n) {
    const T s = b[0];
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], s);
    return;
  }
  if (na == 1 && nb == n) {
    const T s = a[0];
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) out[i] = f(s, b[i]);
    return;
  }
  if (na == n && is_row_broadcast(b_shape, out_shape)) {
    const int64_t cols = nb, rows = n / nb;
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = f(a[r * cols + c], b[c]);
    return;
  }
  if (nb == n && is_row_broadcast(a_shape, out_shape)) {
    const int64_t cols = na, rows = n / na;
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = f(a[c], b[r * cols + c]);
    return;
  }
  // General path: walk the rows of the last output dimension; each row's start offsets in
  // a and b come from decomposing the row index over the leading output dimensions.
  const std::vector<int64_t> sa = broadcast_strides(a_shape, out_shape);
  const std::vector<int64_t> sb = broadcast_strides(b_shape, out_shape);
  const int64_t nd = static_cast<int64_t>(out_shape.size());
  const int64_t cols = out_shape[nd - 1], rows = n / cols;
  const int64_t ca = sa[nd - 1], cb = sb[nd - 1];
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, oa = 0, ob = 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      const int64_t idx = rest % out_shape[d];
      rest /= out_shape[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    T* o = out + r * cols;
    for (int64_t c = 0; c < cols; ++c) o[c] = f(a[oa + c * ca], b[ob + c * cb]);
  }
}

}  // namespace lat::cpu
