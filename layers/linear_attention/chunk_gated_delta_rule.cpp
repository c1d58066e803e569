// chunk_gated_delta_rule: argument checks, re-layout to the per-head chunked layout, the
// CPU kernel (chunk_gated_delta_rule_cpu.cpp) and one tape node with the hand-written
// backward. chunk_delta_rule.cpp calls the same op with g undefined.
#include "layers/linear_attention/chunk_gated_delta_rule.h"

#include <memory>
#include <vector>

#include "autograd/cpu/aligned_buffer.h"
#include "lat/tape.h"
#include "layers/linear_attention/chunk_cuda_ops.h"
#include "layers/linear_attention/chunk_layout.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention/qk_l2norm.h"

namespace lat::linear_attention {

using cpu::AlignedBuffer;
namespace {

// The op's inputs in the per-head chunked layout (workspace buffers, so repeated calls do
// not fault in fresh pages), q and k normalized when asked for, with their rstd. Forward
// fills it; the tape node keeps it for the backward.
struct ChunkedInputs {
  AlignedBuffer q, k, v, g, beta, q_rstd, k_rstd;
};

}  // namespace

LinearAttentionOutput gated_delta_rule_chunk_op(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& g, const Tensor& beta, std::optional<float> scale,
                                                const Tensor& initial_state, bool output_final_state,
                                                bool use_qk_l2norm_in_kernel, int chunk_size) {
  const Dims d = check_qkv(op, q, k, v);
  if (g.defined()) check_g(op, g, q, d);
  check_beta(op, beta, q, d);
  check_initial_state(op, initial_state, q, d, d.V);
  check_chunk_size(op, chunk_size, q);
  if (q.device().is_cuda())
    return gated_delta_rule_cuda(op, q, k, v, g, beta, resolve_scale(scale, d.K), initial_state, output_final_state,
                                 use_qk_l2norm_in_kernel, chunk_size);
  check_cpu(op, q);

  const int64_t C = chunk_size, BH = d.B * d.H, NT = num_chunks(d.T, C), rows = BH * NT * C;
  auto in = std::make_shared<ChunkedInputs>();
  in->q = AlignedBuffer(rows * d.K), in->k = AlignedBuffer(rows * d.K), in->v = AlignedBuffer(rows * d.V);
  in->beta = AlignedBuffer(rows);
  std::vector<ToChunked> arrays{{q.data<float>(), in->q.data(), d.K},
                                {k.data<float>(), in->k.data(), d.K},
                                {v.data<float>(), in->v.data(), d.V},
                                {beta.data<float>(), in->beta.data(), 1}};
  if (g.defined()) {
    in->g = AlignedBuffer(rows);
    arrays.push_back({g.data<float>(), in->g.data(), 1});
  }
  to_chunked(arrays, d.B, d.T, d.H, C);
  if (use_qk_l2norm_in_kernel) {
    in->q_rstd = AlignedBuffer(rows);
    in->k_rstd = AlignedBuffer(rows);
    l2norm_rows_forward(in->q.data(), rows, d.K, in->q_rstd.data());
    l2norm_rows_forward(in->k.data(), rows, d.K, in->k_rstd.data());
  }

  GatedDeltaRuleChunkParams p;
  p.BH = BH, p.T = d.T, p.NT = NT, p.C = C, p.K = d.K, p.V = d.V;
  p.scale = resolve_scale(scale, d.K);
  p.q = in->q.data(), p.k = in->k.data(), p.v = in->v.data();
  p.g = g.defined() ? in->g.data() : nullptr, p.beta = in->beta.data();
  p.h0 = initial_state.defined() ? initial_state.data<float>() : nullptr;

  AlignedBuffer oc(rows * d.V);
  Tensor final_state = output_final_state ? Tensor::empty({d.B, d.H, d.K, d.V}) : Tensor();
  gated_delta_rule_chunk_forward_cpu(p, oc.data(), output_final_state ? final_state.data<float>() : nullptr);
  Tensor o = Tensor::empty({d.B, d.T, d.H, d.V});
  from_chunked({{oc.data(), o.data<float>(), d.V}}, d.B, d.T, d.H, C);

  if (needs_grad({&q, &k, &v, &g, &beta, &initial_state})) {
    std::vector<Tensor> outputs{o};
    if (output_final_state) outputs.push_back(final_state);
    // p points into `in` and initial_state: the closure keeps `in`, the node its inputs.
    auto backward_fn = [p, d, rows, in, l2 = use_qk_l2norm_in_kernel](const std::vector<Tensor>& grad_outputs) {
      const int64_t C = p.C;
      AlignedBuffer d_o(rows * d.V);
      to_chunked({{grad_outputs[0].data<float>(), d_o.data(), d.V}}, d.B, d.T, d.H, C);
      const float* dht = grad_outputs.size() > 1 ? grad_outputs[1].data<float>() : nullptr;
      AlignedBuffer dq(rows * d.K), dk(rows * d.K), dv(rows * d.V), dg(p.g ? rows : 0), dbeta(rows);
      Tensor dh0 = p.h0 ? Tensor::empty({d.B, d.H, d.K, d.V}) : Tensor();
      GatedDeltaRuleChunkGrads out;
      out.dq = dq.data(), out.dk = dk.data(), out.dv = dv.data(), out.dbeta = dbeta.data();
      out.dg = p.g ? dg.data() : nullptr;
      out.dh0 = p.h0 ? dh0.data<float>() : nullptr;
      gated_delta_rule_chunk_backward_cpu(p, d_o.data(), dht, out);
      if (l2) {
        l2norm_rows_backward(in->q.data(), in->q_rstd.data(), rows, d.K, dq.data());
        l2norm_rows_backward(in->k.data(), in->k_rstd.data(), rows, d.K, dk.data());
      }
      Tensor dq_api = Tensor::empty({d.B, d.T, d.H, d.K}), dk_api = Tensor::empty({d.B, d.T, d.H, d.K});
      Tensor dv_api = Tensor::empty({d.B, d.T, d.H, d.V}), dbeta_api = Tensor::empty({d.B, d.T, d.H});
      Tensor dg_api = p.g ? Tensor::empty({d.B, d.T, d.H}) : Tensor();
      std::vector<FromChunked> grads{{dq.data(), dq_api.data<float>(), d.K},
                                     {dk.data(), dk_api.data<float>(), d.K},
                                     {dv.data(), dv_api.data<float>(), d.V},
                                     {dbeta.data(), dbeta_api.data<float>(), 1}};
      if (p.g) grads.push_back({dg.data(), dg_api.data<float>(), 1});
      from_chunked(grads, d.B, d.T, d.H, C);
      return std::vector<Tensor>{dq_api, dk_api, dv_api, dg_api, dbeta_api, dh0};
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
  return linear_attention::gated_delta_rule_chunk_op("chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                                                     output_final_state, use_qk_l2norm_in_kernel, chunk_size);
}

}  // namespace lat
