// run_decay and run_decay_step (decay.h): the decayed family's argument checks, its kernels
// for the span loops and the backend switch of per_sequence.h, and the one tape node.
#include "layers/linear_attention/decay.h"

#include <memory>
#include <vector>

#include "lat/tape.h"
#include "layers/linear_attention/decay_kernels.h"
#include "layers/linear_attention/per_sequence.h"

namespace lat::linear_attention {
namespace {

// The decayed family's kernels and layouts for the span loops (per_sequence.h).
struct Decay {
  using Params = DecayParams;
  using Saved = DecaySaved;
  using Grads = DecayGrads;
  static constexpr Kernels<Params, Saved, Grads> chunk_cpu{chunk_decay_forward_cpu, chunk_decay_backward_cpu};
  static constexpr Kernels<Params, Saved, Grads> fused_recurrent_cpu{fused_recurrent_decay_forward_cpu,
                                                                     fused_recurrent_decay_backward_cpu};
#ifdef LAT_WITH_CUDA
  static constexpr Kernels<Params, Saved, Grads> chunk_cuda{chunk_decay_forward_cuda, chunk_decay_backward_cuda};
#endif
  static int64_t state_v(const Params& p) { return p.Vs(); }
  // g and dg are the family's only per-token inputs and gradients.
  static void offset_rows(Params&, int64_t) {}
  static void offset_rows(Grads&, int64_t) {}
};

// The params of a call; T = 1 for a decoding step, whose tensors have no T axis.
DecayParams params_of(const DecayInputs& in, const DecayOptions& options, int64_t T) {
  DecayParams p;
  p.q = in.q.data<float>(), p.k = in.k.data<float>(), p.v = in.v.data<float>();
  p.g = data_or_null(in.g), p.h0 = data_or_null(in.initial_state);
  p.B = in.q.size(0), p.T = T, p.H = in.v.size(-2), p.K = in.q.size(-1), p.V = in.v.size(-1);
  p.Hk = in.q.size(-2);
  p.C = chunk_rows(options.chunk_size, T);
  p.scale = resolve_scale(options.scale, p.K);
  p.normalize = options.normalize;
  p.device = in.q.device().index;
  // Read on the calling thread (the precision is thread-local, the kernels' workers would
  // see fp32); the tape node's copy of p gives its backward the forward's precision.
  p.precision = in.q.device().is_cpu() && bf16_compute(in.q.device()) ? Precision::bf16 : Precision::fp32;
  return p;
}

// Grouped q/k heads for the kernels that read only Hk == H (every one but the CPU chunk
// kernel): q and k repeated to H heads on the tape (repeat_heads, common.h, whose backward sums
// each group's gradients), so every form and backend has one semantics. A step's q_t, k_t
// [B, Hk, K] go through a T = 1 axis.
DecayInputs with_heads_repeated(const DecayInputs& in, int64_t H) {
  const int64_t Hk = in.q.size(-2);
  if (Hk == H) return in;
  DecayInputs r = in;
  auto repeat = [&](const Tensor& t) {
    if (t.dim() == 4) return repeat_heads(t, H / Hk);
    return repeat_heads(t.reshape({t.size(0), 1, Hk, t.size(2)}), H / Hk).reshape({t.size(0), H, t.size(2)});
  };
  r.q = repeat(in.q), r.k = repeat(in.k);
  return r;
}

}  // namespace

LinearAttentionOutput run_decay(const char* op, Form form, const DecayInputs& call, const DecayOptions& options) {
  const Dims d = check_qkv(op, call.q, call.k, call.v, Dtypes::f32, QkHeads::grouped);
  if (call.g.defined()) check_g(op, call.g, call.q, d);
  const Spans spans = call_spans(op, call.cu_seqlens, d);
  check_initial_state(op, call.initial_state, call.q, d, options.normalize ? d.V + 1 : d.V, spans);
  if (form == Form::chunk)
    check_chunk_size(op, options.chunk_size, call.q);
  else
    check_cpu(op, call.q);
  const bool grouped_kernel = form == Form::chunk && call.q.device().is_cpu();
  const DecayInputs in = grouped_kernel ? call : with_heads_repeated(call, d.H);

  const DecayParams p = params_of(in, options, d.T);
  const Device device = in.q.device();
  const bool grad = needs_grad({&in.q, &in.k, &in.v, &in.g, &in.initial_state});
  Tensor o = Tensor::empty({p.B, p.T, p.H, p.V}, DType::f32, device);
  Tensor final_state = options.output_final_state ? Tensor::empty({spans.states, p.H, p.K, p.Vs()}, DType::f32, device)
                                                  : Tensor();
  std::vector<std::shared_ptr<const DecaySaved>> saved = forward_spans<Decay>(
      form, device, p, spans.spans, o.data<float>(), data_or_null(final_state), grad);
  if (!grad) return {o, final_state};

  std::vector<Tensor> outputs{o};
  if (final_state.defined()) outputs.push_back(final_state);
  // p points into the inputs, which the backward reads: the node keeps them.
  const std::vector<Tensor> inputs{in.q, in.k, in.v, in.g, in.initial_state};
  record(op, inputs, outputs,
         [form, device, p, spans = spans.spans, states = spans.states, saved = std::move(saved),
          kept = inputs](const std::vector<Tensor>& grad_outputs) {
           Tensor dq = Tensor::empty({p.B, p.T, p.Hk, p.K}, DType::f32, device);
           Tensor dk = Tensor::empty({p.B, p.T, p.Hk, p.K}, DType::f32, device);
           Tensor dv = Tensor::empty({p.B, p.T, p.H, p.V}, DType::f32, device);
           Tensor dg = p.g ? Tensor::empty({p.B, p.T, p.H}, DType::f32, device) : Tensor();
           Tensor dh0 = p.h0 ? Tensor::empty({states, p.H, p.K, p.Vs()}, DType::f32, device) : Tensor();
           const float* dht = grad_outputs.size() > 1 ? grad_outputs[1].data<float>() : nullptr;
           backward_spans<Decay>(
               form, device, p, spans, saved, grad_outputs[0].data<float>(), dht,
               {dq.data<float>(), dk.data<float>(), dv.data<float>(), data_or_null(dg), data_or_null(dh0)});
           return std::vector<Tensor>{dq, dk, dv, dg, dh0};
         });
  return {o, final_state};
}

Tensor run_decay_step(const char* op, const DecayInputs& call, const DecayOptions& options, Tensor& state) {
  const Dims d = check_step(op, call.q, call.k, call.v, state, options.normalize ? 1 : 0, QkHeads::grouped);
  if (call.g.defined()) check_step_g(op, call.g, d);
  const DecayInputs in = with_heads_repeated(call, d.H);
  const DecayParams p = params_of(in, options, 1);
  Tensor o = Tensor::empty({p.B, p.H, p.V}, DType::f32, in.q.device());
#ifdef LAT_WITH_CUDA
  if (in.q.device().is_cuda()) {
    recurrent_step_decay_cuda(p, state.data<float>(), o.data<float>());
    return o;
  }
#endif
  recurrent_step_decay_cpu(p, state.data<float>(), o.data<float>());
  return o;
}

}  // namespace lat::linear_attention
