// Global-norm clipping: a deterministic chunked sum of squares over all gradients in one
// parallel region, then (clip_grad_norm only) one scaling pass, also in one region.
#include "optim/clip.h"

#ifdef LAT_WITH_CUDA
#include "autograd/cuda/elementwise.h"
#include "autograd/cuda/reduce.h"
#endif

#include <cmath>

#include "autograd/cpu/lane_sum.h"
#include "optim/param_chunks.h"

namespace lat {
namespace {

using optim_detail::ParamChunk;

// In interleaved lanes (lane_sum): a single running sum waits for the previous add at every
// element, several times longer than the load takes. Each square of an f32 is exact in double.
template <class T>
double sum_of_squares(const T* g, int64_t begin, int64_t end) {
  return cpu::lane_sum(end - begin, [&](int64_t j) {
    const double x = static_cast<double>(g[begin + j]);
    return x * x;
  });
}

template <class T>
void scale_in_place(T* g, int64_t begin, int64_t end, T factor) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) g[i] *= factor;
}

// The defined CPU gradients of `params` in order (f32 or f64), with their chunks
// (param_chunks.h). Throws lat::Error naming `fn` and the parameter on another device.
struct CpuGrads {
  std::vector<void*> data;
  std::vector<DType> dtype;
  std::vector<ParamChunk> chunks;
  int64_t total = 0;
};

CpuGrads cpu_grads(const std::vector<NamedParameter>& params, const char* fn) {
  CpuGrads out;
  std::vector<int64_t> sizes;
  for (const NamedParameter& p : params) {
    Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
#ifdef LAT_WITH_CUDA
    if (g.device().is_cuda()) continue;
#endif
    LAT_CHECK(g.device().is_cpu(), fn << ": parameter '" << p.name << "': not implemented on " << g.device().str());
    out.data.push_back(g.raw_data());
    out.dtype.push_back(g.dtype());
    sizes.push_back(g.numel());
    out.total += g.numel();
  }
  out.chunks = optim_detail::param_chunks(sizes);
  return out;
}

}  // namespace

double grad_norm(const std::vector<NamedParameter>& params) {
  // Each chunk's sum of squares in its own slot, then a tensor's chunks in order, then the
  // tensors in order: the thread count decides only who computes which slot.
  const CpuGrads cpu = cpu_grads(params, "grad_norm");
  std::vector<double> partial(cpu.chunks.size(), 0.0);
  optim_detail::for_each_param_chunk(cpu.chunks, cpu.total, [&](const ParamChunk& c, size_t slot) {
    const void* g = cpu.data[c.item];
    partial[slot] = cpu.dtype[c.item] == DType::f32 ? sum_of_squares(static_cast<const float*>(g), c.begin, c.end)
                                                    : sum_of_squares(static_cast<const double*>(g), c.begin, c.end);
  });
  double total = 0.0;
  size_t item = 0, slot = 0;
  for (const NamedParameter& p : params) {
    Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
#ifdef LAT_WITH_CUDA
    if (g.device().is_cuda()) {
      total += cuda::sum_of_squares(g.raw_data(), g.dtype(), g.numel(), g.device().index);
      continue;
    }
#endif
    double tensor_sum = 0.0;
    for (; slot < cpu.chunks.size() && cpu.chunks[slot].item == item; ++slot) tensor_sum += partial[slot];
    total += tensor_sum;
    ++item;
  }
  return std::sqrt(total);
}

ClipResult clip_factor(const std::vector<NamedParameter>& params, double max_norm) {
  LAT_CHECK(max_norm >= 0.0, "clip_grad_norm: max_norm (train.grad_clip): expected >= 0, got " << max_norm);
  ClipResult result;
  result.norm = grad_norm(params);
  result.finite = std::isfinite(result.norm);
  if (!result.finite || max_norm == 0.0 || result.norm <= max_norm) return result;
  result.factor = max_norm / (result.norm + 1e-6);
  result.clipped = true;
  return result;
}

ClipResult clip_grad_norm(const std::vector<NamedParameter>& params, double max_norm) {
  const ClipResult result = clip_factor(params, max_norm);
  if (!result.clipped) return result;
#ifdef LAT_WITH_CUDA
  for (const NamedParameter& p : params) {
    Tensor g = p.tensor.grad();
    if (g.defined() && g.device().is_cuda())
      cuda::unary({cuda::UnaryOp::mul_scalar, result.factor, g.dtype(), g.raw_data(), g.raw_data(), g.numel(),
                   g.device().index});
  }
#endif
  const CpuGrads cpu = cpu_grads(params, "clip_grad_norm");
  optim_detail::for_each_param_chunk(cpu.chunks, cpu.total, [&](const ParamChunk& c, size_t) {
    void* g = cpu.data[c.item];
    if (cpu.dtype[c.item] == DType::f32)
      scale_in_place(static_cast<float*>(g), c.begin, c.end, static_cast<float>(result.factor));
    else
      scale_in_place(static_cast<double*>(g), c.begin, c.end, result.factor);
  });
  return result;
}

}  // namespace lat
