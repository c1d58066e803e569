// chunk_linear_attn: argument checks, the CPU kernel call and one tape node with the
// hand-written backward (ALGORITHMS.md 2.2). The chunkwise part is the decayed kernel
// of chunk_simple_gla.h without a gate; the normalizer rides on a constant-1 value
// column (state [K, V + 1], z last), then chunk_linear_attn.h divides by it.
#include "layers/linear_attention/chunk_linear_attn.h"

#include "layers/linear_attention/chunk_cuda_ops.h"
#include "layers/linear_attention/chunk_simple_gla.h"
#include "layers/linear_attention/common.h"
#include "lat/linear_attention.h"
#include "lat/tape.h"

namespace lat {

LinearAttentionOutput chunk_linear_attn(const Tensor& q, const Tensor& k, const Tensor& v,
                                        std::optional<float> scale, bool normalize, const Tensor& initial_state,
                                        bool output_final_state, int chunk_size) {
  using namespace linear_attention;
  const char* op = "chunk_linear_attn";
  Dims d = check_qkv(op, q, k, v);
  int64_t Vs = normalize ? d.V + 1 : d.V;
  check_initial_state(op, initial_state, q, d, Vs);
  check_chunk_size(op, chunk_size, q);
  if (q.device().is_cuda())
    return chunk_decay_cuda(op, q, k, v, Tensor(), resolve_scale(scale, d.K), normalize, initial_state,
                            output_final_state, chunk_size);
  check_cpu(op, q);

  ChunkParams p;
  p.q = q.data<float>();
  p.k = k.data<float>();
  p.v = v.data<float>();
  p.h0 = initial_state.defined() ? initial_state.data<float>() : nullptr;
  p.B = d.B, p.T = d.T, p.H = d.H, p.K = d.K, p.V = d.V, p.C = chunk_size;
  p.scale = resolve_scale(scale, d.K);
  p.ones_column = normalize;

  bool grad = needs_grad({&q, &k, &v, &initial_state});
  Tensor o = Tensor::empty({d.B, d.T, d.H, d.V});
  // With the normalizer the kernel's readout r [B, T, H, V + 1] is kept for backward.
  Tensor r = normalize ? Tensor::empty({d.B, d.T, d.H, Vs}) : o;
  Tensor final_state = output_final_state ? Tensor::empty({d.B, d.H, d.K, Vs}) : Tensor();
  std::shared_ptr<const ChunkSaved> saved =
      chunk_decay_forward_cpu(p, r.data<float>(), output_final_state ? final_state.data<float>() : nullptr, grad);
  if (normalize) normalize_forward_cpu(r.data<float>(), d.B * d.T * d.H, d.V, o.data<float>());

  if (grad) {
    std::vector<Tensor> outputs{o};
    if (output_final_state) outputs.push_back(final_state);
    bool has_h0 = initial_state.defined();
    Tensor readout = normalize ? r : Tensor();
    record(op, {q, k, v, initial_state}, outputs,
           [p, saved, d, Vs, has_h0, readout](const std::vector<Tensor>& grads) {
             Tensor dq = Tensor::empty({d.B, d.T, d.H, d.K}), dk = Tensor::empty({d.B, d.T, d.H, d.K});
             Tensor dv = Tensor::empty({d.B, d.T, d.H, d.V});
             Tensor dh0 = has_h0 ? Tensor::empty({d.B, d.H, d.K, Vs}) : Tensor();
             Tensor dr = grads[0];
             if (p.ones_column) {
               dr = Tensor::empty({d.B, d.T, d.H, Vs});
               normalize_backward_cpu(readout.data<float>(), grads[0].data<float>(), d.B * d.T * d.H, d.V,
                                      dr.data<float>());
             }
             ChunkGrads out{dq.data<float>(), dk.data<float>(), dv.data<float>(), nullptr,
                            has_h0 ? dh0.data<float>() : nullptr};
             chunk_decay_backward_cpu(p, *saved, dr.data<float>(),
                                      grads.size() > 1 ? grads[1].data<float>() : nullptr, out);
             return std::vector<Tensor>{dq, dk, dv, dh0};
           });
  }
  return {o, final_state};
}

}  // namespace lat
