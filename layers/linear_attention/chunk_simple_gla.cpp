// chunk_simple_gla: argument checks, the CPU kernel call and one tape node with the
// hand-written backward (ALGORITHMS.md 2.3; kernel in chunk_simple_gla_cpu.cpp).
#include "layers/linear_attention/chunk_simple_gla.h"

#include "layers/linear_attention/chunk_cuda_ops.h"
#include "layers/linear_attention/common.h"
#include "lat/linear_attention.h"
#include "lat/tape.h"

namespace lat {

LinearAttentionOutput chunk_simple_gla(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                       std::optional<float> scale, const Tensor& initial_state,
                                       bool output_final_state, int chunk_size) {
  using namespace linear_attention;
  const char* op = "chunk_simple_gla";
  Dims d = check_qkv(op, q, k, v);
  check_g(op, g, q, d);
  check_initial_state(op, initial_state, q, d, d.V);
  check_chunk_size(op, chunk_size, q);
  if (q.device().is_cuda())
    return chunk_decay_cuda(op, q, k, v, g, resolve_scale(scale, d.K), false, initial_state, output_final_state,
                            chunk_size);
  check_cpu(op, q);

  ChunkParams p;
  p.q = q.data<float>();
  p.k = k.data<float>();
  p.v = v.data<float>();
  p.g = g.data<float>();
  p.h0 = initial_state.defined() ? initial_state.data<float>() : nullptr;
  p.B = d.B, p.T = d.T, p.H = d.H, p.K = d.K, p.V = d.V, p.C = chunk_size;
  p.scale = resolve_scale(scale, d.K);

  bool grad = needs_grad({&q, &k, &v, &g, &initial_state});
  Tensor o = Tensor::empty({d.B, d.T, d.H, d.V});
  Tensor final_state = output_final_state ? Tensor::empty({d.B, d.H, d.K, d.V}) : Tensor();
  std::shared_ptr<const ChunkSaved> saved =
      chunk_decay_forward_cpu(p, o.data<float>(), output_final_state ? final_state.data<float>() : nullptr, grad);

  if (grad) {
    std::vector<Tensor> outputs{o};
    if (output_final_state) outputs.push_back(final_state);
    bool has_h0 = initial_state.defined();
    record(op, {q, k, v, g, initial_state}, outputs, [p, saved, d, has_h0](const std::vector<Tensor>& grads) {
      Tensor dq = Tensor::empty({d.B, d.T, d.H, d.K}), dk = Tensor::empty({d.B, d.T, d.H, d.K});
      Tensor dv = Tensor::empty({d.B, d.T, d.H, d.V}), dg = Tensor::empty({d.B, d.T, d.H});
      Tensor dh0 = has_h0 ? Tensor::empty({d.B, d.H, d.K, d.V}) : Tensor();
      ChunkGrads out{dq.data<float>(), dk.data<float>(), dv.data<float>(), dg.data<float>(),
                     has_h0 ? dh0.data<float>() : nullptr};
      chunk_decay_backward_cpu(p, *saved, grads[0].data<float>(), grads.size() > 1 ? grads[1].data<float>() : nullptr,
                               out);
      return std::vector<Tensor>{dq, dk, dv, dg, dh0};
    });
  }
  return {o, final_state};
}

}  // namespace lat
