// run_delta and run_delta_step (delta.h): the delta-rule family's argument checks, its kernels
// for the span loops and the backend switch of per_sequence.h, and the one tape node.
#include "layers/linear_attention/delta.h"

#include <memory>
#include <vector>

#include "lat/tape.h"
#include "layers/linear_attention/delta_kernels.h"
#include "layers/linear_attention/per_sequence.h"

namespace lat::linear_attention {
namespace {

// The delta-rule family's kernels and layouts for the span loops (per_sequence.h).
struct Delta {
  using Params = DeltaParams;
  using Saved = DeltaSaved;
  using Grads = DeltaGrads;
  static constexpr Kernels<Params, Saved, Grads> chunk_cpu{chunk_delta_forward_cpu, chunk_delta_backward_cpu};
  static constexpr Kernels<Params, Saved, Grads> fused_recurrent_cpu{fused_recurrent_delta_forward_cpu,
                                                                     fused_recurrent_delta_backward_cpu};
#ifdef LAT_WITH_CUDA
  static constexpr Kernels<Params, Saved, Grads> chunk_cuda{chunk_delta_forward_cuda, chunk_delta_backward_cuda};
#endif
  static int64_t state_v(const Params& p) { return p.V; }
  static void offset_rows(Params& p, int64_t row) { p.beta += row; }
  static void offset_rows(Grads& g, int64_t row) { g.dbeta += row; }
};

// The params of a call; T = 1 for a decoding step, whose tensors have no T axis.
DeltaParams params_of(const DeltaInputs& in, const DeltaOptions& options, int64_t T) {
  DeltaParams p;
  p.q = in.q.data<float>(), p.k = in.k.data<float>(), p.v = in.v.data<float>();
  p.g = data_or_null(in.g), p.beta = in.beta.data<float>(), p.h0 = data_or_null(in.initial_state);
  p.B = in.q.size(0), p.T = T, p.H = in.q.size(-2), p.K = in.q.size(-1), p.V = in.v.size(-1);
  p.C = chunk_rows(options.chunk_size, T);
  p.scale = resolve_scale(options.scale, p.K);
  p.use_qk_l2norm_in_kernel = options.use_qk_l2norm_in_kernel;
  p.device = in.q.device().index;
  // Read on the calling thread (the precision is thread-local, the kernels' workers would
  // see fp32); the tape node's copy of p gives its backward the forward's precision.
  p.precision = in.q.device().is_cpu() && bf16_compute(in.q.device()) ? Precision::bf16 : Precision::fp32;
  return p;
}

}  // namespace

LinearAttentionOutput run_delta(const char* op, Form form, const DeltaInputs& in, const DeltaOptions& options) {
  const Dims d = check_qkv(op, in.q, in.k, in.v);
  if (in.g.defined()) check_g(op, in.g, in.q, d);
  check_beta(op, in.beta, in.q, d);
  const Spans spans = call_spans(op, in.cu_seqlens, d);
  check_initial_state(op, in.initial_state, in.q, d, d.V, spans);
  if (form == Form::chunk)
    check_chunk_size(op, options.chunk_size, in.q);
  else
    check_cpu(op, in.q);

  const DeltaParams p = params_of(in, options, d.T);
  const Device device = in.q.device();
  const bool grad = needs_grad({&in.q, &in.k, &in.v, &in.g, &in.beta, &in.initial_state});
  Tensor o = Tensor::empty({p.B, p.T, p.H, p.V}, DType::f32, device);
  Tensor final_state = options.output_final_state ? Tensor::empty({spans.states, p.H, p.K, p.V}, DType::f32, device)
                                                  : Tensor();
  std::vector<std::shared_ptr<const DeltaSaved>> saved = forward_spans<Delta>(
      form, device, p, spans.spans, o.data<float>(), data_or_null(final_state), grad);
  if (!grad) return {o, final_state};

  std::vector<Tensor> outputs{o};
  if (final_state.defined()) outputs.push_back(final_state);
  // p points into the inputs: the node keeps those its backward reads.
  const std::vector<Tensor> inputs{in.q, in.k, in.v, in.g, in.beta, in.initial_state};
  record(op, inputs, outputs,
         [form, device, p, spans = spans.spans, states = spans.states, saved = std::move(saved),
          kept = inputs_backward_reads(form, inputs, in.initial_state)](const std::vector<Tensor>& grad_outputs) {
           Tensor dq = Tensor::empty({p.B, p.T, p.H, p.K}, DType::f32, device);
           Tensor dk = Tensor::empty({p.B, p.T, p.H, p.K}, DType::f32, device);
           Tensor dv = Tensor::empty({p.B, p.T, p.H, p.V}, DType::f32, device);
           Tensor dg = p.g ? Tensor::empty({p.B, p.T, p.H}, DType::f32, device) : Tensor();
           Tensor dbeta = Tensor::empty({p.B, p.T, p.H}, DType::f32, device);
           Tensor dh0 = p.h0 ? Tensor::empty({states, p.H, p.K, p.V}, DType::f32, device) : Tensor();
           const float* dht = grad_outputs.size() > 1 ? grad_outputs[1].data<float>() : nullptr;
           backward_spans<Delta>(form, device, p, spans, saved, grad_outputs[0].data<float>(), dht,
                                 {dq.data<float>(), dk.data<float>(), dv.data<float>(), data_or_null(dg),
                                  dbeta.data<float>(), data_or_null(dh0)});
           return std::vector<Tensor>{dq, dk, dv, dg, dbeta, dh0};
         });
  return {o, final_state};
}

Tensor run_delta_step(const char* op, const DeltaInputs& in, const DeltaOptions& options, Tensor& state) {
  const Dims d = check_step(op, in.q, in.k, in.v, state);
  if (in.g.defined()) check_step_g(op, in.g, d);
  check_step_beta(op, in.beta, d);
  const DeltaParams p = params_of(in, options, 1);
  Tensor o = Tensor::empty({p.B, p.H, p.V}, DType::f32, in.q.device());
#ifdef LAT_WITH_CUDA
  if (in.q.device().is_cuda()) {
    recurrent_step_delta_cuda(p, state.data<float>(), o.data<float>());
    return o;
  }
#endif
  recurrent_step_delta_cpu(p, state.data<float>(), o.data<float>());
  return o;
}

}  // namespace lat::linear_attention
