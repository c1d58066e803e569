// Token-by-token CPU kernels of KDA (kda_kernels.h): fused_recurrent forward and backward,
// and the single decoding step. float32 throughout.
//
// One token, with a_i = exp(g_t,i) per key channel i and b = beta_t:
//   S_a = Diag(a) S_{t-1};  r = v_t - S_a^T k_t;  u = b r;  S_t = S_a + k_t u^T;  o_t = scale S_t^T q_t.
// Backward walks the tokens in reverse with dS = dL/dS_t (as recurrent_delta_cpu.cpp, the
// scalar decay become a per-row one):
//   dS += scale q_t do_t^T;  dq_t = scale S_t do_t;  du = dS^T k_t;  dk_t = dS u
//   dbeta_t = du . r;  dv_t = b du;  dp = -b du   (p = S_a^T k_t)
//   dS_a = dS + k_t dp^T;  dk_t,i += a_i (S_{t-1} dp)_i;  dg_t,i = a_i (dS_a S_{t-1}^T)_ii;
//   dS <- Diag(a) dS_a
// and dS at t = -1 is d initial_state. Forward keeps the state entering every block of
// kCheckpointEvery tokens; backward recomputes one block at a time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/cpu/aligned_buffer.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention/kda_kernels.h"
#include "layers/linear_attention/qk_l2norm.h"

namespace lat::linear_attention {
namespace {

using cpu::AlignedBuffer;

constexpr int64_t kCheckpointEvery = 64;

// What forward keeps for backward: the state entering every block of kCheckpointEvery
// tokens, [B*H, num_blocks, K, V], and, with the in-kernel L2 norm, the normalized q and k
// [B, T, H, K] with their rstd [B*T*H].
struct FusedRecurrentKdaSaved : KdaSaved {
  AlignedBuffer checkpoints, qn, kn, q_rstd, k_rstd;
};

// One token on a [K, V] state in place: S <- Diag(exp(g)) S; r = v - S^T k; u = b r;
// S <- S + k u^T; o = scale S^T q. r and u (length V) are written for the backward; with o
// null there is no readout and q is not read.
void kda_step(float* S, const float* q, const float* k, const float* v, const float* g, float b, float scale,
              int64_t K, int64_t V, float* r, float* u, float* o) {
  std::copy(v, v + V, r);
  for (int64_t i = 0; i < K; ++i) {
    float* s = S + i * V;
    const float ki = k[i], a = exp_nonpositive(g[i]);
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

// Forward for every (b, h): o, optionally the final state ht and the checkpoints.
void kda_recurrent_forward(const KdaParams& p, const float* q, const float* k, float* o, float* ht,
                           float* checkpoints) {
  const int64_t K = p.K, V = p.V, KV = K * V, NB = num_chunks(p.T, kCheckpointEvery);
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
        kda_step(S.data(), q + row * K, k + row * K, p.v + row * V, p.gk + row * K, p.beta[row], p.scale, K, V,
                 r.data(), u.data(), o + row * V);
      }
      if (ht) std::memcpy(ht + bh * KV, S.data(), KV * sizeof(float));
    }
}

// Gradients of every input given do and dht (null: zero), with respect to q and k as the
// kernel read them (before the L2 norm's backward).
void kda_recurrent_backward(const KdaParams& p, const float* q_in, const float* k_in, const float* checkpoints,
                            const float* d_o, const float* dht, const KdaGrads& grads) {
  const int64_t K = p.K, V = p.V, KV = K * V, NB = num_chunks(p.T, kCheckpointEvery), L = kCheckpointEvery;
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
          kda_step(next, nullptr, k_in + row * K, p.v + row * V, p.gk + row * K, p.beta[row], p.scale, K, V,
                   rs.data() + j * V, us.data() + j * V, nullptr);
        }
        for (int64_t t = t1 - 1; t >= t0; --t) {
          const int64_t row = p.row(b, t, h), j = t - t0;
          const float* S = states.data() + (j + 1) * KV;  // S_t
          const float* S_prev = S - KV;                   // S_{t-1}
          const float* q = q_in + row * K;
          const float* k = k_in + row * K;
          const float* g = p.gk + row * K;
          const float* dot = d_o + row * V;
          const float* r = rs.data() + j * V;
          const float* u = us.data() + j * V;
          const float bt = p.beta[row];
          float* dq_t = grads.dq + row * K;
          float* dk_t = grads.dk + row * K;
          float* dg_t = grads.dgk + row * K;
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
            grads.dv[row * V + x] = bt * du[x];
            dp[x] = -bt * du[x];
          }
          grads.dbeta[row] = db;
          for (int64_t i = 0; i < K; ++i) {
            float* ds = dS.data() + i * V;
            const float* sp = S_prev + i * V;
            const float ki = k[i], a = exp_nonpositive(g[i]);
            float acc_k = 0.0f, da = 0.0f;
            for (int64_t x = 0; x < V; ++x) {
              const float dsa = ds[x] + ki * dp[x];
              acc_k += sp[x] * dp[x];
              da += dsa * sp[x];
              ds[x] = a * dsa;
            }
            dk_t[i] += a * acc_k;
            dg_t[i] = a * da;
          }
        }
      }
      if (grads.dh0) std::memcpy(grads.dh0 + bh * KV, dS.data(), KV * sizeof(float));
    }
}

}  // namespace

std::shared_ptr<const KdaSaved> fused_recurrent_kda_forward_cpu(const KdaParams& p, float* o, float* ht, bool save) {
  auto saved = std::make_shared<FusedRecurrentKdaSaved>();
  const float* q = p.q;
  const float* k = p.k;
  if (p.use_qk_l2norm_in_kernel) {
    const int64_t rows = p.B * p.T * p.H;
    saved->qn = AlignedBuffer(rows * p.K), saved->kn = AlignedBuffer(rows * p.K);
    saved->q_rstd = AlignedBuffer(rows), saved->k_rstd = AlignedBuffer(rows);
    std::copy(p.q, p.q + rows * p.K, saved->qn.data());
    std::copy(p.k, p.k + rows * p.K, saved->kn.data());
    l2norm_rows_forward(saved->qn.data(), rows, p.K, saved->q_rstd.data());
    l2norm_rows_forward(saved->kn.data(), rows, p.K, saved->k_rstd.data());
    q = saved->qn.data(), k = saved->kn.data();
  }
  if (save) saved->checkpoints = AlignedBuffer(p.B * p.H * num_chunks(p.T, kCheckpointEvery) * p.K * p.V);
  kda_recurrent_forward(p, q, k, o, ht, save ? saved->checkpoints.data() : nullptr);
  return save ? saved : nullptr;
}

void fused_recurrent_kda_backward_cpu(const KdaParams& p, const KdaSaved& saved, const float* d_o, const float* dht,
                                      const KdaGrads& grads) {
  const auto& s = static_cast<const FusedRecurrentKdaSaved&>(saved);
  const bool l2 = p.use_qk_l2norm_in_kernel;
  kda_recurrent_backward(p, l2 ? s.qn.data() : p.q, l2 ? s.kn.data() : p.k, s.checkpoints.data(), d_o, dht, grads);
  if (l2) {
    const int64_t rows = p.B * p.T * p.H;
    l2norm_rows_backward(s.qn.data(), s.q_rstd.data(), rows, p.K, grads.dq);
    l2norm_rows_backward(s.kn.data(), s.k_rstd.data(), rows, p.K, grads.dk);
  }
}

void recurrent_step_kda_cpu(const KdaParams& p, float* state, float* o) {
  const int64_t K = p.K, V = p.V, KV = K * V;
#pragma omp parallel for if (p.B * p.H * KV > (1 << 15))
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
    std::vector<float> qk(p.q + bh * K, p.q + (bh + 1) * K), kk(p.k + bh * K, p.k + (bh + 1) * K), r(V), u(V),
        rstd(2);
    if (p.use_qk_l2norm_in_kernel) {
      l2norm_rows_forward(qk.data(), 1, K, rstd.data());
      l2norm_rows_forward(kk.data(), 1, K, rstd.data() + 1);
    }
    kda_step(state + bh * KV, qk.data(), kk.data(), p.v + bh * V, p.gk + bh * K, p.beta[bh], p.scale, K, V, r.data(),
             u.data(), o + bh * V);
  }
}

}  // namespace lat::linear_attention
