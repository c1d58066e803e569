// Optimizer base: step counting, gradient skipping, state export/import.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace lat {

Optimizer::Optimizer(std::vector<NamedParameter> params)
    : params_(std::move(params)), state_(params_.size()), lr_mult_(params_.size(), 1.0) {
  std::set<std::string> names;
  for (const NamedParameter& p : params_) {
    LAT_CHECK(p.tensor.defined(), "Optimizer: parameter '" << p.name << "': undefined tensor");
    LAT_CHECK(p.tensor.dtype() == DType::f32 || p.tensor.dtype() == DType::f64,
              "Optimizer: parameter '" << p.name << "': expected dtype f32 or f64, got "
                                       << dtype_name(p.tensor.dtype()));
    LAT_CHECK(names.insert(p.name).second, "Optimizer: parameter name '" << p.name << "' appears twice");
  }
}

void Optimizer::step(double lr, double grad_scale) {
  LAT_CHECK(std::isfinite(grad_scale) && grad_scale >= 0.0,
            type() << ".step: grad_scale: expected a finite value >= 0, got " << grad_scale);
  ++step_count_;
  std::vector<ParamUpdate> updates;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].tensor;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    LAT_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype() && g.device() == p.device(),
              type() << ".step: parameter '" << params_[i].name << "': gradient " << shape_str(g.shape()) << " "
                     << dtype_name(g.dtype()) << " on " << g.device().str() << ", expected "
                     << shape_str(p.shape()) << " " << dtype_name(p.dtype()) << " on " << p.device().str());
    LAT_CHECK(supports(p.device()), type() << ".step: parameter '" << params_[i].name
                                           << "': not implemented on " << p.device().str());
    updates.push_back({i, lr * lr_mult_[i]});
  }
  update(updates, grad_scale);
}

void Optimizer::zero_grad() {
  for (NamedParameter& p : params_) p.tensor.zero_grad();
}

void Optimizer::set_lr_mult(const std::string& name, double mult) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) {
      lr_mult_[i] = mult;
      return;
    }
  }
  LAT_CHECK(false, "Optimizer::set_lr_mult: no parameter named '" << name << "'");
}

Tensor Optimizer::state_buffer(size_t index, const std::string& buffer, bool create) {
  auto& buffers = state_[index];
  auto it = buffers.find(buffer);
  if (it != buffers.end()) return it->second;
  if (!create) return Tensor();
  const Tensor& p = params_[index].tensor;
  Tensor t = Tensor::zeros(p.shape(), p.dtype(), p.device());
  buffers.emplace(buffer, t);
  return t;
}

OptimizerState Optimizer::export_state() const {
  OptimizerState state;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!state_[i].empty()) state.emplace(params_[i].name, state_[i]);
  return state;
}

void Optimizer::import_state(const OptimizerState& state, int64_t step_count) {
  LAT_CHECK(step_count >= 0, type() << ".import_state: step_count: expected >= 0, got " << step_count);
  const std::vector<std::string> allowed = buffer_names();
  std::vector<std::map<std::string, Tensor>> imported(params_.size());
  for (const auto& [name, buffers] : state) {
    // An init-capture: clang before 16 cannot capture a structured binding.
    auto it = std::find_if(params_.begin(), params_.end(),
                           [&name = name](const NamedParameter& p) { return p.name == name; });
    LAT_CHECK(it != params_.end(), type() << ".import_state: state for unknown parameter '" << name << "'");
    const Tensor& p = it->tensor;
    for (const auto& [buffer, t] : buffers) {
      LAT_CHECK(std::find(allowed.begin(), allowed.end(), buffer) != allowed.end(),
                type() << ".import_state: parameter '" << name << "': unknown buffer '" << buffer << "'");
      LAT_CHECK(t.defined() && t.shape() == p.shape() && t.dtype() == p.dtype(),
                type() << ".import_state: '" << name << "/" << buffer << "': expected "
                       << shape_str(p.shape()) << " " << dtype_name(p.dtype()) << ", got "
                       << (t.defined() ? shape_str(t.shape()) + " " + dtype_name(t.dtype()) : "undefined"));
      Tensor copy = Tensor::empty(p.shape(), p.dtype(), p.device());
      copy.copy_(t);
      imported[it - params_.begin()].emplace(buffer, copy);
    }
  }
  state_ = std::move(imported);
  step_count_ = step_count;
}

}  // namespace lat
