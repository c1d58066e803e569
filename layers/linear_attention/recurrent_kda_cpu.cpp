// Token-by-token CPU kernels of KDA (kda_kernels.h): fused_recurrent forward and backward, and
// the single decoding step, through the shared delta rule of recurrent_delta_rule_cpu.h (its
// recurrence and backward) with one decay per key channel: a_i = exp(g_t,i), gk [B, T, H, K].
#include "layers/linear_attention/kda_kernels.h"
#include "layers/linear_attention/recurrent_delta_rule_cpu.h"

namespace lat::linear_attention {
namespace {

using recurrent_delta_rule::ChannelDecay;

// The decay of the token at `row` of the [B, T, H] layout: its K channels of gk.
auto channel_decay(const KdaParams& p) {
  return [&p](int64_t row) { return ChannelDecay{p.gk + row * p.K}; };
}

}  // namespace

std::shared_ptr<const KdaSaved> fused_recurrent_kda_forward_cpu(const KdaParams& p, float* o, float* ht, bool save) {
  return recurrent_delta_rule::fused_forward<KdaSaved>(p, o, ht, save, channel_decay(p));
}

void fused_recurrent_kda_backward_cpu(const KdaParams& p, const KdaSaved& saved, const float* d_o, const float* dht,
                                      const KdaGrads& grads) {
  const auto dg_of = [&grads, &p](int64_t row) { return grads.dgk + row * p.K; };
  recurrent_delta_rule::fused_backward(p, saved, d_o, dht,
                                       {.dq = grads.dq, .dk = grads.dk, .dv = grads.dv, .dbeta = grads.dbeta,
                                        .dh0 = grads.dh0},
                                       channel_decay(p), dg_of);
}

void recurrent_step_kda_cpu(const KdaParams& p, float* state, float* o) {
  recurrent_delta_rule::decode_step(p, state, o, channel_decay(p));
}

}  // namespace lat::linear_attention
