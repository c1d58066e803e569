// run_decay and run_decay_step (decay.h): the decayed family's argument checks, the one
// switch over forms and backends, and the one tape node.
#include "layers/linear_attention/decay.h"

#include <memory>
#include <vector>

#include "lat/tape.h"
#include "layers/linear_attention/decay_kernels.h"

namespace lat::linear_attention {
namespace {

// The one switch over forms and backends. fused_recurrent has CPU kernels only (its ops
// accept CPU tensors only); a CUDA tensor exists only in a lat built with CUDA.
std::shared_ptr<const DecaySaved> forward(Form form, [[maybe_unused]] const Device& device, const DecayParams& p,
                                          float* o, float* ht, bool save) {
  if (form == Form::fused_recurrent) return fused_recurrent_decay_forward_cpu(p, o, ht, save);
#ifdef LAT_WITH_CUDA
  if (device.is_cuda()) return chunk_decay_forward_cuda(p, o, ht, save);
#endif
  return chunk_decay_forward_cpu(p, o, ht, save);
}

void backward(Form form, [[maybe_unused]] const Device& device, const DecayParams& p, const DecaySaved& saved,
              const float* d_o, const float* dht, const DecayGrads& grads) {
  if (form == Form::fused_recurrent)
    fused_recurrent_decay_backward_cpu(p, saved, d_o, dht, grads);
#ifdef LAT_WITH_CUDA
  else if (device.is_cuda())
    chunk_decay_backward_cuda(p, saved, d_o, dht, grads);
#endif
  else
    chunk_decay_backward_cpu(p, saved, d_o, dht, grads);
}

// The params of a call; T = 1 for a decoding step, whose tensors have no T axis.
DecayParams params_of(const DecayInputs& in, const DecayOptions& options, int64_t T) {
  DecayParams p;
  p.q = in.q.data<float>(), p.k = in.k.data<float>(), p.v = in.v.data<float>();
  p.g = data_or_null(in.g), p.h0 = data_or_null(in.initial_state);
  p.B = in.q.size(0), p.T = T, p.H = in.q.size(-2), p.K = in.q.size(-1), p.V = in.v.size(-1);
  p.C = options.chunk_size;
  p.scale = resolve_scale(options.scale, p.K);
  p.normalize = options.normalize;
  p.device = in.q.device().index;
  return p;
}

// Where span s starts in each layout, in floats: [B, T, H, K] (q, k and their gradients),
// [B, T, H, V] (v, o), [B, T, H] (g) and the states [states, H, K, Vs]. All 0 for the
// whole call.
struct SpanOffsets {
  int64_t k, v, row, state;
  SpanOffsets(const DecayParams& p, const Span& s)
      : k(s.t0 * p.H * p.K), v(s.t0 * p.H * p.V), row(s.t0 * p.H), state(s.n * p.H * p.K * p.Vs()) {}
};

// The params of span s: its T and pointers to its first token and its initial state (p
// itself for the whole call).
DecayParams span_params(const DecayParams& p, const Span& s) {
  const SpanOffsets at(p, s);
  DecayParams r = p;
  r.q = p.q + at.k, r.k = p.k + at.k, r.v = p.v + at.v;
  r.g = offset_or_null(p.g, at.row), r.h0 = offset_or_null(p.h0, at.state);
  r.T = s.t1 - s.t0;
  return r;
}

}  // namespace

LinearAttentionOutput run_decay(const char* op, Form form, const DecayInputs& in, const DecayOptions& options) {
  const Dims d = check_qkv(op, in.q, in.k, in.v);
  if (in.g.defined()) check_g(op, in.g, in.q, d);
  const Spans spans = call_spans(op, in.cu_seqlens, d);
  check_initial_state(op, in.initial_state, in.q, d, options.normalize ? d.V + 1 : d.V, spans);
  if (form == Form::chunk)
    check_chunk_size(op, options.chunk_size, in.q);
  else
    check_cpu(op, in.q);

  const DecayParams p = params_of(in, options, d.T);
  const Device device = in.q.device();
  const bool grad = needs_grad({&in.q, &in.k, &in.v, &in.g, &in.initial_state});
  Tensor o = Tensor::empty({p.B, p.T, p.H, p.V}, DType::f32, device);
  Tensor final_state = options.output_final_state ? Tensor::empty({spans.states, p.H, p.K, p.Vs()}, DType::f32, device)
                                                  : Tensor();
  std::vector<std::shared_ptr<const DecaySaved>> saved;
  for (const Span& s : spans.spans) {
    const SpanOffsets at(p, s);
    saved.push_back(forward(form, device, span_params(p, s), o.data<float>() + at.v,
                            offset_or_null(data_or_null(final_state), at.state), grad));
  }
  if (!grad) return {o, final_state};

  std::vector<Tensor> outputs{o};
  if (final_state.defined()) outputs.push_back(final_state);
  // p points into the node's inputs, which the tape keeps alive until backward.
  record(op, {in.q, in.k, in.v, in.g, in.initial_state}, outputs,
         [form, device, p, spans = spans.spans, states = spans.states,
          saved = std::move(saved)](const std::vector<Tensor>& grad_outputs) {
           Tensor dq = Tensor::empty({p.B, p.T, p.H, p.K}, DType::f32, device);
           Tensor dk = Tensor::empty({p.B, p.T, p.H, p.K}, DType::f32, device);
           Tensor dv = Tensor::empty({p.B, p.T, p.H, p.V}, DType::f32, device);
           Tensor dg = p.g ? Tensor::empty({p.B, p.T, p.H}, DType::f32, device) : Tensor();
           Tensor dh0 = p.h0 ? Tensor::empty({states, p.H, p.K, p.Vs()}, DType::f32, device) : Tensor();
           const float* dht = grad_outputs.size() > 1 ? grad_outputs[1].data<float>() : nullptr;
           for (size_t i = 0; i < spans.size(); ++i) {
             const SpanOffsets at(p, spans[i]);
             backward(form, device, span_params(p, spans[i]), *saved[i], grad_outputs[0].data<float>() + at.v,
                      offset_or_null(dht, at.state),
                      {dq.data<float>() + at.k, dk.data<float>() + at.k, dv.data<float>() + at.v,
                       offset_or_null(data_or_null(dg), at.row), offset_or_null(data_or_null(dh0), at.state)});
           }
           return std::vector<Tensor>{dq, dk, dv, dg, dh0};
         });
  return {o, final_state};
}

Tensor run_decay_step(const char* op, const DecayInputs& in, const DecayOptions& options, Tensor& state) {
  const Dims d = check_step(op, in.q, in.k, in.v, state, options.normalize ? 1 : 0);
  if (in.g.defined()) check_step_g(op, in.g, d);
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
