// chunk_gated_delta_rule (include/lat/linear_attention.h): the argument checks, then the
// delta-rule family's op (delta.h; the chunk kernels are chunk_gated_delta_rule_cpu.cpp
// and chunk_gated_delta_rule_cuda.cu).
#include "lat/linear_attention.h"
#include "layers/linear_attention/delta.h"

namespace lat {

LinearAttentionOutput chunk_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                             const Tensor& beta, std::optional<float> scale,
                                             const Tensor& initial_state, bool output_final_state,
                                             bool use_qk_l2norm_in_kernel, int chunk_size) {
  using namespace linear_attention;
  const char* op = "chunk_gated_delta_rule";
  LAT_CHECK(g.defined(), op << ": g: expected a tensor [B, T, H], got an undefined tensor");
  const Dims d = check_qkv(op, q, k, v);
  check_g(op, g, q, d);
  check_beta(op, beta, q, d);
  check_initial_state(op, initial_state, q, d, d.V);
  check_chunk_size(op, chunk_size, q);
  return run_delta(op, Form::chunk, {q, k, v, g, beta, initial_state},
                   {.scale = resolve_scale(scale, d.K),
                    .output_final_state = output_final_state,
                    .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel,
                    .chunk_size = chunk_size});
}

}  // namespace lat
