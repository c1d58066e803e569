// chunk_delta_rule (include/lat/linear_attention.h): DeltaNet (Schlag et al. 2021; Yang et
// al. 2024) is the gated delta rule with g = 0, so after the argument checks it runs the
// same op and kernels with g left out (every decay is 1, no dg); see delta_kernels.h.
#include "lat/linear_attention.h"
#include "layers/linear_attention/delta.h"

namespace lat {

LinearAttentionOutput chunk_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                       std::optional<float> scale, const Tensor& initial_state, bool output_final_state,
                                       bool use_qk_l2norm_in_kernel, int chunk_size) {
  using namespace linear_attention;
  const char* op = "chunk_delta_rule";
  const Dims d = check_qkv(op, q, k, v);
  check_beta(op, beta, q, d);
  check_initial_state(op, initial_state, q, d, d.V);
  check_chunk_size(op, chunk_size, q);
  return run_delta(op, Form::chunk, {q, k, v, Tensor(), beta, initial_state},
                   {.scale = resolve_scale(scale, d.K),
                    .output_final_state = output_final_state,
                    .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel,
                    .chunk_size = chunk_size});
}

}  // namespace lat
