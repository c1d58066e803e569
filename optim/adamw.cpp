// AdamW: on the CPU one parallel region over the chunks of every parameter; the step's
// scalars are formed in double, per parameter.
#include "optim/adamw.h"

#include <cmath>
#include <sstream>

#include "optim/param_chunks.h"
#include "optim/weight_decay.h"
#ifdef LAT_WITH_CUDA
#include "autograd/cuda/elementwise.h"
#include "optim/adamw_cuda.h"
#endif

namespace lat {
namespace {

// The scalars of one step, already combined: decay_factor = 1 - lr*wd,
// step_size = lr / (1 - beta1^t), inv_bc2_sqrt = 1 / sqrt(1 - beta2^t).
template <class T>
struct AdamWStep {
  T decay_factor, beta1, beta2, step_size, inv_bc2_sqrt, eps;

  template <class U>
  AdamWStep<U> as() const {
    return {static_cast<U>(decay_factor), static_cast<U>(beta1),        static_cast<U>(beta2),
            static_cast<U>(step_size),    static_cast<U>(inv_bc2_sqrt), static_cast<U>(eps)};
  }
};

// n elements of one parameter, on this thread. g is read times grad_scale: a product that
// only feeds further products, so it is rounded as the in-place scaling of clip_grad_norm
// rounded it (and is exact for grad_scale 1).
template <class T>
void adamw_update_cpu(T* p, const T* g, T* m, T* v, int64_t n, AdamWStep<T> s, T grad_scale) {
  const T one_minus_beta1 = T(1) - s.beta1, one_minus_beta2 = T(1) - s.beta2;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i] * grad_scale;
    T mi = s.beta1 * m[i] + one_minus_beta1 * gi;
    T vi = s.beta2 * v[i] + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    T denom = std::sqrt(vi) * s.inv_bc2_sqrt + s.eps;
    p[i] = p[i] * s.decay_factor - s.step_size * mi / denom;
  }
}

// In double; each is rounded to the parameter's dtype where it is used (AdamWStep::as).
AdamWStep<double> step_scalars(const AdamWOptions& o, double lr, double weight_decay, int64_t t) {
  double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  return {1.0 - lr * weight_decay, o.beta1, o.beta2, lr / bc1, 1.0 / std::sqrt(bc2), o.eps};
}

// One CPU parameter of a step: its buffers (f32 or f64 alike) and its step's scalars.
struct CpuParam {
  void *p, *m, *v;
  const void* g;
  DType dtype;
  AdamWStep<double> step;
};

template <class T>
void update_chunk(const CpuParam& u, int64_t begin, int64_t end, double grad_scale) {
  adamw_update_cpu<T>(static_cast<T*>(u.p) + begin, static_cast<const T*>(u.g) + begin, static_cast<T*>(u.m) + begin,
                      static_cast<T*>(u.v) + begin, end - begin, u.step.as<T>(), static_cast<T>(grad_scale));
}

}  // namespace

AdamW::AdamW(std::vector<NamedParameter> params, AdamWOptions options)
    : Optimizer(std::move(params)), options_(options) {
  LAT_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0, "AdamW: beta1: expected a value in [0, 1), got " << options.beta1);
  LAT_CHECK(options.beta2 >= 0.0 && options.beta2 < 1.0, "AdamW: beta2: expected a value in [0, 1), got " << options.beta2);
  LAT_CHECK(options.eps > 0.0, "AdamW: eps: expected > 0, got " << options.eps);
  LAT_CHECK(options.weight_decay >= 0.0, "AdamW: weight_decay: expected >= 0, got " << options.weight_decay);
  for (const NamedParameter& p : params_) decay_.push_back(applies_weight_decay(p.name, p.tensor));
}

std::string AdamW::describe_groups() const {
  std::ostringstream os;
  os << "adamw (betas " << options_.beta1 << ", " << options_.beta2 << ", eps " << options_.eps << ")\n"
     << describe_weight_decay_groups(params_, decay_, options_.weight_decay);
  return os.str();
}

bool AdamW::supports(const Device& device) const { return device.is_cpu() || (device.is_cuda() && cuda_built()); }

void AdamW::update(const std::vector<ParamUpdate>& updates, double grad_scale) {
  std::vector<CpuParam> cpu;
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const ParamUpdate& u : updates) {
    Tensor& p = params_[u.index].tensor;
    Tensor g = p.grad();
    Tensor m = state_buffer(u.index, "exp_avg", true);
    Tensor v = state_buffer(u.index, "exp_avg_sq", true);
    const AdamWStep<double> s =
        step_scalars(options_, u.lr, decay_[u.index] ? options_.weight_decay : 0.0, step_count());
#ifdef LAT_WITH_CUDA
    if (p.device().is_cuda()) {
      // The scaling pass clip_grad_norm would have made, then the fused kernel.
      if (grad_scale != 1.0)
        cuda::unary({cuda::UnaryOp::mul_scalar, grad_scale, g.dtype(), g.raw_data(), g.raw_data(), g.numel(),
                     g.device().index});
      optim_cuda::adamw_update(p.dtype(), p.raw_data(), g.raw_data(), m.raw_data(), v.raw_data(), p.numel(),
                               {s.decay_factor, s.beta1, s.beta2, s.step_size, s.inv_bc2_sqrt, s.eps},
                               p.device().index);
      continue;
    }
#endif
    cpu.push_back({p.raw_data(), m.raw_data(), v.raw_data(), g.raw_data(), p.dtype(), s});
    sizes.push_back(p.numel());
    total += p.numel();
  }
  const std::vector<optim_detail::ParamChunk> chunks = optim_detail::param_chunks(sizes);
  optim_detail::for_each_param_chunk(chunks, total, [&](const optim_detail::ParamChunk& c, size_t) {
    const CpuParam& u = cpu[c.item];
    if (u.dtype == DType::f32)
      update_chunk<float>(u, c.begin, c.end, grad_scale);
    else
      update_chunk<double>(u, c.begin, c.end, grad_scale);
  });
}

}  // namespace lat
