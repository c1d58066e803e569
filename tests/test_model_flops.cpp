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

TEST(ModelFlops, AttendedPairsCountTheCausalWindow) {
  EXPECT_EQ(attended_pairs(6, 0), 21.0);   // 1 + 2 + ... + 6
  EXPECT_EQ(attended_pairs(6, 3), 15.0);   // 1 + 2 + 3 + 3 + 3 + 3
  EXPECT_EQ(attended_pairs(6, 6), 21.0);   // a window of the whole block is full attention
  EXPECT_EQ(attended_pairs(6, 64), 21.0);
  EXPECT_EQ(attended_pairs(1, 3), 1.0);
}

TEST(ModelFlops, TinyHybridMatchesTheHandCount) {
  lat::Generator gen(1);
  const lat::HybridLM model(tiny_config(), gen);
  const std::optional<lat::bench::ModelFlops> flops = training_flops_per_token(model, 6);
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
