// chunk_gated_delta_rule: argument checks, re-layout to the per-head chunked layout, the
// CPU kernel (chunk_gated_delta_rule_cpu.cpp) and one tape node with the hand-written
// backward. chunk_delta_rule.cpp calls the same op with g undefined.
#include "layers/linear_attention/chunk_gated_delta_rule.h"

#include "layers/linear_attention/chunk_cuda_ops.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention/qk_l2norm.h"
#include "lat/tape.h"

namespace lat::linear_attention {
namespace {

// [B, T, H, D] (D = 1 for [B, T, H]) -> a new [B*H, NT*C, D] tensor, zero padded.
Tensor chunked(const Tensor& x, const Dims& d, int64_t D, int64_t C) {
  Tensor out = Tensor::empty({d.B * d.H, num_chunks(d.T, C) * C, D});
  to_chunked(x.data<float>(), d.B, d.T, d.H, D, C, out.data<float>());
  return out;
}

// The inverse: [B*H, NT*C, D] -> a new tensor of `shape` ([B, T, H, D] or [B, T, H]).
Tensor unchunked(const Tensor& x, const Dims& d, int64_t D, int64_t C, const Shape& shape) {
  Tensor out = Tensor::empty(shape);
  from_chunked(x.data<float>(), d.B, d.T, d.H, D, C, out.data<float>());
  return out;
}

const float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace

LinearAttentionOutput gated_delta_rule_chunk_op(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& g, const Tensor& beta, std::optional<float> scale,
                                                const Tensor& initial_state, bool output_final_state,
                                                bool use_qk_l2norm_in_kernel, int chunk_size) {
  const Dims d = check_qkv(op, q, k, v);
  if (g.defined()) check_g(op, g, q, d);
  check_beta(op, beta, q, d);
  check_initial_state(op, initial_state, q, d, d.V);
  check_chunk_size(op, chunk_size);
  if (q.device().is_cuda())
    return gated_delta_rule_cuda(op, q, k, v, g, beta, resolve_scale(scale, d.K), initial_state, output_final_state,
                                 use_qk_l2norm_in_kernel, chunk_size);
  LAT_CHECK(q.device().is_cpu(), op << ": q: expected a CPU tensor (no device kernel for this op), got "
                                    << q.device().str());

  const int64_t C = chunk_size, BH = d.B * d.H, rows = BH * num_chunks(d.T, C) * C;
  Tensor qc = chunked(q, d, d.K, C), kc = chunked(k, d, d.K, C), vc = chunked(v, d, d.V, C);
  Tensor gc = g.defined() ? chunked(g, d, 1, C) : Tensor();
  Tensor bc = chunked(beta, d, 1, C);
  Tensor q_rstd, k_rstd;
  if (use_qk_l2norm_in_kernel) {
    q_rstd = Tensor::empty({rows});
    k_rstd = Tensor::empty({rows});
    l2norm_rows_forward(qc.data<float>(), rows, d.K, q_rstd.data<float>());
    l2norm_rows_forward(kc.data<float>(), rows, d.K, k_rstd.data<float>());
  }

  GatedDeltaRuleChunkParams p;
  p.BH = BH, p.T = d.T, p.NT = num_chunks(d.T, C), p.C = C, p.K = d.K, p.V = d.V;
  p.scale = resolve_scale(scale, d.K);
  p.q = qc.data<float>(), p.k = kc.data<float>(), p.v = vc.data<float>();
  p.g = data_or_null(gc), p.beta = bc.data<float>(), p.h0 = data_or_null(initial_state);

  Tensor oc = Tensor::empty({BH, p.NT * C, d.V});
  Tensor final_state = output_final_state ? Tensor::empty({d.B, d.H, d.K, d.V}) : Tensor();
  gated_delta_rule_chunk_forward_cpu(p, oc.data<float>(), output_final_state ? final_state.data<float>() : nullptr);
  Tensor o = unchunked(oc, d, d.V, C, {d.B, d.T, d.H, d.V});

  if (needs_grad({&q, &k, &v, &g, &beta, &initial_state})) {
    std::vector<Tensor> outputs{o};
    if (output_final_state) outputs.push_back(final_state);
    // p points into the chunked copies (and initial_state); the closure keeps them alive.
    auto backward_fn = [p, d, C, qc, kc, vc, gc, bc, q_rstd, k_rstd, initial_state](
                           const std::vector<Tensor>& grad_outputs) {
      Tensor doc = chunked(grad_outputs[0], d, d.V, C);
      const float* dht = grad_outputs.size() > 1 ? grad_outputs[1].data<float>() : nullptr;
      Tensor dqc = Tensor::empty(qc.shape()), dkc = Tensor::empty(kc.shape()), dvc = Tensor::empty(vc.shape());
      Tensor dbc = Tensor::empty(bc.shape());
      Tensor dgc = gc.defined() ? Tensor::empty(gc.shape()) : Tensor();
      Tensor dh0 = initial_state.defined() ? Tensor::empty(initial_state.shape()) : Tensor();
      GatedDeltaRuleChunkGrads out;
      out.dq = dqc.data<float>(), out.dk = dkc.data<float>(), out.dv = dvc.data<float>();
      out.dg = gc.defined() ? dgc.data<float>() : nullptr;
      out.dbeta = dbc.data<float>();
      out.dh0 = initial_state.defined() ? dh0.data<float>() : nullptr;
      gated_delta_rule_chunk_backward_cpu(p, doc.data<float>(), dht, out);
      if (q_rstd.defined()) {
        const int64_t rows = q_rstd.numel();
        l2norm_rows_backward(qc.data<float>(), q_rstd.data<float>(), rows, d.K, dqc.data<float>());
        l2norm_rows_backward(kc.data<float>(), k_rstd.data<float>(), rows, d.K, dkc.data<float>());
      }
      return std::vector<Tensor>{unchunked(dqc, d, d.K, C, {d.B, d.T, d.H, d.K}),
                                 unchunked(dkc, d, d.K, C, {d.B, d.T, d.H, d.K}),
                                 unchunked(dvc, d, d.V, C, {d.B, d.T, d.H, d.V}),
                                 gc.defined() ? unchunked(dgc, d, 1, C, {d.B, d.T, d.H}) : Tensor(),
                                 unchunked(dbc, d, 1, C, {d.B, d.T, d.H}), dh0};
    };
    record(op, {q, k, v, g, beta, initial_state}, outputs, backward_fn);
  }
  return {o, final_state};
}

}  // namespace lat::linear_attention

namespace lat {

LinearAttentionOutput chunk_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                             const Tensor& beta, std::optional<float> scale,
                                             const Tensor& initial_state, bool output_final_state,
                                             bool use_qk_l2norm_in_kernel, int chunk_size) {
  LAT_CHECK(g.defined(), "chunk_gated_delta_rule: g: expected a tensor [B, T, H], got an undefined tensor");
  return linear_attention::gated_delta_rule_chunk_op("chunk_gated_delta_rule", q, k, v, g, beta, scale,
                                                     initial_state, output_final_state, use_qk_l2norm_in_kernel,
                                                     chunk_size);
}

}  // namespace lat
