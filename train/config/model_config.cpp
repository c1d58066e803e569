// model.* keys -> HybridLMConfig (model_config.h).
#include "train/config/model_config.h"

namespace lat {

HybridLMConfig hybrid_lm_config(const ModelConfig& model, int64_t vocab_size) {
  const AttnConfig& attn = model.attn;
  const LinearConfig& linear = model.linear;
  return {.vocab_size = model.vocab_size > 0 ? model.vocab_size : vocab_size,
          .layers = layer_mixers(model),
          .mixer = {// model.*
                    .d_model = model.d_model, .n_heads = model.n_heads, .head_dim = model.head_dim,
                    .expand_v = model.expand_v,
                    // model.attn.*
                    .n_kv_heads = attn.n_kv_heads, .window_size = attn.window_size, .rope_theta = attn.rope_theta,
                    // model.linear.*
                    .feature_map = linear.feature_map, .normalize = linear.normalize,
                    .use_short_conv = linear.use_short_conv, .conv_size = linear.conv_size,
                    .use_gate = linear.use_gate, .chunk_size = linear.chunk_size},
          .mlp_ratio = model.mlp_ratio,
          .norm_eps = model.norm_eps,
          .tie_embeddings = model.tie_embeddings};
}

}  // namespace lat
