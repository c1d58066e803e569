// Optimizer base: a list of named parameters, one step counter, per-parameter state
// buffers that a checkpoint saves and restores bit for bit (DESIGN.md, /optimizer).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// A trainable tensor and its checkpoint name (dotted, e.g. "layers.0.attn.q_proj.weight").
struct NamedParameter {
  std::string name;
  Tensor tensor;
};

/// Optimizer state as a checkpoint stores it: parameter name -> {buffer name -> tensor},
/// e.g. state["layers.0.mlp.up_proj.weight"]["exp_avg"]. Parameters whose state has not
/// been created yet (no step with a gradient so far) are absent.
using OptimizerState = std::map<std::string, std::map<std::string, Tensor>>;

/// Base of SGD and AdamW. `step(lr)` counts one optimizer step (the first is step 1) and
/// updates every parameter that has a gradient; parameters without one (frozen, unused)
/// are skipped and keep their state. Parameters and gradients are f32 or f64, on the CPU
/// (AdamW: also on CUDA). On the CPU one step updates all parameters in one OpenMP
/// parallel region (optim/param_chunks.h).
class Optimizer {
 public:
  /// Throws lat::Error on an undefined tensor, an integer dtype or a duplicate name.
  explicit Optimizer(std::vector<NamedParameter> params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update with learning rate `lr` (times the parameter's lr multiplier), each gradient
  /// multiplied by `grad_scale` (rounded to its dtype) where it is read: the same bits as
  /// scaling the gradients in place first (clip_grad_norm) and stepping with grad_scale 1,
  /// without the extra pass. The gradients themselves are left as they are. Throws
  /// lat::Error when grad_scale is negative or not finite, or on a gradient of another
  /// shape, dtype or device than its parameter.
  void step(double lr, double grad_scale = 1.0);
  /// Drops every parameter's gradient.
  void zero_grad();
  /// Completed optimizer steps (0 before the first).
  int64_t step_count() const { return step_count_; }

  /// "sgd" or "adamw": the /optimizer `type` attribute.
  virtual std::string type() const = 0;
  /// The buffer names one parameter's state may hold, e.g. {"exp_avg", "exp_avg_sq"}.
  virtual std::vector<std::string> buffer_names() const = 0;
  /// The weight-decay groups, one line each, for the trainer to log at start.
  virtual std::string describe_groups() const = 0;

  const std::vector<NamedParameter>& parameters() const { return params_; }
  /// Scales the learning rate of parameter `name` (config `lr_mult`). Throws on an unknown name.
  void set_lr_mult(const std::string& name, double mult);

  /// The state buffers: handles to the optimizer's own tensors, not copies (the next step
  /// updates them in place; a checkpoint writer writes them before that).
  OptimizerState export_state() const;
  /// Replaces the state with a deep copy of `state` and sets the step counter: the next
  /// step is then bit-identical to the one of the optimizer that exported it. Throws
  /// lat::Error naming an unknown parameter or buffer, or a shape/dtype mismatch.
  void import_state(const OptimizerState& state, int64_t step_count);

 protected:
  /// A parameter that this step updates: its index in params_ and its learning rate (the
  /// step's times its multiplier).
  struct ParamUpdate {
    size_t index = 0;
    double lr = 0.0;
  };
  /// Updates the parameters of `updates` (each has a gradient of its shape, dtype and
  /// device) at step `step_count()`, reading every gradient times `grad_scale`.
  virtual void update(const std::vector<ParamUpdate>& updates, double grad_scale) = 0;
  /// Whether update() has a kernel for parameters on `device` (the CPU; AdamW also CUDA).
  virtual bool supports(const Device& device) const { return device.is_cpu(); }
  /// The buffer `buffer` of parameter `index`, created as zeros on first use when `create`.
  /// Undefined when absent and !create.
  Tensor state_buffer(size_t index, const std::string& buffer, bool create);

  std::vector<NamedParameter> params_;

 private:
  std::vector<std::map<std::string, Tensor>> state_;
  std::vector<double> lr_mult_;
  int64_t step_count_ = 0;
};

}  // namespace lat
