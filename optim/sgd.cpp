// SGD with momentum: one parallel region over the chunks of every parameter.
#include "optim/sgd.h"

#include <sstream>

#include "optim/param_chunks.h"
#include "optim/weight_decay.h"

namespace lat {
namespace {

// n elements of one parameter, on this thread; `first` means the momentum buffer is taken
// from d (PyTorch). The decay product comes first in the source: the compiler's contraction
// into a fused multiply-add then takes it, and the gradient times grad_scale is rounded as
// the in-place scaling of clip_grad_norm rounded it (exact for grad_scale 1).
template <class T>
void sgd_update_cpu(T* p, const T* g, T* buf, int64_t n, T lr, T momentum, T weight_decay, bool first, T grad_scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T decay = weight_decay * p[i];
    const T gi = g[i] * grad_scale;
    T d = gi + decay;
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

void Sgd::update(const std::vector<ParamUpdate>& updates, double grad_scale) {
  // One parameter of the step: buf is null without momentum.
  struct CpuParam {
    void* p;
    const void* g;
    void* buf;
    DType dtype;
    double lr, weight_decay;
    bool first;
  };
  std::vector<CpuParam> params;
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const ParamUpdate& u : updates) {
    Tensor& p = params_[u.index].tensor;
    Tensor buf;
    bool first = false;
    if (options_.momentum != 0.0) {
      buf = state_buffer(u.index, "momentum_buffer", false);
      first = !buf.defined();
      if (first) buf = state_buffer(u.index, "momentum_buffer", true);
    }
    params.push_back({p.raw_data(), p.grad().raw_data(), buf.defined() ? buf.raw_data() : nullptr, p.dtype(), u.lr,
                      decay_[u.index] ? options_.weight_decay : 0.0, first});
    sizes.push_back(p.numel());
    total += p.numel();
  }
  const std::vector<optim_detail::ParamChunk> chunks = optim_detail::param_chunks(sizes);
  optim_detail::for_each_param_chunk(chunks, total, [&](const optim_detail::ParamChunk& c, size_t) {
    const CpuParam& u = params[c.item];
    const int64_t b = c.begin, n = c.end - c.begin;
    if (u.dtype == DType::f32) {
      sgd_update_cpu<float>(static_cast<float*>(u.p) + b, static_cast<const float*>(u.g) + b,
                            u.buf ? static_cast<float*>(u.buf) + b : nullptr, n, static_cast<float>(u.lr),
                            static_cast<float>(options_.momentum), static_cast<float>(u.weight_decay), u.first,
                            static_cast<float>(grad_scale));
    } else {
      sgd_update_cpu<double>(static_cast<double*>(u.p) + b, static_cast<const double*>(u.g) + b,
                             u.buf ? static_cast<double*>(u.buf) + b : nullptr, n, u.lr, options_.momentum,
                             u.weight_decay, u.first, grad_scale);
    }
  });
}

}  // namespace lat
