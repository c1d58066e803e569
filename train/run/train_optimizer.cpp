// TrainOptimizer: building the optimizer from the config, clipping, and its checkpoint state.
#include "train/run/train_optimizer.h"

#include <algorithm>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/sgd.h"
#include "train/config/config.h"

namespace lat {
namespace {

std::vector<NamedParameter> as_named_parameters(const std::vector<NamedTensor>& params) {
  std::vector<NamedParameter> out;
  out.reserve(params.size());
  for (const auto& [name, tensor] : params) out.push_back({name, tensor});
  return out;
}

}  // namespace

TrainOptimizer::TrainOptimizer(const TrainConfig& train, const std::vector<NamedTensor>& params) {
  if (train.optimizer == "adamw") {
    AdamWOptions o;
    o.beta1 = train.betas[0];
    o.beta2 = train.betas[1];
    o.eps = train.eps;
    o.weight_decay = train.weight_decay;
    optimizer_ = std::make_unique<AdamW>(as_named_parameters(params), o);
  } else {
    LAT_CHECK(train.optimizer == "sgd",
              "TrainOptimizer: train.optimizer: expected adamw or sgd, got '" << train.optimizer << "'");
    SgdOptions o;
    o.momentum = train.momentum;
    o.weight_decay = train.weight_decay;
    optimizer_ = std::make_unique<Sgd>(as_named_parameters(params), o);
  }
}

TrainOptimizer::~TrainOptimizer() = default;

GradNorm TrainOptimizer::clip_grad_norm(double max_norm) {
  const ClipResult r = clip_factor(optimizer_->parameters(), max_norm);
  grad_scale_ = r.factor;
  return {r.norm, r.finite};
}

void TrainOptimizer::step(double lr) {
  optimizer_->step(lr, grad_scale_);
  zero_grad();
}

void TrainOptimizer::zero_grad() {
  optimizer_->zero_grad();
  grad_scale_ = 1.0;
}

int64_t TrainOptimizer::step_count() const { return optimizer_->step_count(); }

std::string TrainOptimizer::type() const { return optimizer_->type(); }

std::string TrainOptimizer::describe_groups() const { return optimizer_->describe_groups(); }

void TrainOptimizer::set_lr_mult(const std::string& name, double mult) { optimizer_->set_lr_mult(name, mult); }

CheckpointOptimizer TrainOptimizer::snapshot() const {
  CheckpointOptimizer s;
  s.type = optimizer_->type();
  s.step = optimizer_->step_count();
  const OptimizerState state = optimizer_->export_state();
  for (const NamedParameter& p : optimizer_->parameters()) {
    auto it = state.find(p.name);
    if (it == state.end()) continue;
    s.params.push_back({p.name, {it->second.begin(), it->second.end()}});
  }
  return s;
}

void TrainOptimizer::restore(const CheckpointOptimizer& snapshot) {
  LAT_CHECK(snapshot.type == optimizer_->type(), "TrainOptimizer::restore: expected " << optimizer_->type()
                                                     << " state, got '" << snapshot.type << "'");
  OptimizerState state;
  for (const CheckpointParamState& p : snapshot.params)
    for (const auto& [buffer, tensor] : p.buffers) state[p.name][buffer] = tensor;
  optimizer_->import_state(state, snapshot.step);
}

void TrainOptimizer::save_to(Checkpoint& ckpt) const { ckpt.optimizer = snapshot(); }

void TrainOptimizer::load_from(const Checkpoint& ckpt, const TrainConfig& writer, const std::string& source) {
  LAT_CHECK(!ckpt.optimizer.type.empty(),
            "resume: '" << source << "' holds no optimizer state (a weights-only checkpoint)");
  LAT_CHECK(ckpt.optimizer.type == type(), "resume: '" << source << "' holds " << ckpt.optimizer.type
                                                       << " state but train.optimizer is " << type());
  // A group for a parameter this run does not train (an empty one passes restore()) means
  // the file is not what this run wrote.
  for (const CheckpointParamState& saved : ckpt.optimizer.params)
    if (std::none_of(optimizer_->parameters().begin(), optimizer_->parameters().end(),
                     [&](const NamedParameter& p) { return p.name == saved.name; }))
      throw ConfigError("resume: '" + source + "': /optimizer/" + saved.name +
                        ": optimizer state for no trainable parameter of this model; expected groups only for its " +
                        std::to_string(optimizer_->parameters().size()) +
                        " trainable parameters (a damaged checkpoint; nothing in train.out_dir was changed)");
  // restore() takes whatever state there is; a parameter left without it would silently
  // restart from zeros while the others continue.
  if (ckpt.optimizer.step > 0 && keeps_state(writer)) {
    for (const NamedParameter& p : optimizer_->parameters()) {
      const auto saved = std::find_if(ckpt.optimizer.params.begin(), ckpt.optimizer.params.end(),
                                      [&](const CheckpointParamState& s) { return s.name == p.name; });
      const bool has_group = saved != ckpt.optimizer.params.end();
      for (const std::string& buffer : optimizer_->buffer_names()) {
        if (has_group && std::any_of(saved->buffers.begin(), saved->buffers.end(),
                                     [&](const auto& entry) { return entry.first == buffer; }))
          continue;
        throw ConfigError("resume: '" + source + "': no optimizer state for parameter '" + p.name +
                          "': expected /optimizer/" + p.name + "/" + buffer + " (" + type() + " after " +
                          std::to_string(ckpt.optimizer.step) + " updates), found " +
                          (has_group ? "none" : "no /optimizer/" + p.name + " group") +
                          " (a damaged checkpoint; nothing in train.out_dir was changed)");
      }
    }
  }
  try {
    restore(ckpt.optimizer);
  } catch (const Error& e) {  // a tensor of the wrong shape or an unknown name: say which file
    throw Error("resume: '" + source + "': " + e.what());
  }
}

bool TrainOptimizer::keeps_state(const TrainConfig& train) {
  return train.optimizer == "adamw" || train.momentum != 0.0;
}

}  // namespace lat
