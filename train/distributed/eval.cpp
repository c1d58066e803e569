// Evals with the batches dealt round-robin over the ranks.
#include "train/distributed/eval.h"

#include <vector>

namespace lat {
namespace {

// Sums the loss of this rank's batches (index % N == rank) of `count` batches, then over the
// ranks; `batch(i)` gives batch i.
template <class BatchFn>
EvalResult shared_eval(int64_t count, const HybridLM& model, Device device, const Distributed& dist, BatchFn batch) {
  std::vector<double> sums = {0.0, 0.0};  // loss sum (nats), targets
  for (int64_t i = dist.rank(); i < count; i += dist.world_size()) {
    const Batch b = batch(i);
    sums[0] += batch_loss_sum(model, b, device);
    sums[1] += static_cast<double>(b.tokens);
  }
  dist.all_reduce_sum(sums);
  EvalResult r;
  r.tokens = static_cast<int64_t>(sums[1]);
  r.loss = sums[0] / sums[1];
  return r;
}

}  // namespace

EvalResult evaluate_val_batches(const HybridLM& model, const BatchLoader& loader, int64_t batches,
                                int64_t batch_size, Device device, const Distributed& dist) {
  if (dist.world_size() == 1) return evaluate_val_batches(model, loader, batches, batch_size, device);
  LAT_CHECK(batches >= 1, "evaluate_val_batches: batches: expected >= 1, got " << batches);
  return shared_eval(batches, model, device, dist, [&](int64_t i) { return loader.eval_batch(i, batch_size); });
}

EvalResult evaluate_val_split(const HybridLM& model, const Dataset& dataset, int64_t batch_size, Device device,
                              const Distributed& dist) {
  if (dist.world_size() == 1) return evaluate_val_split(model, dataset, batch_size, device);
  SequentialEval windows(dataset, batch_size);
  return shared_eval(windows.num_batches(), model, device, dist, [&](int64_t i) { return windows.batch(i); });
}

}  // namespace lat
