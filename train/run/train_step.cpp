#include "train/run/train_step.h"

#include "lat/ops.h"
#include "lat/tape.h"

namespace lat {

double accumulate_gradients(const HybridLM& model, const std::vector<Batch>& micro, int64_t total_tokens,
                            Device device) {
  double loss = 0.0;
  for (const Batch& b : micro) {
    Tensor logits = model.forward(b.inputs.to(device), b.cu_seqlens);
    Tensor ce = cross_entropy(logits.reshape({-1, logits.size(-1)}), b.targets.to(device).reshape({-1}), kIgnoreIndex);
    const double weight = static_cast<double>(b.tokens) / static_cast<double>(total_tokens);
    loss += ce.item() * weight;
    backward(weight == 1.0 ? ce : ce * weight);
  }
  return loss;
}

}  // namespace lat
