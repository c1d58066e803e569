// Global-norm clipping: a deterministic chunked sum of squares, then one scaling pass.
#include "optim/clip.h"

#ifdef LAT_WITH_CUDA
#include "autograd/cuda/elementwise.h"
#include "autograd/cuda/reduce.h"
#endif

#include <algorithm>
#include <cmath>

namespace lat {
namespace {

// Fixed chunk length of the partial sums: the reduction order depends on it, never on
// the number of threads, so the norm is bit-identical across thread counts and runs.
constexpr int64_t kChunk = 1 << 14;

template <class T>
double sum_of_squares(const T* g, int64_t n) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0.0;
    int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    partial[c] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

template <class T>
void scale_in_place(T* g, int64_t n, T factor) {
#pragma omp parallel for simd if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) g[i] *= factor;
}

}  // namespace

double grad_norm(const std::vector<NamedParameter>& params) {
  double total = 0.0;
  for (const NamedParameter& p : params) {
    Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
#ifdef LAT_WITH_CUDA
    if (g.device().is_cuda()) {
      total += cuda::sum_of_squares(g.raw_data(), g.dtype(), g.numel(), g.device().index);
      continue;
    }
#endif
    LAT_CHECK(g.device().is_cpu(), "grad_norm: parameter '" << p.name << "': not implemented on " << g.device().str());
    if (g.dtype() == DType::f32) {
      total += sum_of_squares(g.data<float>(), g.numel());
    } else {
      total += sum_of_squares(g.data<double>(), g.numel());
    }
  }
  return std::sqrt(total);
}

ClipResult clip_grad_norm(const std::vector<NamedParameter>& params, double max_norm) {
  LAT_CHECK(max_norm >= 0.0, "clip_grad_norm: max_norm (train.grad_clip): expected >= 0, got " << max_norm);
  ClipResult result;
  result.norm = grad_norm(params);
  result.finite = std::isfinite(result.norm);
  if (!result.finite || max_norm == 0.0 || result.norm <= max_norm) return result;
  double factor = max_norm / (result.norm + 1e-6);
  for (const NamedParameter& p : params) {
    Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
#ifdef LAT_WITH_CUDA
    if (g.device().is_cuda()) {
      cuda::unary({cuda::UnaryOp::mul_scalar, factor, g.dtype(), g.raw_data(), g.raw_data(), g.numel(),
                   g.device().index});
      continue;
    }
#endif
    if (g.dtype() == DType::f32) {
      scale_in_place(g.data<float>(), g.numel(), static_cast<float>(factor));
    } else {
      scale_in_place(g.data<double>(), g.numel(), factor);
    }
  }
  result.clipped = true;
  return result;
}

}  // namespace lat
