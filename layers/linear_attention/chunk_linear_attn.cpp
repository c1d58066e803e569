// chunk_linear_attn (include/lat/linear_attention.h): the argument checks, then the
// decayed family's op with no gate (decay.h). The normalizer rides on a constant-1 value
// column (state [K, V + 1], z last) inside the kernels (decay_kernels.h).
#include "lat/linear_attention.h"
#include "layers/linear_attention/decay.h"

namespace lat {

LinearAttentionOutput chunk_linear_attn(const Tensor& q, const Tensor& k, const Tensor& v,
                                        std::optional<float> scale, bool normalize, const Tensor& initial_state,
                                        bool output_final_state, int chunk_size) {
  using namespace linear_attention;
  const char* op = "chunk_linear_attn";
  const Dims d = check_qkv(op, q, k, v);
  check_initial_state(op, initial_state, q, d, normalize ? d.V + 1 : d.V);
  check_chunk_size(op, chunk_size, q);
  return run_decay(op, Form::chunk, {q, k, v, Tensor(), initial_state},
                   {.scale = resolve_scale(scale, d.K),
                    .normalize = normalize,
                    .output_final_state = output_final_state,
                    .chunk_size = chunk_size});
}

}  // namespace lat
