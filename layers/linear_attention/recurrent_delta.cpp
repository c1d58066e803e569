// Token-by-token forms of the delta rule and the gated delta rule (ALGORITHMS.md 2.4):
// fused_recurrent_* (one tape node, hand-written backward) and recurrent_step_* (one
// decoding step, state updated in place). float32 throughout, state [K, V] in float32.
//
// One token, with a = exp(g_t) (1 for the delta rule) and b = beta_t:
//   S_a = a S_{t-1};  r = v_t - S_a^T k_t;  u = b r;  S_t = S_a + k_t u^T;  o_t = scale S_t^T q_t.
// Backward walks the tokens in reverse with dS = dL/dS_t:
//   dS += scale q_t do_t^T;  dq_t = scale S_t do_t;  du = dS^T k_t;  dk_t = dS u
//   dbeta_t = du . r;  dv_t = b du;  dp = -b du   (p = S_a^T k_t)
//   dS_a = dS + k_t dp^T;  dk_t += S_a dp;  dg_t = <dS_a, S_a>_F;  dS <- a dS_a
// and dS at t = -1 is d initial_state. Forward keeps the state entering every block of
// kCheckpointEvery tokens; backward recomputes one block at a time.
// Letters as in common.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "lat/linear_attention.h"
#include "lat/tape.h"
#include "layers/linear_attention/chunk_cuda_ops.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention/qk_l2norm.h"

namespace lat {
namespace {

using linear_attention::Dims;

constexpr int64_t kCheckpointEvery = 64;

// The kernel's view of one call (STYLE habit 5): plain pointers into [B, T, H, *] arrays.
struct DeltaRecurrentParams {
  const float* q = nullptr;     // [B, T, H, K] (already L2-normalized when asked for)
  const float* k = nullptr;     // [B, T, H, K]
  const float* v = nullptr;     // [B, T, H, V]
  const float* g = nullptr;     // [B, T, H], or null for the delta rule (a = 1)
  const float* beta = nullptr;  // [B, T, H]
  const float* h0 = nullptr;    // [B, H, K, V], or null for zeros
  int64_t B = 0, T = 0, H = 0, K = 0, V = 0;
  float scale = 1.0f;

  int64_t num_blocks() const { return (T + kCheckpointEvery - 1) / kCheckpointEvery; }
  int64_t row(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * H + h; }
  float decay(int64_t row) const { return g ? std::exp(g[row]) : 1.0f; }
};

// One token on a [K, V] state in place: S <- a S; r = v - S^T k; u = b r; S <- S + k u^T;
// o = scale S^T q. r and u (length V) are written for the backward; with o null there is
// no readout and q is not read.
void delta_step(float* S, const float* q, const float* k, const float* v, float a, float b, float scale, int64_t K,
                int64_t V, float* r, float* u, float* o) {
  std::copy(v, v + V, r);
  for (int64_t i = 0; i < K; ++i) {
    float* s = S + i * V;
    const float ki = k[i];
    for (int64_t j = 0; j < V; ++j) {
      s[j] *= a;
      r[j] -= ki * s[j];
    }
  }
  for (int64_t j = 0; j < V; ++j) u[j] = b * r[j];
  if (o) std::fill(o, o + V, 0.0f);
  for (int64_t i = 0; i < K; ++i) {
    float* s = S + i * V;
    const float ki = k[i], qi = o ? scale * q[i] : 0.0f;
    for (int64_t j = 0; j < V; ++j) s[j] += ki * u[j];
    if (o)
      for (int64_t j = 0; j < V; ++j) o[j] += qi * s[j];
  }
}

// Forward for every (b, h): o, optionally the final state ht [B, H, K, V] and the
// checkpoints [B*H, num_blocks, K, V] (the state entering each block).
void delta_recurrent_forward(const DeltaRecurrentParams& p, float* o, float* ht, float* checkpoints) {
  const int64_t K = p.K, V = p.V, KV = K * V, NB = p.num_blocks();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t bh = b * p.H + h;
      std::vector<float> S(KV, 0.0f), r(V), u(V);
      if (p.h0) std::memcpy(S.data(), p.h0 + bh * KV, KV * sizeof(float));
      for (int64_t t = 0; t < p.T; ++t) {
        if (checkpoints && t % kCheckpointEvery == 0)
          std::memcpy(checkpoints + (bh * NB + t / kCheckpointEvery) * KV, S.data(), KV * sizeof(float));
        const int64_t row = p.row(b, t, h);
        delta_step(S.data(), p.q + row * K, p.k + row * K, p.v + row * V, p.decay(row), p.beta[row], p.scale, K, V,
                   r.data(), u.data(), o + row * V);
      }
      if (ht) std::memcpy(ht + bh * KV, S.data(), KV * sizeof(float));
    }
}

// Gradients of every input given do [B, T, H, V] and dht [B, H, K, V] (null: zero).
// dg is written only when p.g is set; dh0 always ([B, H, K, V]).
void delta_recurrent_backward(const DeltaRecurrentParams& p, const float* checkpoints, const float* d_o,
                              const float* dht, float* dq, float* dk, float* dv, float* dg, float* dbeta, float* dh0) {
  const int64_t K = p.K, V = p.V, KV = K * V, NB = p.num_blocks(), L = kCheckpointEvery;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t bh = b * p.H + h;
      // states[j] is the state after token t0 + j - 1 of the current block (states[0] is
      // the checkpoint entering it); rs[j], us[j] are r and u of token t0 + j.
      std::vector<float> states((L + 1) * KV), rs(L * V), us(L * V), dS(KV, 0.0f), du(V), dp(V);
      if (dht) std::memcpy(dS.data(), dht + bh * KV, KV * sizeof(float));
      for (int64_t m = NB - 1; m >= 0; --m) {
        const int64_t t0 = m * L, t1 = std::min(p.T, t0 + L);
        std::memcpy(states.data(), checkpoints + (bh * NB + m) * KV, KV * sizeof(float));
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t row = p.row(b, t, h), j = t - t0;
          float* next = states.data() + (j + 1) * KV;
          std::memcpy(next, next - KV, KV * sizeof(float));
          delta_step(next, nullptr, p.k + row * K, p.v + row * V, p.decay(row), p.beta[row], p.scale, K, V,
                     rs.data() + j * V, us.data() + j * V, nullptr);
        }
        for (int64_t t = t1 - 1; t >= t0; --t) {
          const int64_t row = p.row(b, t, h), j = t - t0;
          const float* S = states.data() + (j + 1) * KV;  // S_t
          const float* S_prev = S - KV;                   // S_{t-1}
          const float* q = p.q + row * K;
          const float* k = p.k + row * K;
          const float* dot = d_o + row * V;
          const float* r = rs.data() + j * V;
          const float* u = us.data() + j * V;
          const float a = p.decay(row), bt = p.beta[row];
          float* dq_t = dq + row * K;
          float* dk_t = dk + row * K;
          std::fill(du.begin(), du.end(), 0.0f);
          for (int64_t i = 0; i < K; ++i) {
            float* ds = dS.data() + i * V;
            const float* s = S + i * V;
            const float qi = p.scale * q[i], ki = k[i];
            float acc_q = 0.0f, acc_k = 0.0f;
            for (int64_t x = 0; x < V; ++x) {
              ds[x] += qi * dot[x];
              acc_q += s[x] * dot[x];
              du[x] += ki * ds[x];
              acc_k += ds[x] * u[x];
            }
            dq_t[i] = p.scale * acc_q;
            dk_t[i] = acc_k;
          }
          float db = 0.0f;
          for (int64_t x = 0; x < V; ++x) {
            db += du[x] * r[x];
            dv[row * V + x] = bt * du[x];
            dp[x] = -bt * du[x];
          }
          dbeta[row] = db;
          float da = 0.0f;
          for (int64_t i = 0; i < K; ++i) {
            float* ds = dS.data() + i * V;
            const float* sp = S_prev + i * V;
            const float ki = k[i];
            float acc_k = 0.0f;
            for (int64_t x = 0; x < V; ++x) {
              const float dsa = ds[x] + ki * dp[x];
              acc_k += sp[x] * dp[x];
              da += dsa * sp[x];
              ds[x] = a * dsa;
            }
            dk_t[i] += a * acc_k;
          }
          if (dg) dg[row] = a * da;
        }
      }
      std::memcpy(dh0 + bh * KV, dS.data(), KV * sizeof(float));
    }
}

const float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// Shared body of fused_recurrent_delta_rule (g undefined) and fused_recurrent_gated_delta_rule.
LinearAttentionOutput fused_recurrent_delta(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& g, const Tensor& beta, std::optional<float> scale,
                                            const Tensor& initial_state, bool output_final_state,
                                            bool use_qk_l2norm_in_kernel) {
  const Dims d = linear_attention::check_qkv(op, q, k, v);
  if (g.defined()) linear_attention::check_g(op, g, q, d);
  linear_attention::check_beta(op, beta, q, d);
  linear_attention::check_initial_state(op, initial_state, q, d, d.V);
  linear_attention::check_cpu(op, q);

  // With the in-kernel L2 norm the kernel reads normalized copies; the node keeps them
  // and their rstd for the backward.
  Tensor qn = q, kn = k, q_rstd, k_rstd;
  const int64_t rows = d.B * d.T * d.H;
  if (use_qk_l2norm_in_kernel) {
    qn = q.detach().clone();
    kn = k.detach().clone();
    q_rstd = Tensor::empty({rows});
    k_rstd = Tensor::empty({rows});
    linear_attention::l2norm_rows_forward(qn.data<float>(), rows, d.K, q_rstd.data<float>());
    linear_attention::l2norm_rows_forward(kn.data<float>(), rows, d.K, k_rstd.data<float>());
  }

  DeltaRecurrentParams p;
  p.q = qn.data<float>(), p.k = kn.data<float>(), p.v = v.data<float>();
  p.g = data_or_null(g), p.beta = beta.data<float>(), p.h0 = data_or_null(initial_state);
  p.B = d.B, p.T = d.T, p.H = d.H, p.K = d.K, p.V = d.V;
  p.scale = linear_attention::resolve_scale(scale, d.K);

  const bool grad = needs_grad({&q, &k, &v, &g, &beta, &initial_state});
  Tensor o = Tensor::empty({d.B, d.T, d.H, d.V});
  Tensor final_state = output_final_state ? Tensor::empty({d.B, d.H, d.K, d.V}) : Tensor();
  Tensor checkpoints = grad ? Tensor::empty({d.B * d.H, p.num_blocks(), d.K, d.V}) : Tensor();
  delta_recurrent_forward(p, o.data<float>(), output_final_state ? final_state.data<float>() : nullptr,
                          grad ? checkpoints.data<float>() : nullptr);

  if (grad) {
    std::vector<Tensor> outputs{o};
    if (output_final_state) outputs.push_back(final_state);
    // p points into qn, kn and the node's inputs; the closure and the node keep them alive.
    auto backward_fn = [p, d, checkpoints, qn, kn, q_rstd, k_rstd, has_g = g.defined(),
                        has_h0 = initial_state.defined()](const std::vector<Tensor>& grads) {
      Tensor dq = Tensor::empty({d.B, d.T, d.H, d.K});
      Tensor dk = Tensor::empty({d.B, d.T, d.H, d.K});
      Tensor dv = Tensor::empty({d.B, d.T, d.H, d.V});
      Tensor dg = has_g ? Tensor::empty({d.B, d.T, d.H}) : Tensor();
      Tensor dbeta = Tensor::empty({d.B, d.T, d.H});
      Tensor dh0 = Tensor::empty({d.B, d.H, d.K, d.V});
      delta_recurrent_backward(p, checkpoints.data<float>(), grads[0].data<float>(),
                               grads.size() > 1 ? grads[1].data<float>() : nullptr, dq.data<float>(), dk.data<float>(),
                               dv.data<float>(), has_g ? dg.data<float>() : nullptr, dbeta.data<float>(),
                               dh0.data<float>());
      if (q_rstd.defined()) {
        const int64_t n = q_rstd.numel();
        linear_attention::l2norm_rows_backward(qn.data<float>(), q_rstd.data<float>(), n, d.K, dq.data<float>());
        linear_attention::l2norm_rows_backward(kn.data<float>(), k_rstd.data<float>(), n, d.K, dk.data<float>());
      }
      return std::vector<Tensor>{dq, dk, dv, dg, dbeta, has_h0 ? dh0 : Tensor()};
    };
    record(op, {q, k, v, g, beta, initial_state}, outputs, backward_fn);
  }
  return {o, final_state};
}

// Shared body of the recurrent_step_* ops: one token for every (b, h), state in place.
Tensor recurrent_step_delta(const char* op, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                            const Tensor& beta_t, float scale, Tensor& state, bool use_qk_l2norm_in_kernel) {
  const Dims d = linear_attention::check_step(op, q_t, k_t, v_t, state);
  if (g_t.defined()) linear_attention::check_step_g(op, g_t, d);
  linear_attention::check_step_beta(op, beta_t, d);
  if (q_t.device().is_cuda())
    return linear_attention::recurrent_step_delta_cuda(q_t, k_t, v_t, g_t, beta_t, scale, state,
                                                       use_qk_l2norm_in_kernel);
  linear_attention::check_cpu(op, q_t);
  const int64_t K = d.K, V = d.V, KV = K * V;
  const float* q = q_t.data<float>();
  const float* k = k_t.data<float>();
  const float* v = v_t.data<float>();
  const float* g = data_or_null(g_t);
  const float* beta = beta_t.data<float>();
  float* S = state.data<float>();
  Tensor o = Tensor::empty({d.B, d.H, V});
  float* out = o.data<float>();
#pragma omp parallel for if (d.B * d.H * KV > (1 << 15))
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    std::vector<float> qk(q + bh * K, q + (bh + 1) * K), kk(k + bh * K, k + (bh + 1) * K), r(V), u(V), rstd(2);
    if (use_qk_l2norm_in_kernel) {
      linear_attention::l2norm_rows_forward(qk.data(), 1, K, rstd.data());
      linear_attention::l2norm_rows_forward(kk.data(), 1, K, rstd.data() + 1);
    }
    delta_step(S + bh * KV, qk.data(), kk.data(), v + bh * V, g ? std::exp(g[bh]) : 1.0f, beta[bh], scale, K, V,
               r.data(), u.data(), out + bh * V);
  }
  return o;
}

}  // namespace

LinearAttentionOutput fused_recurrent_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                                 std::optional<float> scale, const Tensor& initial_state,
                                                 bool output_final_state, bool use_qk_l2norm_in_kernel) {
  return fused_recurrent_delta("fused_recurrent_delta_rule", q, k, v, Tensor(), beta, scale, initial_state,
                               output_final_state, use_qk_l2norm_in_kernel);
}

LinearAttentionOutput fused_recurrent_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Tensor& g, const Tensor& beta, std::optional<float> scale,
                                                       const Tensor& initial_state, bool output_final_state,
                                                       bool use_qk_l2norm_in_kernel) {
  LAT_CHECK(g.defined(), "fused_recurrent_gated_delta_rule: g: expected a tensor [B, T, H], got an undefined tensor");
  return fused_recurrent_delta("fused_recurrent_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                               output_final_state, use_qk_l2norm_in_kernel);
}

Tensor recurrent_step_delta_rule(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& beta_t,
                                 float scale, Tensor& state, bool use_qk_l2norm_in_kernel) {
  return recurrent_step_delta("recurrent_step_delta_rule", q_t, k_t, v_t, Tensor(), beta_t, scale, state,
                              use_qk_l2norm_in_kernel);
}

Tensor recurrent_step_gated_delta_rule(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& g_t,
                                       const Tensor& beta_t, float scale, Tensor& state, bool use_qk_l2norm_in_kernel) {
  LAT_CHECK(g_t.defined(), "recurrent_step_gated_delta_rule: g_t: expected a tensor [B, H], got an undefined tensor");
  return recurrent_step_delta("recurrent_step_gated_delta_rule", q_t, k_t, v_t, g_t, beta_t, scale, state,
                              use_qk_l2norm_in_kernel);
}

}  // namespace lat
