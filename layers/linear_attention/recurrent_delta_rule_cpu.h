// The token-by-token CPU delta rule that the delta family (recurrent_delta_cpu.cpp: the
// delta rule, the gated delta rule) and KDA (recurrent_kda_cpu.cpp) share: one step, the
// forward over every (b, h), the backward, the in-kernel L2 norm around them and the single
// decoding step. They differ only in the decay, a template policy: one factor per token for
// the whole state (HeadDecay) or one per key channel, i.e. per state row (ChannelDecay).
// float32 throughout, state [K, V] in float32. Internal to layers/linear_attention/.
//
// One token, with a_i the decay of state row i (a_i = a for HeadDecay) and b = beta_t:
//   S_a = Diag(a) S_{t-1};  r = v_t - S_a^T k_t;  u = b r;  S_t = S_a + k_t u^T;  o_t = scale S_t^T q_t.
// Backward walks the tokens in reverse with dS = dL/dS_t:
//   dS += scale q_t do_t^T;  dq_t = scale S_t do_t;  du = dS^T k_t;  dk_t = dS u
//   dbeta_t = du . r;  dv_t = b du;  dp = -b du   (p = S_a^T k_t)
//   dS_a = dS + k_t dp^T;  dk_t,i += a_i (S_{t-1} dp)_i;  dS <- Diag(a) dS_a
//   ChannelDecay (a_i = exp(g_t,i)): dg_t,i = a_i (dS_a S_{t-1}^T)_ii
//   HeadDecay (a = exp(g_t)):        dg_t = a <dS_a, S_{t-1}>_F, the sum of those over i
// and dS at t = -1 is d initial_state. Forward keeps the state entering every block of
// kCheckpointEvery tokens; backward recomputes one block at a time. With the in-kernel L2
// norm the recurrence reads normalized copies of q and k (qk_l2norm.h).
//
// Params is DeltaParams or KdaParams (q, k, v, beta, h0 in the API layout, B, T, H, K, V,
// scale, use_qk_l2norm_in_kernel, row()); a family gives `decay_of(row)`, the Decay of the
// token at `row` of the [B, T, H] layout, and in backward `dg_of(row)`, where that decay's
// gradient goes (one value for HeadDecay, K for ChannelDecay; null: not wanted).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "autograd/cpu/aligned_buffer.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention/qk_l2norm.h"

namespace lat::linear_attention::recurrent_delta_rule {

constexpr int64_t kCheckpointEvery = 64;

/// One decay factor for the whole state: a = exp(g_t), or 1 (the delta rule).
struct HeadDecay {
  static constexpr bool kPerChannel = false;
  float a;
  float operator()(int64_t) const { return a; }
};

/// One decay factor per key channel: a_i = exp(g_t,i), g [K] log-decay <= 0.
struct ChannelDecay {
  static constexpr bool kPerChannel = true;
  const float* g;
  float operator()(int64_t i) const { return exp_nonpositive(g[i]); }
};

/// The input gradients the shared backward writes (the decay's go through dg_of), API layout.
struct Grads {
  float* dq;     // [B, T, H, K]
  float* dk;     // [B, T, H, K]
  float* dv;     // [B, T, H, V]
  float* dbeta;  // [B, T, H]
  float* dh0;    // [B, H, K, V], or null (not wanted)
};

/// What forward keeps for backward, under the family's own base type: the state entering every
/// block of kCheckpointEvery tokens, [B*H, num_blocks, K, V], and, with the in-kernel L2 norm,
/// the normalized q and k [B, T, H, K] with their rstd [B*T*H].
template <class Base>
struct Saved : Base {
  cpu::AlignedBuffer checkpoints, qn, kn, q_rstd, k_rstd;
};

/// One token on a [K, V] state in place: S <- Diag(a) S; r = v - S^T k; u = b r;
/// S <- S + k u^T; o = scale S^T q. r and u (length V) are written for the backward; with o
/// null there is no readout and q is not read.
template <class Decay>
void step(float* S, const float* q, const float* k, const float* v, const Decay& decay, float b, float scale,
          int64_t K, int64_t V, float* r, float* u, float* o) {
  std::copy(v, v + V, r);
  for (int64_t i = 0; i < K; ++i) {
    float* s = S + i * V;
    const float ki = k[i], a = decay(i);
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

/// Forward for every (b, h): o [B, T, H, V], optionally the final state ht [B, H, K, V] and
/// the checkpoints (null: not kept). q and k: p.q and p.k, or their normalized copies.
template <class Params, class DecayOf>
void forward(const Params& p, const float* q, const float* k, float* o, float* ht, float* checkpoints,
             const DecayOf& decay_of) {
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
        step(S.data(), q + row * K, k + row * K, p.v + row * V, decay_of(row), p.beta[row], p.scale, K, V, r.data(),
             u.data(), o + row * V);
      }
      if (ht) std::memcpy(ht + bh * KV, S.data(), KV * sizeof(float));
    }
}

/// Gradients of every input given d_o [B, T, H, V] and dht [B, H, K, V] (null: zero), with
/// respect to q and k as the kernel read them (before the L2 norm's backward).
template <class Params, class DecayOf, class DgOf>
void backward(const Params& p, const float* q_in, const float* k_in, const float* checkpoints, const float* d_o,
              const float* dht, const Grads& grads, const DecayOf& decay_of, const DgOf& dg_of) {
  using Decay = std::decay_t<decltype(decay_of(int64_t{0}))>;
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
          step(next, nullptr, k_in + row * K, p.v + row * V, decay_of(row), p.beta[row], p.scale, K, V,
               rs.data() + j * V, us.data() + j * V, nullptr);
        }
        for (int64_t t = t1 - 1; t >= t0; --t) {
          const int64_t row = p.row(b, t, h), j = t - t0;
          const float* S = states.data() + (j + 1) * KV;  // S_t
          const float* S_prev = S - KV;                   // S_{t-1}
          const float* q = q_in + row * K;
          const float* k = k_in + row * K;
          const float* dot = d_o + row * V;
          const float* r = rs.data() + j * V;
          const float* u = us.data() + j * V;
          const Decay decay = decay_of(row);
          const float bt = p.beta[row];
          float* dq_t = grads.dq + row * K;
          float* dk_t = grads.dk + row * K;
          float* dg_t = dg_of(row);
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
          // HeadDecay sums the rows' <dS_a, S_{t-1}> into one value, in this order.
          float da_rows = 0.0f;
          for (int64_t i = 0; i < K; ++i) {
            float* ds = dS.data() + i * V;
            const float* sp = S_prev + i * V;
            const float ki = k[i], a = decay(i);
            float acc_k = 0.0f, da = Decay::kPerChannel ? 0.0f : da_rows;
            for (int64_t x = 0; x < V; ++x) {
              const float dsa = ds[x] + ki * dp[x];
              acc_k += sp[x] * dp[x];
              da += dsa * sp[x];
              ds[x] = a * dsa;
            }
            dk_t[i] += a * acc_k;
            if constexpr (Decay::kPerChannel)
              dg_t[i] = a * da;
            else
              da_rows = da;
          }
          if constexpr (!Decay::kPerChannel)
            if (dg_t) *dg_t = decay(0) * da_rows;
        }
      }
      if (grads.dh0) std::memcpy(grads.dh0 + bh * KV, dS.data(), KV * sizeof(float));
    }
}

/// The fused_recurrent forward of a family whose saved type derives from Base: the in-kernel
/// L2 norm, then forward(); what backward needs when `save`, else null.
template <class Base, class Params, class DecayOf>
std::shared_ptr<const Base> fused_forward(const Params& p, float* o, float* ht, bool save, const DecayOf& decay_of) {
  auto saved = std::make_shared<Saved<Base>>();
  const float* q = p.q;
  const float* k = p.k;
  if (p.use_qk_l2norm_in_kernel) {
    const int64_t rows = p.B * p.T * p.H;
    saved->qn = cpu::AlignedBuffer(rows * p.K), saved->kn = cpu::AlignedBuffer(rows * p.K);
    saved->q_rstd = cpu::AlignedBuffer(rows), saved->k_rstd = cpu::AlignedBuffer(rows);
    std::copy(p.q, p.q + rows * p.K, saved->qn.data());
    std::copy(p.k, p.k + rows * p.K, saved->kn.data());
    l2norm_rows_forward(saved->qn.data(), rows, p.K, saved->q_rstd.data());
    l2norm_rows_forward(saved->kn.data(), rows, p.K, saved->k_rstd.data());
    q = saved->qn.data(), k = saved->kn.data();
  }
  if (save) saved->checkpoints = cpu::AlignedBuffer(p.B * p.H * num_chunks(p.T, kCheckpointEvery) * p.K * p.V);
  forward(p, q, k, o, ht, save ? saved->checkpoints.data() : nullptr, decay_of);
  return save ? saved : nullptr;
}

/// The fused_recurrent backward from fused_forward's `saved`: backward(), then the L2 norm's.
template <class Base, class Params, class DecayOf, class DgOf>
void fused_backward(const Params& p, const Base& saved, const float* d_o, const float* dht, const Grads& grads,
                    const DecayOf& decay_of, const DgOf& dg_of) {
  const auto& s = static_cast<const Saved<Base>&>(saved);
  const bool l2 = p.use_qk_l2norm_in_kernel;
  backward(p, l2 ? s.qn.data() : p.q, l2 ? s.kn.data() : p.k, s.checkpoints.data(), d_o, dht, grads, decay_of,
           dg_of);
  if (l2) {
    const int64_t rows = p.B * p.T * p.H;
    l2norm_rows_backward(s.qn.data(), s.q_rstd.data(), rows, p.K, grads.dq);
    l2norm_rows_backward(s.kn.data(), s.k_rstd.data(), rows, p.K, grads.dk);
  }
}

/// One decoding step for every (b, h), T = 1 (q, k [B, H, K], v [B, H, V]; `decay_of(bh)`
/// the decay of head bh): state [B, H, K, V] updated in place, o [B, H, V].
template <class Params, class DecayOf>
void decode_step(const Params& p, float* state, float* o, const DecayOf& decay_of) {
  const int64_t K = p.K, V = p.V, KV = K * V;
#pragma omp parallel for if (p.B * p.H * KV > (1 << 15))
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
    std::vector<float> qk(p.q + bh * K, p.q + (bh + 1) * K), kk(p.k + bh * K, p.k + (bh + 1) * K), r(V), u(V),
        rstd(2);
    if (p.use_qk_l2norm_in_kernel) {
      l2norm_rows_forward(qk.data(), 1, K, rstd.data());
      l2norm_rows_forward(kk.data(), 1, K, rstd.data() + 1);
    }
    step(state + bh * KV, qk.data(), kk.data(), p.v + bh * V, decay_of(bh), p.beta[bh], p.scale, K, V, r.data(),
         u.data(), o + bh * V);
  }
}

}  // namespace lat::linear_attention::recurrent_delta_rule
