// Embedding: the token lookup table of the model (and, tied, its LM head).
#pragma once
#include <cstdint>

#include "layers/module.h"

namespace lat {

/// Parameter `weight` [num_embeddings, dim], drawn from N(0, init_std^2) (GPT-2 style).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator& gen, double init_std = 0.02);

  /// ids: i64 of any shape -> [*ids.shape, dim] f32. Throws lat::Error when an id is
  /// outside [0, num_embeddings) (naming the id and its position).
  Tensor forward(const Tensor& ids) const;

  int64_t num_embeddings() const { return weight_.size(0); }
  int64_t dim() const { return weight_.size(1); }
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
};

}  // namespace lat
