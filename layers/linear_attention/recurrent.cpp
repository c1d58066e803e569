// Token-by-token forms of causal linear attention and simple_gla (ALGORITHMS.md 2.2, 2.3):
// fused_recurrent_* (one tape node, hand-written backward) and recurrent_step_* (one
// decoding step, state updated in place). float32 throughout, state in float32.
//
// Both ops are the recurrence S_t = a_t S_{t-1} + k_t v_t^T, r_t = scale S_t^T q_t with
// a_t = exp(g_t) (simple_gla) or 1 (linear attention). The normalized linear attention
// appends a constant-1 column to v, so the state is [K, V + 1] with z as its last column
// and o_t = r_t[:V] / (r_t[V] + 1e-6) (Katharopoulos et al. 2020, sec. 3.2; DESIGN.md).
// Letters as in common.h; Vs is the state width (V or V + 1).
//
// Backward walks the tokens in reverse with dS = dL/dS_t:
//   dS += scale q_t dr_t^T;  dq_t = scale S_t dr_t;  dk_t = dS v_t;  dv_t = dS^T k_t;
//   dg_t = a_t <S_{t-1}, dS>_F;  dS <- a_t dS   (and dS at t = -1 is d initial_state).
// Instead of keeping all T states, forward stores the state entering every block of
// kCheckpointEvery tokens and backward recomputes one block at a time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "layers/linear_attention/chunk_cuda_ops.h"
#include "layers/linear_attention/chunk_linear_attn.h"
#include "layers/linear_attention/common.h"
#include "lat/linear_attention.h"
#include "lat/tape.h"

namespace lat {
namespace {

using linear_attention::Dims;

constexpr int64_t kCheckpointEvery = 64;

// The kernel's view of one call (STYLE habit 5): plain pointers into [B, T, H, *] arrays.
struct RecurrentParams {
  const float* q = nullptr;   // [B, T, H, K]
  const float* k = nullptr;   // [B, T, H, K]
  const float* v = nullptr;   // [B, T, H, V]
  const float* g = nullptr;   // [B, T, H], or null for a_t = 1
  const float* h0 = nullptr;  // [B, H, K, Vs], or null for zeros
  int64_t B = 0, T = 0, H = 0, K = 0, V = 0;
  bool normalize = false;
  float scale = 1.0f;

  int64_t Vs() const { return normalize ? V + 1 : V; }
  int64_t num_blocks() const { return (T + kCheckpointEvery - 1) / kCheckpointEvery; }
  int64_t row(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * H + h; }
};

// v_t, extended by the constant-1 column when normalized, into vt[0..Vs).
void load_value(const RecurrentParams& p, int64_t row, float* vt) {
  std::memcpy(vt, p.v + row * p.V, p.V * sizeof(float));
  if (p.normalize) vt[p.V] = 1.0f;
}

// S <- a S + k v^T on a [K, Vs] state.
void update_state(float* S, const float* k, const float* vt, float a, int64_t K, int64_t Vs) {
  for (int64_t i = 0; i < K; ++i) {
    float* s = S + i * Vs;
    float ki = k[i];
    for (int64_t j = 0; j < Vs; ++j) s[j] = a * s[j] + ki * vt[j];
  }
}

// r = scale S^T q.
void read_state(const float* S, const float* q, float scale, int64_t K, int64_t Vs, float* r) {
  std::fill(r, r + Vs, 0.0f);
  for (int64_t i = 0; i < K; ++i) {
    const float* s = S + i * Vs;
    float qi = scale * q[i];
    for (int64_t j = 0; j < Vs; ++j) r[j] += qi * s[j];
  }
}

// o_t from the readout r_t: r itself, or r[:V] / (r[V] + eps) when normalized.
void write_output(const float* r, int64_t V, bool normalize, float* o) {
  if (normalize)
    linear_attention::normalize_forward_cpu(r, 1, V, o);
  else
    std::memcpy(o, r, V * sizeof(float));
}

// Forward for every (b, h): o, optionally the final state ht [B, H, K, Vs] and the
// checkpoints [B*H, num_blocks, K, Vs] (the state entering each block).
void recurrent_forward(const RecurrentParams& p, float* o, float* ht, float* checkpoints) {
  const int64_t K = p.K, Vs = p.Vs(), NB = p.num_blocks();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      int64_t bh = b * p.H + h;
      std::vector<float> S(K * Vs, 0.0f), vt(Vs), r(Vs);
      if (p.h0) std::memcpy(S.data(), p.h0 + bh * K * Vs, K * Vs * sizeof(float));
      for (int64_t t = 0; t < p.T; ++t) {
        if (checkpoints && t % kCheckpointEvery == 0)
          std::memcpy(checkpoints + (bh * NB + t / kCheckpointEvery) * K * Vs, S.data(), K * Vs * sizeof(float));
        int64_t row = p.row(b, t, h);
        float a = p.g ? std::exp(p.g[row]) : 1.0f;
        load_value(p, row, vt.data());
        update_state(S.data(), p.k + row * K, vt.data(), a, K, Vs);
        read_state(S.data(), p.q + row * K, p.scale, K, Vs, r.data());
        write_output(r.data(), p.V, p.normalize, o + row * p.V);
      }
      if (ht) std::memcpy(ht + bh * K * Vs, S.data(), K * Vs * sizeof(float));
    }
}

// Gradients of every input given do [B, T, H, V] and dht [B, H, K, Vs] (null: zero).
// dg is written only when p.g is set; dh0 always ([B, H, K, Vs]).
void recurrent_backward(const RecurrentParams& p, const float* checkpoints, const float* d_o, const float* dht,
                        float* dq, float* dk, float* dv, float* dg, float* dh0) {
  const int64_t K = p.K, V = p.V, Vs = p.Vs(), NB = p.num_blocks(), KV = K * Vs;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      int64_t bh = b * p.H + h;
      // states[j] is the state after token t0 + j - 1 of the current block (states[0]
      // is the checkpoint entering it).
      std::vector<float> states((kCheckpointEvery + 1) * KV), dS(KV, 0.0f), vt(Vs), r(Vs), dr(Vs);
      if (dht) std::memcpy(dS.data(), dht + bh * KV, KV * sizeof(float));
      for (int64_t m = NB - 1; m >= 0; --m) {
        int64_t t0 = m * kCheckpointEvery, t1 = std::min(p.T, t0 + kCheckpointEvery);
        std::memcpy(states.data(), checkpoints + (bh * NB + m) * KV, KV * sizeof(float));
        for (int64_t t = t0; t < t1; ++t) {
          int64_t row = p.row(b, t, h);
          float* next = states.data() + (t - t0 + 1) * KV;
          std::memcpy(next, next - KV, KV * sizeof(float));
          load_value(p, row, vt.data());
          update_state(next, p.k + row * K, vt.data(), p.g ? std::exp(p.g[row]) : 1.0f, K, Vs);
        }
        for (int64_t t = t1 - 1; t >= t0; --t) {
          int64_t row = p.row(b, t, h);
          const float* S = states.data() + (t - t0 + 1) * KV;
          const float* S_prev = S - KV;
          const float* q = p.q + row * K;
          const float* k = p.k + row * K;
          const float* dot = d_o + row * V;
          load_value(p, row, vt.data());
          // dr = dL/dr_t; through the normalizer o = r[:V] / den, den = r[V] + eps.
          if (p.normalize) {
            read_state(S, q, p.scale, K, Vs, r.data());
            linear_attention::normalize_backward_cpu(r.data(), dot, 1, V, dr.data());
          } else {
            std::memcpy(dr.data(), dot, V * sizeof(float));
          }
          float* dq_t = dq + row * K;
          float* dk_t = dk + row * K;
          float* dv_t = dv + row * V;
          std::fill(dv_t, dv_t + V, 0.0f);
          float a = p.g ? std::exp(p.g[row]) : 1.0f;
          float da = 0.0f;
          for (int64_t i = 0; i < K; ++i) {
            float* ds = dS.data() + i * Vs;
            const float* s = S + i * Vs;
            const float* sp = S_prev + i * Vs;
            float qi = p.scale * q[i], ki = k[i];
            float acc_q = 0.0f, acc_k = 0.0f;
#pragma omp simd reduction(+ : acc_q, acc_k, da)
            for (int64_t j = 0; j < Vs; ++j) {
              ds[j] += qi * dr[j];
              acc_q += s[j] * dr[j];
              acc_k += ds[j] * vt[j];
              da += sp[j] * ds[j];
            }
            for (int64_t j = 0; j < V; ++j) dv_t[j] += ds[j] * ki;
            dq_t[i] = p.scale * acc_q;
            dk_t[i] = acc_k;
            for (int64_t j = 0; j < Vs; ++j) ds[j] *= a;
          }
          if (dg) dg[row] = a * da;
        }
      }
      std::memcpy(dh0 + bh * KV, dS.data(), KV * sizeof(float));
    }
}

const float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// Shared body of fused_recurrent_linear_attn (g undefined) and fused_recurrent_simple_gla.
LinearAttentionOutput fused_recurrent(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& g, std::optional<float> scale, bool normalize,
                                      const Tensor& initial_state, bool output_final_state) {
  Dims d = linear_attention::check_qkv(op, q, k, v);
  if (g.defined()) linear_attention::check_g(op, g, q, d);
  int64_t Vs = normalize ? d.V + 1 : d.V;
  linear_attention::check_initial_state(op, initial_state, q, d, Vs);
  linear_attention::check_cpu(op, q);

  RecurrentParams p;
  p.q = q.data<float>();
  p.k = k.data<float>();
  p.v = v.data<float>();
  p.g = data_or_null(g);
  p.h0 = data_or_null(initial_state);
  p.B = d.B, p.T = d.T, p.H = d.H, p.K = d.K, p.V = d.V;
  p.normalize = normalize;
  p.scale = linear_attention::resolve_scale(scale, d.K);

  bool grad = needs_grad({&q, &k, &v, &g, &initial_state});
  Tensor o = Tensor::empty({d.B, d.T, d.H, d.V});
  Tensor final_state = output_final_state ? Tensor::empty({d.B, d.H, d.K, Vs}) : Tensor();
  Tensor checkpoints = grad ? Tensor::empty({d.B * d.H, p.num_blocks(), d.K, Vs}) : Tensor();
  recurrent_forward(p, o.data<float>(), output_final_state ? final_state.data<float>() : nullptr,
                    grad ? checkpoints.data<float>() : nullptr);

  if (grad) {
    std::vector<Tensor> outputs{o};
    if (output_final_state) outputs.push_back(final_state);
    // The kernel reads q, k, v, g, initial_state through p's pointers: the node keeps
    // those tensors alive as its inputs.
    record(op, {q, k, v, g, initial_state}, outputs,
           [p, checkpoints, d, Vs, has_g = g.defined(), has_h0 = initial_state.defined()](
               const std::vector<Tensor>& grads) {
             Tensor dq = Tensor::empty({d.B, d.T, d.H, d.K});
             Tensor dk = Tensor::empty({d.B, d.T, d.H, d.K});
             Tensor dv = Tensor::empty({d.B, d.T, d.H, d.V});
             Tensor dg = has_g ? Tensor::empty({d.B, d.T, d.H}) : Tensor();
             Tensor dh0 = Tensor::empty({d.B, d.H, d.K, Vs});
             recurrent_backward(p, checkpoints.data<float>(), grads[0].data<float>(),
                                grads.size() > 1 ? grads[1].data<float>() : nullptr, dq.data<float>(),
                                dk.data<float>(), dv.data<float>(), has_g ? dg.data<float>() : nullptr,
                                dh0.data<float>());
             return std::vector<Tensor>{dq, dk, dv, dg, has_h0 ? dh0 : Tensor()};
           });
  }
  return {o, final_state};
}

// Shared body of the recurrent_step_* ops: one token for every (b, h), state in place.
Tensor recurrent_step(const char* op, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                      float scale, bool normalize, Tensor& state) {
  Dims d = linear_attention::check_step(op, q_t, k_t, v_t, state, normalize ? 1 : 0);
  if (g_t.defined()) linear_attention::check_step_g(op, g_t, d);
  if (q_t.device().is_cuda())
    return linear_attention::recurrent_step_decay_cuda(q_t, k_t, v_t, g_t, scale, normalize, state);
  linear_attention::check_cpu(op, q_t);
  int64_t K = d.K, V = d.V, Vs = normalize ? V + 1 : V;
  RecurrentParams p;
  p.v = v_t.data<float>();
  p.V = V;
  p.normalize = normalize;
  const float* q = q_t.data<float>();
  const float* k = k_t.data<float>();
  const float* g = g_t.defined() ? g_t.data<float>() : nullptr;
  float* S = state.data<float>();
  Tensor o = Tensor::empty({d.B, d.H, V});
  float* out = o.data<float>();
#pragma omp parallel for if (d.B * d.H * K * Vs > (1 << 15))
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    std::vector<float> vt(Vs), r(Vs);
    load_value(p, bh, vt.data());
    update_state(S + bh * K * Vs, k + bh * K, vt.data(), g ? std::exp(g[bh]) : 1.0f, K, Vs);
    read_state(S + bh * K * Vs, q + bh * K, scale, K, Vs, r.data());
    write_output(r.data(), V, normalize, out + bh * V);
  }
  return o;
}

}  // namespace

LinearAttentionOutput fused_recurrent_linear_attn(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  std::optional<float> scale, bool normalize,
                                                  const Tensor& initial_state, bool output_final_state) {
  return fused_recurrent("fused_recurrent_linear_attn", q, k, v, Tensor(), scale, normalize, initial_state,
                         output_final_state);
}

LinearAttentionOutput fused_recurrent_simple_gla(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& g, std::optional<float> scale,
                                                 const Tensor& initial_state, bool output_final_state) {
  LAT_CHECK(g.defined(), "fused_recurrent_simple_gla: g: expected a tensor [B, T, H], got an undefined tensor");
  return fused_recurrent("fused_recurrent_simple_gla", q, k, v, g, scale, false, initial_state,
                         output_final_state);
}

Tensor recurrent_step_linear_attn(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, float scale,
                                  bool normalize, Tensor& state) {
  return recurrent_step("recurrent_step_linear_attn", q_t, k_t, v_t, Tensor(), scale, normalize, state);
}

Tensor recurrent_step_simple_gla(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                 float scale, Tensor& state) {
  LAT_CHECK(g_t.defined(), "recurrent_step_simple_gla: g_t: expected a tensor [B, H], got an undefined tensor");
  return recurrent_step("recurrent_step_simple_gla", q_t, k_t, v_t, g_t, scale, false, state);
}

}  // namespace lat
