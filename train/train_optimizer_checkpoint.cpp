// TrainOptimizer, the checkpoint side (see train_optimizer.h for why it is split).
#include "train/checkpoint.h"
#include "train/train_optimizer.h"

namespace lat {

void TrainOptimizer::save_to(Checkpoint& ckpt) const {
  OptimizerSnapshot s = snapshot();
  ckpt.optimizer.type = s.type;
  ckpt.optimizer.step = s.step;
  ckpt.optimizer.params.clear();
  for (auto& [name, buffers] : s.params) ckpt.optimizer.params.push_back({name, std::move(buffers)});
}

void TrainOptimizer::load_from(const Checkpoint& ckpt, const std::string& source) {
  LAT_CHECK(!ckpt.optimizer.type.empty(),
            "resume: '" << source << "' holds no optimizer state (a weights-only checkpoint)");
  LAT_CHECK(ckpt.optimizer.type == type(), "resume: '" << source << "' holds " << ckpt.optimizer.type
                                                       << " state but train.optimizer is " << type());
  OptimizerSnapshot s;
  s.type = ckpt.optimizer.type;
  s.step = ckpt.optimizer.step;
  for (const ParamState& p : ckpt.optimizer.params) s.params.emplace_back(p.name, p.buffers);
  restore(s);
}

}  // namespace lat
