// Module: the parameter container every layer derives from. A module registers its own
// parameters and its child modules by name, in order; named_parameters() walks them
// depth-first and joins the names with dots, giving flash-linear-attention-style names
// such as "layers.3.attn.q_proj.weight" (DESIGN.md, Checkpoint).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// A parameter with its full dotted name.
using NamedTensor = std::pair<std::string, Tensor>;

/// Base of all layers. Owns its children; neither copyable nor movable, because parents
/// and the checkpoint code hold references to registered parameters and children.
class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// (dotted name, parameter) pairs in registration order, children depth-first where
  /// they were registered. The Tensors are handles: writing into them (copy_, fill_)
  /// changes the module's parameters, which is how checkpoints are loaded.
  std::vector<NamedTensor> named_parameters() const;
  /// The parameters in the order of named_parameters().
  std::vector<Tensor> parameters() const;
  /// Drops the accumulated gradient of every parameter.
  void zero_grad();
  /// Total number of parameter elements.
  int64_t num_parameters() const;

 protected:
  /// Registers `value` (f32, a leaf) as the parameter `name` and marks it requires_grad.
  /// Returns the handle. Throws lat::Error when the name is empty, contains a dot, is
  /// already taken, or the tensor is undefined, not f32 or not a leaf.
  Tensor register_parameter(const std::string& name, Tensor value);

  /// Registers `child` under `name` and takes ownership. Returns a reference that stays
  /// valid as long as this module lives. Same name rules as register_parameter.
  template <class M>
  M& register_module(const std::string& name, std::unique_ptr<M> child) {
    M& ref = *child;
    add_child(name, std::unique_ptr<Module>(std::move(child)));
    return ref;
  }

 private:
  // One registration: either a parameter or a child module (the other is empty).
  struct Entry {
    std::string name;
    Tensor parameter;
    std::unique_ptr<Module> child;
  };

  void check_new_name(const std::string& name) const;
  void add_child(const std::string& name, std::unique_ptr<Module> child);
  void collect(const std::string& prefix, std::vector<NamedTensor>& out) const;

  std::vector<Entry> entries_;
};

/// An ordered list of children named "0", "1", ... (as torch.nn.ModuleList), e.g. the
/// `layers` of a model, whose parameters are then "layers.{i}.<...>".
class ModuleList : public Module {
 public:
  /// Appends `child` under the name of its index; returns a reference to it.
  template <class M>
  M& append(std::unique_ptr<M> child) {
    M& ref = register_module(std::to_string(items_.size()), std::move(child));
    items_.push_back(&ref);
    return ref;
  }
  size_t size() const { return items_.size(); }
  /// The i-th child; throws lat::Error when i is out of range.
  Module& at(size_t i) const;

 private:
  std::vector<Module*> items_;
};

}  // namespace lat
