// The benchmarks' FLOP count (bench/model_flops.h, docs/MFU.md) against a count by hand of a
// tiny model: d_model 8, 2 heads of 4, layers gdn,attn, SwiGLU hidden 16, vocab 5.
#include <gtest/gtest.h>

#include "bench/model_flops.h"
#include "layers/hybrid_lm.h"

namespace {

using lat::bench::attended_pairs;
using lat::bench::training_flops_per_token;

lat::HybridLMConfig tiny_config() {
  lat::HybridLMConfig c;
  c.vocab_size = 5;
  c.layers = {"gdn", "attn"};
  c.mixer.d_model = 8;
  c.mixer.n_heads = 2;
  c.mixer.chunk_size = 4;
  c.mixer.window_size = 3;
  c.intermediate_size = 16;
  return c;
}

/// The FLOPs per token of a model built from `c` at sequences of 6 tokens, the hand counts' T.
std::optional<lat::bench::ModelFlops> flops_at_six_tokens(const lat::HybridLMConfig& c) {
  lat::Generator gen(1);
  const lat::HybridLM model(c, gen);
  return training_flops_per_token(model, 6);
}

TEST(ModelFlops, AttendedPairsCountTheCausalWindow) {
  EXPECT_EQ(attended_pairs(6, 0), 21.0);   // 1 + 2 + ... + 6
  EXPECT_EQ(attended_pairs(6, 3), 15.0);   // 1 + 2 + 3 + 3 + 3 + 3
  EXPECT_EQ(attended_pairs(6, 6), 21.0);   // a window of the whole block is full attention
  EXPECT_EQ(attended_pairs(6, 64), 21.0);
  EXPECT_EQ(attended_pairs(1, 3), 1.0);
}

TEST(ModelFlops, TinyHybridMatchesTheHandCount) {
  const std::optional<lat::bench::ModelFlops> flops = flops_at_six_tokens(tiny_config());
  ASSERT_TRUE(flops.has_value());

  // Linear layers, in x out summed: gdn q, k, v, g (8x8 each), a, b (8x2 each), o (8x8);
  // attn q, k, v, o (8x8 each); two SwiGLUs of gate, up (8x16) and down (16x8); lm_head 8x5.
  const double in_out = (4 * 64 + 2 * 16 + 64) + 4 * 64 + 2 * (3 * 128) + 40;
  ASSERT_EQ(in_out, 1416.0);
  // Attention, T 6, window 3: 15 pairs over 6 tokens, 2 heads of K = V = 4.
  const double attn_forward = 2 * (15.0 / 6) * (2 * 4 + 2 * 4);
  const double attn_backward = 2 * (15.0 / 6) * (6 * 4 + 4 * 4);
  // Gated delta rule, T 6 in 2 chunks of C 4, 2 heads of K = V = 4, per chunk:
  //   forward 6 C^2 K + 4 C^2 V + 6 C K V + C^3/3, backward 16 C^2 K + 10 C^2 V + 16 C K V + C^3/3.
  const double gdn_forward = 2 * (2.0 / 6) * (6 * 64 + 4 * 64 + 6 * 64 + 64.0 / 3);
  const double gdn_backward = 2 * (2.0 / 6) * (16 * 64 + 10 * 64 + 16 * 64 + 64.0 / 3);

  EXPECT_DOUBLE_EQ(flops->forward, 2 * in_out + attn_forward + gdn_forward);
  EXPECT_DOUBLE_EQ(flops->backward, 4 * in_out + attn_backward + gdn_backward);
  EXPECT_DOUBLE_EQ(flops->forward, 2832 + 80 + 6272.0 / 9);  // the same, as numbers
}

TEST(ModelFlops, KdaMatchesTheHandCount) {
  lat::HybridLMConfig c = tiny_config();
  c.layers = {"kda"};
  c.mixer.expand_v = 2.0;  // K 4, V 8
  const std::optional<lat::bench::ModelFlops> flops = flops_at_six_tokens(c);
  ASSERT_TRUE(flops.has_value());

  // Linear layers, in x out: q, k 8x8; v 8x16; the forget gate's f_a 8x4 and f_b 4x8; b 8x2;
  // the output gate's g_a 8x4 and g_b 4x16; o 16x8; the SwiGLU's 3 x 128; lm_head 40.
  const double in_out = 64 + 64 + 128 + 32 + 32 + 16 + 32 + 64 + 128 + 384 + 40;
  ASSERT_EQ(in_out, 984.0);
  // Per chunk (C 4) and head (K 4, V 8), forward: A and Q K^T over their 6 + 10 = 16 pairs
  // of 2 x 4 (128); [W | U] = T [.. | ..], 4x12 by 4 (384); V_new, the state update and
  // (Q o E) S, 256 each; (Q K^T) V_new (256); T by substitution (64 / 3).
  const double chunk_forward = 128 + 384 + 3 * 256 + 256 + 64.0 / 3;
  // Backward: the forward's A, Q K^T, T, [W | U], V_new and state update again
  // (128 + 64/3 + 384 + 256 + 256), dV_new (256 + 256), dO S^T (256), V_new dh^T (256),
  // dh (2 x 256), dQ (256), dq and dk through Q K^T's 10 pairs (10 x 2 x 8), dW (256),
  // T^T [dW | dU] (384), dA (384), dk twice through A's 6 pairs (6 x 2 x 8).
  const double chunk_backward = (128 + 64.0 / 3 + 384 + 256 + 256) + 512 + 256 + 256 + 512 + 256 + 160 + 256 + 384 +
                                384 + 96;
  // T 6: 2 chunks over 6 tokens, 2 heads.
  EXPECT_DOUBLE_EQ(flops->forward, 2 * in_out + 2 * (2.0 / 6) * chunk_forward);
  EXPECT_DOUBLE_EQ(flops->backward, 4 * in_out + 2 * (2.0 / 6) * chunk_backward);
  EXPECT_DOUBLE_EQ(flops->forward, 2992 + 128.0 / 9);  // the same, as numbers
  EXPECT_DOUBLE_EQ(flops->backward, 3936 + 8192.0 / 3 + 128.0 / 9);
}

TEST(ModelFlops, MlaMatchesTheHandCount) {
  lat::HybridLMConfig c = tiny_config();
  c.layers = {"mla"};
  c.mixer.mla.q_lora_rank = 3;
  c.mixer.mla.kv_lora_rank = 4;
  c.mixer.mla.qk_nope_head_dim = 2;
  c.mixer.mla.qk_rope_head_dim = 2;
  c.mixer.mla.v_head_dim = 3;
  const std::optional<lat::bench::ModelFlops> flops = flops_at_six_tokens(c);
  ASSERT_TRUE(flops.has_value());

  // Linear layers, in x out: q_a 8x3, q_b 3x8 (2 heads of 2 + 2), kv_a_proj_with_mqa 8x6
  // (latent 4, shared rope key 2), kv_b 4x10 (2 heads of key 2 and value 3), o 6x8; the
  // SwiGLU's 3 x 128; lm_head 40.
  const double in_out = 24 + 24 + 48 + 40 + 48 + 384 + 40;
  ASSERT_EQ(in_out, 608.0);
  // The expanded attention, window 3: 15 pairs over 6 tokens, 2 heads, key size 4, value 3.
  EXPECT_DOUBLE_EQ(flops->forward, 2 * in_out + 2 * (15.0 / 6) * (2 * 4 + 2 * 3));
  EXPECT_DOUBLE_EQ(flops->backward, 4 * in_out + 2 * (15.0 / 6) * (6 * 4 + 4 * 3));
  EXPECT_DOUBLE_EQ(flops->forward, 1286.0);  // the same, as numbers
  EXPECT_DOUBLE_EQ(flops->backward, 2612.0);
}

TEST(ModelFlops, Mamba2MatchesTheHandCount) {
  lat::HybridLMConfig c = tiny_config();
  c.layers = {"mamba2"};
  c.mixer.mamba.expand = 2;    // d_inner 16
  c.mixer.mamba.head_dim = 4;  // 4 heads
  c.mixer.mamba.n_groups = 2;
  c.mixer.mamba.d_state = 3;
  c.mixer.mamba.chunk_size = 4;
  const std::optional<lat::bench::ModelFlops> flops = flops_at_six_tokens(c);
  ASSERT_TRUE(flops.has_value());

  // Linear layers, in x out: in_proj 8x48 (z 16, x 16, B and C 2 groups of 3 each, dt 4),
  // out_proj 16x8; the SwiGLU's 3 x 128; lm_head 40.
  const double in_out = 384 + 128 + 384 + 40;
  ASSERT_EQ(in_out, 936.0);
  // Per chunk (C 4), forward: per head (N 3, P 4) U = (B o decay)^T X and (C o decay) S,
  // 96 each, and A X, 128; per group C B^T, 96.
  const double chunk_forward = 4 * (96 + 96 + 128) + 2 * 96;
  // Backward: per head C^T dY, dY S^T, X dh^T, dX = B dh (96 each), P = dY X^T and A^T dY
  // (128 each); per group P B and P^T C (96 each).
  const double chunk_backward = 4 * (4 * 96 + 2 * 128) + 2 * (2 * 96);
  // T 6: 2 chunks over 6 tokens.
  EXPECT_DOUBLE_EQ(flops->forward, 2 * in_out + (2.0 / 6) * chunk_forward);
  EXPECT_DOUBLE_EQ(flops->backward, 4 * in_out + (2.0 / 6) * chunk_backward);
  EXPECT_DOUBLE_EQ(flops->forward, 1872 + 1472.0 / 3);  // the same, as numbers
  EXPECT_DOUBLE_EQ(flops->backward, 3744 + 2944.0 / 3);
}

TEST(ModelFlops, TiedEmbeddingsCountAsTheHead) {
  lat::HybridLMConfig c = tiny_config();
  c.tie_embeddings = true;
  lat::Generator gen(1);
  const lat::HybridLM tied(c, gen);
  lat::Generator gen2(1);
  const lat::HybridLM untied(tiny_config(), gen2);
  EXPECT_DOUBLE_EQ(training_flops_per_token(tied, 6)->forward, training_flops_per_token(untied, 6)->forward);
}

TEST(ModelFlops, AnUncountedMixerIsNamed) {
  lat::HybridLMConfig c = tiny_config();
  c.layers = {"gdn", "simple_gla"};
  lat::Generator gen(1);
  const lat::HybridLM model(c, gen);
  std::string uncounted;
  EXPECT_FALSE(training_flops_per_token(model, 6, &uncounted).has_value());
  EXPECT_EQ(uncounted, "simple_gla");
}

}  // namespace
