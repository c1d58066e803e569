// chunk_simple_gla, fused_recurrent_simple_gla and recurrent_step_simple_gla
// (include/lat/linear_attention.h): the decayed family with its gate g required (decay.h;
// the chunk kernels are chunk_simple_gla_cpu.cpp and chunk_simple_gla_cuda.cu).
#include "lat/linear_attention.h"
#include "layers/linear_attention/decay.h"

namespace lat {

using linear_attention::DecayInputs;
using linear_attention::DecayOptions;
using linear_attention::Form;

LinearAttentionOutput chunk_simple_gla(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                       std::optional<float> scale, const Tensor& initial_state, bool output_final_state,
                                       int chunk_size, const Tensor& cu_seqlens) {
  const char* op = "chunk_simple_gla";
  linear_attention::check_defined(op, "g", g, "[B, T, H]");
  return linear_attention::run_decay(
      op, Form::chunk, DecayInputs{q, k, v, g, initial_state, cu_seqlens},
      DecayOptions{.scale = scale, .output_final_state = output_final_state, .chunk_size = chunk_size});
}

LinearAttentionOutput fused_recurrent_simple_gla(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                                 std::optional<float> scale, const Tensor& initial_state,
                                                 bool output_final_state, const Tensor& cu_seqlens) {
  const char* op = "fused_recurrent_simple_gla";
  linear_attention::check_defined(op, "g", g, "[B, T, H]");
  return linear_attention::run_decay(op, Form::fused_recurrent, DecayInputs{q, k, v, g, initial_state, cu_seqlens},
                                     DecayOptions{.scale = scale, .output_final_state = output_final_state});
}

Tensor recurrent_step_simple_gla(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                 float scale, Tensor& state) {
  const char* op = "recurrent_step_simple_gla";
  linear_attention::check_defined(op, "g_t", g_t, "[B, H]");
  return linear_attention::run_decay_step(op, DecayInputs{q_t, k_t, v_t, g_t, Tensor(), Tensor()},
                                          DecayOptions{.scale = scale}, state);
}

}  // namespace lat
