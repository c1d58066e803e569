// chunk_delta_rule: DeltaNet (Schlag et al. 2021; Yang et al. 2024) is the gated delta rule
// with g = 0, so it runs the same op and chunk kernel with g left out (every decay is 1,
// no dg); see chunk_gated_delta_rule.h.
#include "layers/linear_attention/chunk_gated_delta_rule.h"

namespace lat {

LinearAttentionOutput chunk_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                       std::optional<float> scale, const Tensor& initial_state, bool output_final_state,
                                       bool use_qk_l2norm_in_kernel, int chunk_size) {
  return linear_attention::gated_delta_rule_chunk_op("chunk_delta_rule", q, k, v, Tensor(), beta, scale, initial_state,
                                                     output_final_state, use_qk_l2norm_in_kernel, chunk_size);
}

}  // namespace lat
