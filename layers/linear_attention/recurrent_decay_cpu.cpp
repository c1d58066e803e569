// Token-by-token CPU kernels of the decayed family (decay_kernels.h): fused_recurrent
// forward and backward, and the single decoding step. float32 throughout, state in float32.
//
// One token, with a_t = exp(g_t) (1 without a gate) and w_t = v_t, or [v_t, 1] with the
// normalizer (state [K, V + 1], z its last column; o_t = r_t[:V] / (r_t[V] + kNormEps),
// Katharopoulos et al. 2020, sec. 3.2):
//   S_t = a_t S_{t-1} + k_t w_t^T,  r_t = scale S_t^T q_t.
// Backward walks the tokens in reverse with dS = dL/dS_t and dr_t = dL/dr_t:
//   dS += scale q_t dr_t^T;  dq_t = scale S_t dr_t;  dk_t = dS w_t;  dv_t = dS[:, :V]^T k_t;
//   dg_t = a_t <S_{t-1}, dS>_F;  dS <- a_t dS   (and dS at t = -1 is d initial_state).
// Instead of keeping all T states, forward stores the state entering every block of
// kCheckpointEvery tokens and backward recomputes one block at a time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/cpu/aligned_buffer.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention/decay_kernels.h"

namespace lat::linear_attention {
namespace {

using cpu::AlignedBuffer;

constexpr int64_t kCheckpointEvery = 64;


// What forward keeps for backward: the state entering every block of kCheckpointEvery
// tokens, [B*H, num_blocks, K, Vs].
struct FusedRecurrentDecaySaved : DecaySaved {
  AlignedBuffer checkpoints;
};

// v_t, extended by the constant-1 column when normalized, into vt[0..Vs).
void load_value(const DecayParams& p, int64_t row, float* vt) {
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
    normalize_forward_cpu(r, 1, V, o);
  else
    std::memcpy(o, r, V * sizeof(float));
}

// Forward for every (b, h): o, optionally the final state ht [B, H, K, Vs] and the
// checkpoints [B*H, num_blocks, K, Vs] (the state entering each block).
void recurrent_forward(const DecayParams& p, float* o, float* ht, float* checkpoints) {
  const int64_t K = p.K, Vs = p.Vs(), NB = num_chunks(p.T, kCheckpointEvery);
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
// dg is written only when p.g and grads.dg are set, dh0 when grads.dh0 is.
void recurrent_backward(const DecayParams& p, const float* checkpoints, const float* d_o, const float* dht,
                        const DecayGrads& grads) {
  const int64_t K = p.K, V = p.V, Vs = p.Vs(), NB = num_chunks(p.T, kCheckpointEvery), KV = K * Vs;
  float* dg = p.g ? grads.dg : nullptr;
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
            normalize_backward_cpu(r.data(), dot, 1, V, dr.data());
          } else {
            std::memcpy(dr.data(), dot, V * sizeof(float));
          }
          float* dq_t = grads.dq + row * K;
          float* dk_t = grads.dk + row * K;
          float* dv_t = grads.dv + row * V;
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
      if (grads.dh0) std::memcpy(grads.dh0 + bh * KV, dS.data(), KV * sizeof(float));
    }
}

}  // namespace

void recurrent_step_decay_cpu(const DecayParams& p, float* state, float* o) {
  const int64_t K = p.K, V = p.V, Vs = p.Vs();
#pragma omp parallel for if (p.B * p.H * K * Vs > (1 << 15))
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
    std::vector<float> vt(Vs), r(Vs);
    load_value(p, bh, vt.data());
    update_state(state + bh * K * Vs, p.k + bh * K, vt.data(), p.g ? std::exp(p.g[bh]) : 1.0f, K, Vs);
    read_state(state + bh * K * Vs, p.q + bh * K, p.scale, K, Vs, r.data());
    write_output(r.data(), V, p.normalize, o + bh * V);
  }
}

std::shared_ptr<const DecaySaved> fused_recurrent_decay_forward_cpu(const DecayParams& p, float* o, float* ht,
                                                                    bool save) {
  auto saved = std::make_shared<FusedRecurrentDecaySaved>();
  if (save) saved->checkpoints = AlignedBuffer(p.B * p.H * num_chunks(p.T, kCheckpointEvery) * p.K * p.Vs());
  recurrent_forward(p, o, ht, save ? saved->checkpoints.data() : nullptr);
  return save ? saved : nullptr;
}

void fused_recurrent_decay_backward_cpu(const DecayParams& p, const DecaySaved& saved, const float* d_o,
                                        const float* dht, const DecayGrads& grads) {
  recurrent_backward(p, static_cast<const FusedRecurrentDecaySaved&>(saved).checkpoints.data(), d_o, dht, grads);
}

}  // namespace lat::linear_attention
