// chunk_kda, fused_recurrent_kda and recurrent_step_kda (include/lat/linear_attention.h):
// the one place that checks KDA's arguments, picks its kernels (kda_kernels.h) and records
// its tape node; the span loops are per_sequence.h's.
#include <memory>
#include <utility>
#include <vector>

#include "lat/linear_attention.h"
#include "lat/tape.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention/kda_kernels.h"
#include "layers/linear_attention/per_sequence.h"

namespace lat {
namespace linear_attention {
namespace {

// KDA's kernels and layouts for the span loops (per_sequence.h).
struct Kda {
  using Params = KdaParams;
  using Saved = KdaSaved;
  using Grads = KdaGrads;
  static constexpr Kernels<Params, Saved, Grads> chunk_cpu{chunk_kda_forward_cpu, chunk_kda_backward_cpu};
  static constexpr Kernels<Params, Saved, Grads> fused_recurrent_cpu{fused_recurrent_kda_forward_cpu,
                                                                     fused_recurrent_kda_backward_cpu};
#ifdef LAT_WITH_CUDA
  static constexpr Kernels<Params, Saved, Grads> chunk_cuda{chunk_kda_forward_cuda, chunk_kda_backward_cuda};
  static constexpr Kernels<Params, Saved, Grads> fused_recurrent_cuda{fused_recurrent_kda_forward_cuda,
                                                                      fused_recurrent_kda_backward_cuda};
#endif
  static int64_t state_v(const Params& p) { return p.V; }
  // gk is [B, T, H, K]: `row` rows of K channels.
  static void offset_rows(Params& p, int64_t row) { p.beta += row, p.gk += row * p.K; }
  static void offset_rows(Grads& g, int64_t row) { g.dbeta += row, g.dgk += row * g.K; }
};

// A call's tensors: q, k [B, T, H, K], v [B, T, H, V], g [B, T, H, K], beta [B, T, H],
// initial_state and cu_seqlens optional (as DeltaInputs, delta.h); a step's have no T axis.
struct Inputs {
  Tensor q, k, v, g, beta, initial_state, cu_seqlens;
};

// A call's options, as the public ops take them.
struct Options {
  std::optional<float> scale;
  bool output_final_state = false;
  bool use_qk_l2norm_in_kernel = false;
  int chunk_size = 64;
};

// The params of a call; T = 1 for a decoding step, whose tensors have no T axis.
KdaParams params_of(const Inputs& in, const Options& options, int64_t T) {
  KdaParams p;
  p.q = in.q.data<float>(), p.k = in.k.data<float>(), p.v = in.v.data<float>();
  p.gk = in.g.data<float>(), p.beta = in.beta.data<float>(), p.h0 = data_or_null(in.initial_state);
  p.B = in.q.size(0), p.T = T, p.H = in.q.size(-2), p.K = in.q.size(-1), p.V = in.v.size(-1);
  p.C = chunk_rows(options.chunk_size, T);
  p.device = in.q.device().index;
  p.scale = resolve_scale(options.scale, p.K);
  p.use_qk_l2norm_in_kernel = options.use_qk_l2norm_in_kernel;
  // Read on the calling thread (the precision is thread-local); the tape node's copy of p
  // gives its backward the forward's precision.
  p.precision = in.q.device().is_cpu() && bf16_compute(in.q.device()) ? Precision::bf16 : Precision::fp32;
  return p;
}

// Checks the arguments (lat::Error naming `op`), runs the kernels of `form` once per span
// of the call and, when any input requires grad, records one tape node named `op` with
// inputs q, k, v, g, beta, initial_state.
LinearAttentionOutput run_kda(const char* op, Form form, const Inputs& in, const Options& options) {
  const Dims d = check_qkv(op, in.q, in.k, in.v);
  check_g_per_key(op, in.g, in.q, d);
  check_beta(op, in.beta, in.q, d);
  const Spans spans = call_spans(op, in.cu_seqlens, d);
  check_initial_state(op, in.initial_state, in.q, d, d.V, spans);
  if (form == Form::chunk) check_chunk_size(op, options.chunk_size, in.q);

  const KdaParams p = params_of(in, options, d.T);
  const Device device = in.q.device();
  const bool grad = needs_grad({&in.q, &in.k, &in.v, &in.g, &in.beta, &in.initial_state});
  Tensor o = Tensor::empty({p.B, p.T, p.H, p.V}, DType::f32, device);
  Tensor final_state = options.output_final_state ? Tensor::empty({spans.states, p.H, p.K, p.V}, DType::f32, device)
                                                  : Tensor();
  std::vector<std::shared_ptr<const KdaSaved>> saved =
      forward_spans<Kda>(form, device, p, spans.spans, o.data<float>(), data_or_null(final_state), grad);
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
           Tensor dg = Tensor::empty({p.B, p.T, p.H, p.K}, DType::f32, device);
           Tensor dbeta = Tensor::empty({p.B, p.T, p.H}, DType::f32, device);
           Tensor dh0 = p.h0 ? Tensor::empty({states, p.H, p.K, p.V}, DType::f32, device) : Tensor();
           const float* dht = grad_outputs.size() > 1 ? grad_outputs[1].data<float>() : nullptr;
           KdaGrads grads{.dq = dq.data<float>(),
                          .dk = dk.data<float>(),
                          .dv = dv.data<float>(),
                          .dgk = dg.data<float>(),
                          .dbeta = dbeta.data<float>(),
                          .dh0 = data_or_null(dh0),
                          .K = p.K};
           backward_spans<Kda>(form, device, p, spans, saved, grad_outputs[0].data<float>(), dht, grads);
           return std::vector<Tensor>{dq, dk, dv, dg, dbeta, dh0};
         });
  return {o, final_state};
}

// One decoding step: q_t, k_t, g_t [B, H, K], v_t [B, H, V], beta_t [B, H]; state
// [B, H, K, V] advanced in place. Returns o_t [B, H, V].
Tensor run_kda_step(const char* op, const Inputs& in, const Options& options, Tensor& state) {
  const Dims d = check_step(op, in.q, in.k, in.v, state);
  check_step_g_per_key(op, in.g, d);
  check_step_beta(op, in.beta, d);
  // A gate on another device than q_t would be read by the wrong kernel.
  for (const auto& [name, t] : {std::pair{"g_t", &in.g}, std::pair{"beta_t", &in.beta}})
    LAT_CHECK(t->device() == in.q.device(), op << ": " << name << ": expected device " << in.q.device().str()
                                               << " (as q_t), got " << t->device().str());
  const KdaParams p = params_of(in, options, 1);
  Tensor o = Tensor::empty({p.B, p.H, p.V}, DType::f32, in.q.device());
#ifdef LAT_WITH_CUDA
  if (in.q.device().is_cuda()) {
    recurrent_step_kda_cuda(p, state.data<float>(), o.data<float>());
    return o;
  }
#endif
  recurrent_step_kda_cpu(p, state.data<float>(), o.data<float>());
  return o;
}

}  // namespace
}  // namespace linear_attention

using linear_attention::Form;

LinearAttentionOutput chunk_kda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                                std::optional<float> scale, const Tensor& initial_state, bool output_final_state,
                                bool use_qk_l2norm_in_kernel, int chunk_size, const Tensor& cu_seqlens) {
  return linear_attention::run_kda("chunk_kda", Form::chunk,
                                   {q, k, v, g, beta, initial_state, cu_seqlens},
                                   {.scale = scale,
                                    .output_final_state = output_final_state,
                                    .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel,
                                    .chunk_size = chunk_size});
}

LinearAttentionOutput fused_recurrent_kda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                          const Tensor& beta, std::optional<float> scale, const Tensor& initial_state,
                                          bool output_final_state, bool use_qk_l2norm_in_kernel,
                                          const Tensor& cu_seqlens) {
  return linear_attention::run_kda("fused_recurrent_kda", Form::fused_recurrent,
                                   {q, k, v, g, beta, initial_state, cu_seqlens},
                                   {.scale = scale,
                                    .output_final_state = output_final_state,
                                    .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel});
}

Tensor recurrent_step_kda(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                          const Tensor& beta_t, float scale, Tensor& state, bool use_qk_l2norm_in_kernel) {
  return linear_attention::run_kda_step("recurrent_step_kda", {q_t, k_t, v_t, g_t, beta_t, Tensor(), Tensor()},
                                        {.scale = scale, .use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel}, state);
}

}  // namespace lat
