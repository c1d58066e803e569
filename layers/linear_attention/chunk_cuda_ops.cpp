// The CUDA branch of the linear-attention ops (chunk_cuda_ops.h): device tensors for the
// outputs and intermediates, the kernel calls of chunk_cuda.h in order, and the tape node.
#include "layers/linear_attention/chunk_cuda_ops.h"

#include <string>

#include "lat/tape.h"

#ifdef LAT_WITH_CUDA
#include "layers/linear_attention/chunk_cuda.h"
#include "layers/linear_attention/chunk_linear_attn.h"
#endif

namespace lat::linear_attention {

#ifdef LAT_WITH_CUDA
namespace {

namespace cu = linear_attention::cuda;

constexpr int64_t kTile = 64;  // tile rows of a chunk in the kernels' buffers

const float* ptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* mut(Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

cu::Dims dims_of(const Tensor& q, int64_t V, int chunk_size, const char* op) {
  LAT_CHECK(chunk_size >= 1 && chunk_size <= kTile,
            op << ": chunk_size: expected 1.." << kTile << " on " << q.device().str() << ", got " << chunk_size);
  cu::Dims d;
  d.B = q.size(0), d.T = q.size(1), d.H = q.size(2), d.K = q.size(3), d.V = V;
  d.C = chunk_size;
  d.device = q.device().index;
  return d;
}

Tensor empty_on(const Shape& shape, const Device& device) { return Tensor::empty(shape, DType::f32, device); }

cu::Seq api(const Tensor& t, const cu::Dims& d, int64_t D) { return cu::api_seq(t.data<float>(), d.T, d.H, D); }
cu::SeqOut api_out(Tensor& t, const cu::Dims& d, int64_t D) { return cu::api_out(t.data<float>(), d.T, d.H, D); }
cu::Seq per_head(const Tensor& t, const cu::Dims& d, int64_t D) {
  return cu::head_seq(t.data<float>(), d.H, d.NT() * d.C, D);
}

// G [BH, NT, 64] from g (undefined: zeros).
Tensor cumulative_gate(const cu::Dims& d, const Tensor& g, const Device& device) {
  Tensor G = empty_on({d.BH(), d.NT(), kTile}, device);
  cu::chunk_cumsum(d, ptr(g), G.data<float>());
  return G;
}

// The WY factors and the forward state pass of the delta rule: Tm, W, U, h, v_new.
struct DeltaForward {
  Tensor Tm, W, U, h, v_new;
};

DeltaForward delta_forward(const cu::Dims& d, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& G,
                           const Tensor& h0, float* ht, const Device& device) {
  const int64_t rows = d.NT() * d.C;  // per head, in chunk order
  DeltaForward f;
  f.Tm = empty_on({d.BH(), d.NT(), kTile, kTile}, device);
  f.W = empty_on({d.BH(), rows, d.K}, device);
  f.U = empty_on({d.BH(), rows, d.V}, device);
  cu::gdn_prepare(d, api(k, d, d.K), api(v, d, d.V), beta.data<float>(), G.data<float>(), f.Tm.data<float>(),
                  f.W.data<float>(), f.U.data<float>());
  f.h = empty_on({d.BH(), d.NT(), d.K, d.V}, device);
  f.v_new = empty_on({d.BH(), rows, d.V}, device);
  cu::gdn_fwd_state(d, api(k, d, d.K), f.W.data<float>(), f.U.data<float>(), G.data<float>(), ptr(h0),
                    f.h.data<float>(), f.v_new.data<float>(), ht);
  return f;
}

}  // namespace

LinearAttentionOutput chunk_decay_cuda(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& g, float scale, bool normalize, const Tensor& initial_state,
                                       bool output_final_state, int chunk_size) {
  const Device device = q.device();
  const int64_t V = v.size(3), Vs = normalize ? V + 1 : V;
  const cu::Dims d = dims_of(q, Vs, chunk_size, op);
  const int64_t rows = d.B * d.T * d.H;
  // With the normalizer the values get a constant-1 column (state [K, V + 1], z last).
  Tensor vs = v;
  if (normalize) {
    vs = empty_on({d.B, d.T, d.H, Vs}, device);
    cu::append_ones_column(v.data<float>(), rows, V, vs.data<float>(), d.device);
  }
  Tensor G = cumulative_gate(d, g, device);
  Tensor final_state = output_final_state ? empty_on({d.B, d.H, d.K, Vs}, device) : Tensor();
  Tensor r = empty_on({d.B, d.T, d.H, Vs}, device);
  {
    Tensor h = empty_on({d.BH(), d.NT(), d.K, Vs}, device);
    cu::chunk_fwd_h(d, api(k, d, d.K), api(vs, d, Vs), G.data<float>(), ptr(initial_state), h.data<float>(),
                    mut(final_state));
    cu::chunk_fwd_o(d, api(q, d, d.K), api(k, d, d.K), api(vs, d, Vs), G.data<float>(), h.data<float>(), scale,
                    api_out(r, d, Vs));
  }
  Tensor o = r;
  if (normalize) {
    o = empty_on({d.B, d.T, d.H, V}, device);
    cu::normalize_forward(r.data<float>(), rows, V, kNormEps, o.data<float>(), d.device);
  }

  const bool has_g = g.defined();
  std::vector<Tensor> inputs = has_g ? std::vector<Tensor>{q, k, v, g, initial_state}
                                     : std::vector<Tensor>{q, k, v, initial_state};
  if (!needs_grad(inputs)) return {o, final_state};
  std::vector<Tensor> outputs{o};
  if (output_final_state) outputs.push_back(final_state);
  Tensor sq = q.detach(), sk = k.detach(), svs = vs.detach(), sh0 = initial_state.defined() ? initial_state.detach()
                                                                                              : Tensor();
  Tensor readout = normalize ? r : Tensor();
  record(op, inputs, outputs,
         [d, V, Vs, rows, scale, normalize, has_g, sq, sk, svs, sh0, G, readout](const std::vector<Tensor>& grads) {
           const Device device = sq.device();
           Tensor dr = grads[0];
           if (normalize) {
             dr = empty_on({d.B, d.T, d.H, Vs}, device);
             cu::normalize_backward(readout.data<float>(), grads[0].data<float>(), rows, V, kNormEps,
                                    dr.data<float>(), d.device);
           }
           const float* dht = grads.size() > 1 ? grads[1].data<float>() : nullptr;
           Tensor h = empty_on({d.BH(), d.NT(), d.K, Vs}, device);
           cu::chunk_fwd_h(d, api(sk, d, d.K), api(svs, d, Vs), G.data<float>(), ptr(sh0), h.data<float>(), nullptr);
           Tensor dh = empty_on({d.BH(), d.NT(), d.K, Vs}, device);
           Tensor dh0 = sh0.defined() ? empty_on({d.B, d.H, d.K, Vs}, device) : Tensor();
           cu::chunk_bwd_dh(d, api(sq, d, d.K), api(dr, d, Vs), G.data<float>(), dht, scale, dh.data<float>(),
                            mut(dh0));
           Tensor dq = empty_on({d.B, d.T, d.H, d.K}, device), dk = empty_on({d.B, d.T, d.H, d.K}, device);
           Tensor dg_part = has_g ? empty_on({d.NK(), 2, d.BH(), d.NT() * kTile}, device) : Tensor();
           cu::chunk_bwd_dqk(d, api(sq, d, d.K), api(sk, d, d.K), api(svs, d, Vs), api(dr, d, Vs), G.data<float>(),
                             h.data<float>(), dh.data<float>(), scale, api_out(dq, d, d.K), api_out(dk, d, d.K),
                             mut(dg_part), cu::Seq{}, nullptr);
           Tensor dvs = empty_on({d.B, d.T, d.H, Vs}, device);
           cu::chunk_bwd_dv(d, api(sq, d, d.K), api(sk, d, d.K), api(dr, d, Vs), G.data<float>(), dh.data<float>(),
                            scale, api_out(dvs, d, Vs));
           Tensor dv = dvs;
           if (normalize) {
             dv = empty_on({d.B, d.T, d.H, V}, device);
             cu::drop_last_column(dvs.data<float>(), rows, V, dv.data<float>(), d.device);
           }
           if (!has_g) return std::vector<Tensor>{dq, dk, dv, dh0};
           Tensor dg = empty_on({d.B, d.T, d.H}, device);
           cu::chunk_dg_finish(d, dg_part.data<float>(), d.NK(), dg.data<float>());
           return std::vector<Tensor>{dq, dk, dv, dg, dh0};
         });
  return {o, final_state};
}

LinearAttentionOutput gated_delta_rule_cuda(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& g, const Tensor& beta, float scale,
                                            const Tensor& initial_state, bool output_final_state,
                                            bool use_qk_l2norm_in_kernel, int chunk_size) {
  const Device device = q.device();
  const cu::Dims d = dims_of(q, v.size(3), chunk_size, op);
  const int64_t rows = d.B * d.T * d.H;
  Tensor qn = q, kn = k, q_rstd, k_rstd;
  if (use_qk_l2norm_in_kernel) {
    qn = empty_on(q.shape(), device), kn = empty_on(k.shape(), device);
    q_rstd = empty_on({rows}, device), k_rstd = empty_on({rows}, device);
    cu::l2norm_forward(q.data<float>(), rows, d.K, qn.data<float>(), q_rstd.data<float>(), d.device);
    cu::l2norm_forward(k.data<float>(), rows, d.K, kn.data<float>(), k_rstd.data<float>(), d.device);
  }
  Tensor G = cumulative_gate(d, g, device);
  Tensor final_state = output_final_state ? empty_on({d.B, d.H, d.K, d.V}, device) : Tensor();
  Tensor o = empty_on({d.B, d.T, d.H, d.V}, device);
  {
    DeltaForward f = delta_forward(d, kn, v, beta, G, initial_state, mut(final_state), device);
    cu::chunk_fwd_o(d, api(qn, d, d.K), api(kn, d, d.K), per_head(f.v_new, d, d.V), G.data<float>(),
                    f.h.data<float>(), scale, api_out(o, d, d.V));
  }

  std::vector<Tensor> inputs{q, k, v, g, beta, initial_state};
  if (!needs_grad(inputs)) return {o, final_state};
  std::vector<Tensor> outputs{o};
  if (output_final_state) outputs.push_back(final_state);
  Tensor sqn = qn.detach(), skn = kn.detach(), sv = v.detach(), sbeta = beta.detach();
  Tensor sh0 = initial_state.defined() ? initial_state.detach() : Tensor();
  const bool has_g = g.defined();
  record(op, inputs, outputs,
         [d, rows, scale, has_g, sqn, skn, sv, sbeta, sh0, G, q_rstd, k_rstd](const std::vector<Tensor>& grads) {
           const Device device = sqn.device();
           const Tensor& d_o = grads[0];
           const float* dht = grads.size() > 1 ? grads[1].data<float>() : nullptr;
           DeltaForward f = delta_forward(d, skn, sv, sbeta, G, sh0, nullptr, device);
           const int64_t chunk_rows = d.NT() * d.C;
           // dV^new from the outputs of its own chunk; the state pass adds the inter-chunk part.
           Tensor dv_local = empty_on({d.BH(), chunk_rows, d.V}, device);
           cu::chunk_bwd_dv(d, api(sqn, d, d.K), api(skn, d, d.K), api(d_o, d, d.V), G.data<float>(), nullptr, scale,
                            cu::head_out(dv_local.data<float>(), d.H, chunk_rows, d.V));
           Tensor dh = empty_on({d.BH(), d.NT(), d.K, d.V}, device);
           Tensor dv_new = empty_on({d.BH(), chunk_rows, d.V}, device);
           Tensor dh0 = sh0.defined() ? empty_on({d.B, d.H, d.K, d.V}, device) : Tensor();
           cu::gdn_bwd_state(d, api(sqn, d, d.K), api(skn, d, d.K), api(d_o, d, d.V), f.W.data<float>(),
                             G.data<float>(), dv_local.data<float>(), dht, scale, dh.data<float>(),
                             dv_new.data<float>(), mut(dh0));
           Tensor dq = empty_on({d.B, d.T, d.H, d.K}, device), dk = empty_on({d.B, d.T, d.H, d.K}, device);
           Tensor dw = empty_on({d.BH(), chunk_rows, d.K}, device);
           // Gate gradient pieces: NK parts from the dq/dk kernel, one from the WY backward.
           Tensor dg_part = has_g ? empty_on({d.NK() + 1, 2, d.BH(), d.NT() * kTile}, device) : Tensor();
           cu::chunk_bwd_dqk(d, api(sqn, d, d.K), api(skn, d, d.K), per_head(f.v_new, d, d.V), api(d_o, d, d.V),
                             G.data<float>(), f.h.data<float>(), dh.data<float>(), scale, api_out(dq, d, d.K),
                             api_out(dk, d, d.K), mut(dg_part), per_head(dv_new, d, d.V), dw.data<float>());
           Tensor dv = empty_on({d.B, d.T, d.H, d.V}, device), dbeta = empty_on({d.B, d.T, d.H}, device);
           float* dg_slot = has_g ? dg_part.data<float>() + 2 * d.NK() * d.BH() * d.NT() * kTile : nullptr;
           cu::gdn_bwd_wy(d, api(skn, d, d.K), api(sv, d, d.V), sbeta.data<float>(), G.data<float>(),
                          f.Tm.data<float>(), dw.data<float>(), dv_new.data<float>(), api_out(dk, d, d.K),
                          api_out(dv, d, d.V), dbeta.data<float>(), dg_slot);
           Tensor dg;
           if (has_g) {
             dg = empty_on({d.B, d.T, d.H}, device);
             cu::chunk_dg_finish(d, dg_part.data<float>(), d.NK() + 1, dg.data<float>());
           }
           if (q_rstd.defined()) {
             cu::l2norm_backward(sqn.data<float>(), q_rstd.data<float>(), rows, d.K, dq.data<float>(), d.device);
             cu::l2norm_backward(skn.data<float>(), k_rstd.data<float>(), rows, d.K, dk.data<float>(), d.device);
           }
           return std::vector<Tensor>{dq, dk, dv, dg, dbeta, dh0};
         });
  return {o, final_state};
}

Tensor recurrent_step_decay_cuda(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                 float scale, bool normalize, Tensor& state) {
  const int64_t B = q_t.size(0), H = q_t.size(1), K = q_t.size(2), V = v_t.size(2);
  Tensor o = empty_on({B, H, V}, q_t.device());
  cu::recurrent_step_decay(B * H, K, V, normalize, kNormEps, q_t.data<float>(), k_t.data<float>(),
                           v_t.data<float>(), ptr(g_t), scale, state.data<float>(), o.data<float>(),
                           q_t.device().index);
  return o;
}

Tensor recurrent_step_delta_cuda(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                 const Tensor& beta_t, float scale, Tensor& state, bool use_qk_l2norm_in_kernel) {
  const int64_t B = q_t.size(0), H = q_t.size(1), K = q_t.size(2), V = v_t.size(2);
  Tensor o = empty_on({B, H, V}, q_t.device());
  cu::recurrent_step_delta(B * H, K, V, use_qk_l2norm_in_kernel, q_t.data<float>(), k_t.data<float>(),
                           v_t.data<float>(), ptr(g_t), beta_t.data<float>(), scale, state.data<float>(),
                           o.data<float>(), q_t.device().index);
  return o;
}

#else  // no CUDA in this build: a CUDA tensor cannot exist, but the symbols must.

namespace {
[[noreturn]] void not_built(const char* op) {
  detail::throw_error(std::string(op) + ": cuda tensors need a lat built with CUDA (LAT_CUDA=AUTO or ON with nvcc)",
                      __FILE__, __LINE__);
}
}  // namespace

LinearAttentionOutput chunk_decay_cuda(const char* op, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       float, bool, const Tensor&, bool, int) {
  not_built(op);
}
LinearAttentionOutput gated_delta_rule_cuda(const char* op, const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&, float, const Tensor&, bool, bool, int) {
  not_built(op);
}
Tensor recurrent_step_decay_cuda(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, bool, Tensor&) {
  not_built("recurrent_step");
}
Tensor recurrent_step_delta_cuda(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float,
                                 Tensor&, bool) {
  not_built("recurrent_step");
}

#endif

}  // namespace lat::linear_attention
