// model.* keys -> HybridLMConfig (model_config.h).
#include "train/config/model_config.h"

namespace lat {

HybridLMConfig hybrid_lm_config(const ModelConfig& model, int64_t vocab_size) {
  const AttnConfig& attn = model.attn;
  const LinearConfig& linear = model.linear;
  const MambaConfig& mamba = model.mamba;
  const MlaConfig& mla = model.mla;
  return {.vocab_size = model.vocab_size > 0 ? model.vocab_size : vocab_size,
          .layers = layer_mixers(model),
          .mixer = {// model.*
                    .d_model = model.d_model, .n_heads = model.n_heads, .head_dim = model.head_dim,
                    .expand_v = model.expand_v,
                    // model.attn.*
                    .attn_n_heads = attn.n_heads, .attn_head_dim = attn.head_dim,
                    .n_kv_heads = attn.n_kv_heads, .window_size = attn.window_size, .rope_theta = attn.rope_theta,
                    .output_gate = attn.output_gate, .qk_norm = attn.qk_norm, .rope_fraction = attn.rope_fraction,
                    // model.linear.*
                    .feature_map = linear.feature_map, .normalize = linear.normalize,
                    .use_short_conv = linear.use_short_conv, .conv_size = linear.conv_size,
                    .use_gate = linear.use_gate, .chunk_size = linear.chunk_size, .n_v_heads = linear.n_v_heads,
                    .norm_zero_centered = model.norm_zero_centered,
                    // model.mamba.*
                    .mamba = {.d_state = mamba.d_state, .head_dim = mamba.head_dim, .expand = mamba.expand,
                              .n_groups = mamba.n_groups, .conv_size = mamba.conv_size,
                              .chunk_size = mamba.chunk_size, .conv_bias = mamba.conv_bias,
                              .proj_bias = mamba.proj_bias, .time_step_limit = mamba.time_step_limit,
                              .dt_min = mamba.dt_min, .dt_max = mamba.dt_max},
                    // model.mla.*
                    .mla = {.q_lora_rank = mla.q_lora_rank, .kv_lora_rank = mla.kv_lora_rank,
                            .qk_nope_head_dim = mla.qk_nope_head_dim, .qk_rope_head_dim = mla.qk_rope_head_dim,
                            .v_head_dim = mla.v_head_dim, .rope = mla.rope}},
          .mlp_ratio = model.mlp_ratio,
          .intermediate_size = model.intermediate_size,
          .norm_eps = model.norm_eps,
          .norm_zero_centered = model.norm_zero_centered,
          .tie_embeddings = model.tie_embeddings};
}

}  // namespace lat
