// lat's parameter names and layouts <-> Qwen3_5ForCausalLM's state dict (transformers).
//
//   embeddings.weight                 model.embed_tokens.weight
//   layers.i.attn_norm.weight         model.layers.i.input_layernorm.weight           (norm)
//   layers.i.mlp_norm.weight          model.layers.i.post_attention_layernorm.weight  (norm)
//   layers.i.mlp.{gate,up,down}_proj  model.layers.i.mlp.{gate,up,down}_proj
//   norm.weight                       model.norm.weight                               (norm)
//   lm_head.weight                    lm_head.weight (absent when tied)
//   gdn layer i, layers.i.attn.* ->   model.layers.i.linear_attn.*:
//     q_proj, k_proj, v_proj rows      in_proj_qkv.weight [2*H*K + Hv*V, d] (stacked in that order)
//     q_conv1d, k_conv1d, v_conv1d     conv1d.weight [2*H*K + Hv*V, 1, conv] (stacked on dim 0)
//     g_proj, a_proj, b_proj           in_proj_z, in_proj_a, in_proj_b
//     A_log, dt_bias, o_norm, o_proj   A_log, dt_bias, norm, out_proj
//   attn layer i, layers.i.attn.* ->  model.layers.i.self_attn.{q,k,v,o}_proj, q_norm (norm), k_norm (norm)
// H, K = model.n_heads, head_dim; Hv, V = linear.n_v_heads, value head dim; d = d_model.
// transformers scales by 1 + w in the (norm) tensors; where lat's model.norm_zero_centered is
// false lat scales by w, so the export stores w - 1. The gdn output norm scales by w in both.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lat/tensor.h"
#include "train/config/config_types.h"

namespace lat {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// One lat tensor inside a transformers tensor: its rows along dim 0, in order.
struct HfTensorPart {
  std::string lat_name;
  std::vector<int64_t> shape;
};

/// How a tensor's values relate between the two layouts.
enum class HfValues { same, zero_centred_norm };

/// One transformers tensor and the lat tensors it holds.
struct HfTensorSpec {
  std::string hf_name;
  std::vector<int64_t> shape;
  std::vector<HfTensorPart> parts;  // one, or the stacked q, k, v of a gdn layer
  HfValues values = HfValues::same;
};

/// Every tensor of the transformers model of `model` (resolved, Qwen3.5-expressible) with
/// `vocab_size` tokens, in state-dict order; no lm_head.weight when tied.
std::vector<HfTensorSpec> hf_tensor_layout(const ModelConfig& model, int64_t vocab_size);

/// How transformers' file names each lat tensor of `model`'s layout, for messages: lat name ->
/// "'<name>'", or "'<name>' rows [a, b)" for one part of a stacked tensor (q, k, v of in_proj_qkv).
std::map<std::string, std::string> hf_tensor_labels(const ModelConfig& model, int64_t vocab_size);

/// lat's tensors (f32, CPU; `model`'s names and shapes) under transformers' names and layouts,
/// norms stored as w - 1 when model.norm_zero_centered is false. Throws lat::Error naming
/// `source` and the lat tensor that is missing or of another shape.
NamedTensors hf_tensors_from_lat(const ModelConfig& model, int64_t vocab_size, const NamedTensors& tensors,
                                 const std::string& source);

/// transformers' tensors (f32, CPU) under lat's names and layouts, for `model` (read from the
/// same directory's config.json: norm_zero_centered, so values are copied bit for bit). An
/// lm_head.weight beside tied embeddings is dropped when it is an exact copy of
/// model.embed_tokens.weight; mtp.* and model.visual.* tensors are skipped, as transformers
/// skips them. Throws lat::Error naming `source` and the tensor (transformers' name) that is
/// missing, unexpected, of another shape, or a tied lm_head.weight that is not a copy.
NamedTensors lat_tensors_from_hf(const ModelConfig& model, int64_t vocab_size, const NamedTensors& tensors,
                                 const std::string& source);

}  // namespace lat
