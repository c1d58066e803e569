// Token-by-token CPU kernels of the delta-rule family (delta_kernels.h): fused_recurrent
// forward and backward, and the single decoding step, through the shared delta rule of
// recurrent_delta_rule_cpu.h (its recurrence and backward) with one decay per token and head:
// a = exp(g_t) (gated), or 1 (the delta rule, g null), whose gradient dg_t sums over the state.
#include <cmath>

#include "layers/linear_attention/delta_kernels.h"
#include "layers/linear_attention/recurrent_delta_rule_cpu.h"

namespace lat::linear_attention {
namespace {

using recurrent_delta_rule::HeadDecay;

// The decay of the token at `row` of the [B, T, H] layout.
auto head_decay(const DeltaParams& p) {
  return [&p](int64_t row) { return HeadDecay{p.g ? std::exp(p.g[row]) : 1.0f}; };
}

}  // namespace

std::shared_ptr<const DeltaSaved> fused_recurrent_delta_forward_cpu(const DeltaParams& p, float* o, float* ht,
                                                                    bool save) {
  return recurrent_delta_rule::fused_forward<DeltaSaved>(p, o, ht, save, head_decay(p));
}

void fused_recurrent_delta_backward_cpu(const DeltaParams& p, const DeltaSaved& saved, const float* d_o,
                                        const float* dht, const DeltaGrads& grads) {
  // dg is written only when p.g and grads.dg are set.
  float* dg = p.g ? grads.dg : nullptr;
  const auto dg_of = [dg](int64_t row) { return dg ? dg + row : nullptr; };
  recurrent_delta_rule::fused_backward(p, saved, d_o, dht,
                                       {.dq = grads.dq, .dk = grads.dk, .dv = grads.dv, .dbeta = grads.dbeta,
                                        .dh0 = grads.dh0},
                                       head_decay(p), dg_of);
}

void recurrent_step_delta_cpu(const DeltaParams& p, float* state, float* o) {
  recurrent_delta_rule::decode_step(p, state, o, head_decay(p));
}

}  // namespace lat::linear_attention
