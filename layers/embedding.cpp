// Embedding: registers the table; the lookup and its scatter-add backward are lat::embedding.
#include "layers/embedding.h"

#include "lat/ops.h"

namespace lat {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen, double init_std) {
  LAT_CHECK(num_embeddings > 0 && dim > 0,
            "Embedding: expected positive sizes, got num_embeddings " << num_embeddings << ", dim " << dim);
  weight_ = register_parameter("weight", Tensor::randn({num_embeddings, dim}, gen, DType::f32, 0.0, init_std));
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight_, ids); }

}  // namespace lat
