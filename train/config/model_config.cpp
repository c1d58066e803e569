// model.* keys -> HybridLMConfig (model_config.h).
#include "train/config/model_config.h"

namespace lat {

HybridLMConfig hybrid_lm_config(const ModelConfig& model, int64_t vocab_size) {
  HybridLMConfig c;
  c.vocab_size = model.vocab_size > 0 ? model.vocab_size : vocab_size;
  c.layers = layer_mixers(model);
  c.mlp_ratio = model.mlp_ratio;
  c.norm_eps = model.norm_eps;
  c.tie_embeddings = model.tie_embeddings;
  MixerConfig& m = c.mixer;
  m.d_model = model.d_model;
  m.n_heads = model.n_heads;
  m.head_dim = model.head_dim;
  m.expand_v = model.expand_v;
  m.n_kv_heads = model.attn.n_kv_heads;
  m.window_size = model.attn.window_size;
  m.rope_theta = model.attn.rope_theta;
  m.feature_map = model.linear.feature_map;
  m.normalize = model.linear.normalize;
  m.use_short_conv = model.linear.use_short_conv;
  m.conv_size = model.linear.conv_size;
  m.use_gate = model.linear.use_gate;
  m.chunk_size = model.linear.chunk_size;
  return c;
}

}  // namespace lat
