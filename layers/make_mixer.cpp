// make_mixer: model.layers kind -> mixer, the one place that maps kind names to classes.
#include "layers/attention.h"
#include "layers/linear_attention_layers.h"

namespace lat {

std::unique_ptr<Mixer> make_mixer(const std::string& kind, const MixerConfig& config, Generator& gen) {
  if (kind == "attn") {
    AttentionConfig a;
    a.d_model = config.d_model;
    a.n_heads = config.n_heads;
    a.n_kv_heads = config.n_kv_heads;
    a.head_dim = config.head_dim;
    a.window_size = config.window_size;
    a.rope_theta = config.rope_theta;
    a.init_std = config.init_std;
    a.out_init_std = config.out_init_std;
    return std::make_unique<Attention>(a, gen);
  }
  if (kind == "linear_attn") return std::make_unique<LinearAttention>(config, gen);
  if (kind == "simple_gla") return std::make_unique<SimpleGLA>(config, gen);
  if (kind == "retention") return std::make_unique<SimpleGLA>(config, gen, true);
  if (kind == "delta_net") return std::make_unique<DeltaNet>(config, gen);
  LAT_CHECK(kind == "gdn", "make_mixer: kind: expected one of attn, linear_attn, simple_gla, retention, delta_net, "
                           "gdn, got '"
                               << kind << "'");
  return std::make_unique<GatedDeltaNet>(config, gen);
}

}  // namespace lat
