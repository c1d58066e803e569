// SGD with momentum: one OpenMP loop per parameter.
#include "optim/sgd.h"

#include <sstream>

#include "optim/weight_decay.h"

namespace lat {
namespace {

// One parameter's update; `first` means the momentum buffer is taken from d (PyTorch).
template <class T>
void sgd_update_cpu(T* p, const T* g, T* buf, int64_t n, T lr, T momentum, T weight_decay, bool first) {
#pragma omp parallel for simd if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i] + weight_decay * p[i];
    if (buf != nullptr) {
      buf[i] = first ? d : momentum * buf[i] + d;
      d = buf[i];
    }
    p[i] -= lr * d;
  }
}

}  // namespace

Sgd::Sgd(std::vector<NamedParameter> params, SgdOptions options)
    : Optimizer(std::move(params)), options_(options) {
  LAT_CHECK(options.momentum >= 0.0 && options.momentum < 1.0,
            "Sgd: momentum: expected a value in [0, 1), got " << options.momentum);
  LAT_CHECK(options.weight_decay >= 0.0, "Sgd: weight_decay: expected >= 0, got " << options.weight_decay);
  for (const NamedParameter& p : params_) decay_.push_back(applies_weight_decay(p.name, p.tensor));
}

std::string Sgd::describe_groups() const {
  std::ostringstream os;
  os << "sgd (momentum " << options_.momentum << ")\n"
     << describe_weight_decay_groups(params_, decay_, options_.weight_decay);
  return os.str();
}

void Sgd::update(size_t index, double lr) {
  Tensor& p = params_[index].tensor;
  Tensor g = p.grad();
  double weight_decay = decay_[index] ? options_.weight_decay : 0.0;
  Tensor buf;
  bool first = false;
  if (options_.momentum != 0.0) {
    buf = state_buffer(index, "momentum_buffer", false);
    first = !buf.defined();
    if (first) buf = state_buffer(index, "momentum_buffer", true);
  }
  if (p.dtype() == DType::f32) {
    sgd_update_cpu<float>(p.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr, p.numel(),
                          static_cast<float>(lr), static_cast<float>(options_.momentum),
                          static_cast<float>(weight_decay), first);
  } else {
    sgd_update_cpu<double>(p.data<double>(), g.data<double>(), buf.defined() ? buf.data<double>() : nullptr,
                           p.numel(), lr, options_.momentum, weight_decay, first);
  }
}

}  // namespace lat
