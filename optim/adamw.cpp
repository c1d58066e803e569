// AdamW: one fused OpenMP loop per parameter; the step's scalars are formed in double.
#include "optim/adamw.h"

#include <cmath>
#include <sstream>

#include "optim/weight_decay.h"
#ifdef LAT_WITH_CUDA
#include "optim/adamw_cuda.h"
#endif

namespace lat {
namespace {

// The scalars of one step, already combined: decay_factor = 1 - lr*wd,
// step_size = lr / (1 - beta1^t), inv_bc2_sqrt = 1 / sqrt(1 - beta2^t).
template <class T>
struct AdamWStep {
  T decay_factor, beta1, beta2, step_size, inv_bc2_sqrt, eps;
};

template <class T>
void adamw_update_cpu(T* p, const T* g, T* m, T* v, int64_t n, AdamWStep<T> s) {
  const T one_minus_beta1 = T(1) - s.beta1, one_minus_beta2 = T(1) - s.beta2;
#pragma omp parallel for simd if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    T mi = s.beta1 * m[i] + one_minus_beta1 * gi;
    T vi = s.beta2 * v[i] + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    T denom = std::sqrt(vi) * s.inv_bc2_sqrt + s.eps;
    p[i] = p[i] * s.decay_factor - s.step_size * mi / denom;
  }
}

template <class T>
AdamWStep<T> step_scalars(const AdamWOptions& o, double lr, double weight_decay, int64_t t) {
  double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  return {static_cast<T>(1.0 - lr * weight_decay), static_cast<T>(o.beta1), static_cast<T>(o.beta2),
          static_cast<T>(lr / bc1), static_cast<T>(1.0 / std::sqrt(bc2)), static_cast<T>(o.eps)};
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

void AdamW::update(size_t index, double lr) {
  Tensor& p = params_[index].tensor;
  Tensor g = p.grad();
  Tensor m = state_buffer(index, "exp_avg", true);
  Tensor v = state_buffer(index, "exp_avg_sq", true);
  double weight_decay = decay_[index] ? options_.weight_decay : 0.0;
#ifdef LAT_WITH_CUDA
  if (p.device().is_cuda()) {
    const AdamWStep<double> s = step_scalars<double>(options_, lr, weight_decay, step_count());
    optim_cuda::adamw_update(p.dtype(), p.raw_data(), g.raw_data(), m.raw_data(), v.raw_data(), p.numel(),
                             {s.decay_factor, s.beta1, s.beta2, s.step_size, s.inv_bc2_sqrt, s.eps},
                             p.device().index);
    return;
  }
#endif
  if (p.dtype() == DType::f32) {
    adamw_update_cpu<float>(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), p.numel(),
                            step_scalars<float>(options_, lr, weight_decay, step_count()));
  } else {
    adamw_update_cpu<double>(p.data<double>(), g.data<double>(), m.data<double>(), v.data<double>(), p.numel(),
                             step_scalars<double>(options_, lr, weight_decay, step_count()));
  }
}

}  // namespace lat
