// Module registration and the depth-first walk that builds dotted parameter names.
#include "layers/module.h"

namespace lat {

void Module::check_new_name(const std::string& name) const {
  LAT_CHECK(!name.empty(), "Module::register: name: expected a non-empty name");
  LAT_CHECK(name.find('.') == std::string::npos,
            "Module::register: name: expected no '.' (dots join the levels), got '" << name << "'");
  for (const Entry& e : entries_)
    LAT_CHECK(e.name != name, "Module::register: name: '" << name << "' is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name);
  LAT_CHECK(value.defined(), "Module::register_parameter: " << name << ": undefined tensor");
  LAT_CHECK(value.dtype() == DType::f32,
            "Module::register_parameter: " << name << ": expected f32, got " << dtype_name(value.dtype()));
  LAT_CHECK(value.is_leaf(), "Module::register_parameter: " << name << ": expected a leaf tensor");
  value.set_requires_grad(true);
  entries_.push_back({name, value, nullptr});
  return value;
}

void Module::add_child(const std::string& name, std::unique_ptr<Module> child) {
  check_new_name(name);
  LAT_CHECK(child != nullptr, "Module::register_module: " << name << ": null module");
  entries_.push_back({name, Tensor(), std::move(child)});
}

void Module::collect(const std::string& prefix, std::vector<NamedTensor>& out) const {
  for (const Entry& e : entries_) {
    if (e.child)
      e.child->collect(prefix + e.name + ".", out);
    else
      out.emplace_back(prefix + e.name, e.parameter);
  }
}

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> out;
  collect("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::zero_grad() {
  for (Tensor& t : parameters()) t.zero_grad();
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

Module& ModuleList::at(size_t i) const {
  LAT_CHECK(i < items_.size(), "ModuleList::at: index " << i << " out of range for " << items_.size() << " items");
  return *items_[i];
}

}  // namespace lat
