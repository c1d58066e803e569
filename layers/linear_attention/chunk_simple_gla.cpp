// chunk_simple_gla (include/lat/linear_attention.h): the argument checks, then the decayed
// family's op (decay.h; the chunk kernels are chunk_simple_gla_cpu.cpp and
// chunk_simple_gla_cuda.cu).
#include "lat/linear_attention.h"
#include "layers/linear_attention/decay.h"

namespace lat {

LinearAttentionOutput chunk_simple_gla(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                       std::optional<float> scale, const Tensor& initial_state,
                                       bool output_final_state, int chunk_size) {
  using namespace linear_attention;
  const char* op = "chunk_simple_gla";
  const Dims d = check_qkv(op, q, k, v);
  check_g(op, g, q, d);
  check_initial_state(op, initial_state, q, d, d.V);
  check_chunk_size(op, chunk_size, q);
  return run_decay(op, Form::chunk, {q, k, v, g, initial_state},
                   {.scale = resolve_scale(scale, d.K),
                    .output_final_state = output_final_state,
                    .chunk_size = chunk_size});
}

}  // namespace lat
