// The multi-head latent attention mixer's own sizes (model.mla.*), apart from its head count
// (model.attn.n_heads), so that MixerConfig can carry them (layers/mla_attention.h).
#pragma once
#include <cstdint>

namespace lat {

/// Sizes of an `mla` layer (DeepSeek-V2 sec. 2.1; DESIGN.md config: model.mla.*), per head
/// unless said otherwise. Defaults: Kimi-Linear-48B's proportions (kv_lora_rank 512,
/// qk_nope 128, qk_rope 64, v 128) divided by 8, 4, 4, 4.
struct MlaOptions {
  int64_t q_lora_rank = 0;        // 0: a plain q_proj; else q_a_proj -> RMSNorm -> q_b_proj through this rank
  int64_t kv_lora_rank = 64;      // the latent per token that keys and values are expanded from
  int64_t qk_nope_head_dim = 32;  // query/key channels per head expanded from the latent
  int64_t qk_rope_head_dim = 16;  // key channels shared by every head (kv_a_proj_with_mqa's tail)
  int64_t v_head_dim = 32;
  bool rope = false;  // RoPE on the shared key part and q's matching channels; false: none (Kimi Linear)
};

}  // namespace lat
