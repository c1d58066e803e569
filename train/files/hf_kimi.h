// The Hugging Face Kimi Linear family of lat's export and import (hf_config.h): transformers'
// KimiLinearForCausalLM (model_type "kimi_linear") with a dense MLP in every layer, its
// config.json keys and tensors to and from lat's.
//
//   hidden_size = d_model          num_hidden_layers = n_layers       vocab_size = vocab_size
//   layer_types[i] = linear_attention (kda) | full_attention (mla), one per layer (absent:
//                    linear_attn_config's 1-based kda_layers / full_attn_layers, else
//                    transformers' rule: full_attention at every 4th layer after the first)
//   mlp_layer_types[i] = dense, every layer (absent: first_k_dense_replace >= num_hidden_layers)
//   linear_num_heads = n_heads   linear_head_dim = head_dim (also the value head dim)
//   linear_conv_kernel_dim = linear.conv_size (linear_attn_config's num_heads, head_dim,
//                    short_conv_kernel_size take precedence, as in transformers)
//   num_attention_heads = attn.n_heads = num_key_value_heads   kv_lora_rank = mla.kv_lora_rank
//   q_lora_rank = mla.q_lora_rank (null for 0)   qk_nope_head_dim, qk_rope_head_dim, v_head_dim = mla.*
//   intermediate_size = the SwiGLU width   rms_norm_eps = norm_eps   tie_word_embeddings = tie_embeddings
// Implied by the architecture: hidden_act silu, attention_bias false, plain norms (scale by w),
// short convolutions without bias and the sigmoid-gated output norm in kda (use_short_conv,
// use_gate), no position encoding in mla (mla.rope false; head_dim and qk_head_dim are derived
// by transformers and read as informational, as are the experts' keys of a dense model).
//
// Tensors, lat -> transformers (the names save_pretrained writes; transformers renames them
// on load):
//   embeddings.weight                 model.embed_tokens.weight
//   layers.i.attn_norm.weight         model.layers.i.input_layernorm.weight           (norm)
//   layers.i.mlp_norm.weight          model.layers.i.post_attention_layernorm.weight  (norm)
//   layers.i.mlp.{gate,up,down}_proj  model.layers.i.block_sparse_moe.{gate,up,down}_proj
//   norm.weight                       model.norm.weight                               (norm)
//   lm_head.weight                    lm_head.weight (a copy of the embeddings when tied:
//                                     transformers ties nothing here and would otherwise
//                                     initialize it at random)
//   kda or mla layer i, layers.i.attn.X -> model.layers.i.self_attn.X under the same names,
//     except kda's A_log [H] -> [1, 1, H, 1].
// transformers scales by w in the (norm) tensors; where lat's model.norm_zero_centered is true
// lat scales by 1 + w, so the export stores w + 1. The kda output norm and mla's two norms
// scale by w in both.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/config/config_types.h"
#include "train/files/hf_weights.h"
#include "train/files/safetensors.h"

namespace lat {

/// The model_type of the config.json files this family reads and writes.
inline constexpr const char* kKimiModelType = "kimi_linear";

/// Throws ConfigError "export --format hf: layer <i> (<kind>): <feature> ..." for the first
/// feature of `model` (resolved) that kimi_linear cannot express: a mixer other than kda and
/// mla, kda without linear.use_short_conv or linear.use_gate or with expand_v other than 1,
/// mla with mla.rope or attn.window_size > 0.
void check_kimi_expressible(const ModelConfig& model);

/// The config.json transformers writes for `model` (resolved; check_kimi_expressible first)
/// with `vocab_size` tokens, keys sorted as save_pretrained sorts them; "dtype" is "float32" or
/// "bfloat16" after `dtype`.
nlohmann::ordered_json kimi_config_json(const ModelConfig& model, int64_t vocab_size, SafetensorsDType dtype);

/// lat's model.* keys (other keys at their defaults, not yet resolved or validated) from the
/// kimi_linear config.json `config` read from `path`: norm_zero_centered false, mla.rope false,
/// linear.use_short_conv and use_gate true, expand_v 1. The experts' keys (num_experts, ...)
/// are informational: every layer is dense. Throws lat::Error "load_model_weights: '<path>':
/// keys lat cannot honour: ..." naming every key lat cannot honour with its value: a sparse
/// (MoE) layer in mlp_layer_types (or first_k_dense_replace below num_hidden_layers without
/// it), num_key_value_heads other than num_attention_heads, mla_use_nope false, hidden_act
/// other than silu, attention_bias true, attention_dropout > 0, a layer type other than
/// linear_attention / full_attention, an unknown key (also inside linear_attn_config), a
/// required dimension missing, or a value of the wrong JSON type.
ModelConfig model_config_from_kimi(const nlohmann::json& config, const std::string& path);

/// Every tensor of KimiLinearForCausalLM for `model` (resolved, kimi-expressible) with
/// `vocab_size` tokens (the table above); when tied, lm_head.weight is read from
/// embeddings.weight (lat_tensors_from_hf then checks it is a copy).
std::vector<HfTensorSpec> kimi_tensor_layout(const ModelConfig& model, int64_t vocab_size);

/// True when `file_tensors` hold an lm_head.weight that is not a bit-for-bit copy of
/// model.embed_tokens.weight: transformers' KimiLinearForCausalLM ties nothing (its lm_head is
/// always a tensor of its own), so such a file is an untied model whatever
/// tie_word_embeddings says.
bool kimi_lm_head_is_separate(const NamedTensors& file_tensors);

/// Throws lat::Error when an mla tensor of `file_tensors` (read from `weights_path`) has
/// another shape than `model` (read from `config`, the config.json at `config_path`) gives it
/// and config.json leaves a size of that shape to transformers' default: "load_model_weights:
/// '<config_path>' has no kv_lora_rank (transformers' default 512), but tensor
/// 'model.layers.1.self_attn.kv_a_proj_with_mqa.weight' of '<weights_path>' is [10, 16],
/// expected [514, 16] (kv_lora_rank + qk_rope_head_dim rows): set kv_lora_rank in config.json".
/// The keys so named: num_attention_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
/// v_head_dim. A shape that disagrees with sizes config.json gives is left to
/// lat_tensors_from_hf.
void check_kimi_default_sizes(const nlohmann::json& config, const std::string& config_path, const ModelConfig& model,
                              const NamedTensors& file_tensors, const std::string& weights_path);

/// Throws lat::Error when config.json (`config`, at `config_path`) says not which layers are
/// which (no layer_types, and not both of linear_attn_config's kda_layers and full_attn_layers),
/// so that `model` (read from it) has transformers' default pattern, and a layer of
/// `file_tensors` (read from `weights_path`) holds the other kind's tensors:
/// "load_model_weights: '<config_path>' has no layer_types (nor both of linear_attn_config's
/// kda_layers and full_attn_layers), so transformers' default makes layer 1 linear_attention
/// (kda) (full_attention at 0-based layers 4, 8, ...), but tensor
/// 'model.layers.1.self_attn.kv_a_proj_with_mqa.weight' of '<weights_path>' is a
/// full_attention (mla) layer's: set layer_types in config.json". Run before the shapes are
/// compared, whose error would otherwise blame a projection's size.
void check_kimi_default_layer_types(const nlohmann::json& config, const std::string& config_path,
                                   const ModelConfig& model, const NamedTensors& file_tensors,
                                   const std::string& weights_path);

/// `tensors` of a kimi_linear file under the names save_pretrained writes: transformers'
/// in-memory names (a state dict saved as it is) renamed, `.mlp.` -> `.block_sparse_moe.`,
/// `self_attn.forget_gate.` -> `self_attn.`, and `self_attn.conv1d.weight` [3 C, 1, W] split
/// into q_conv1d, k_conv1d, v_conv1d [C, 1, W]; other tensors unchanged.
NamedTensors kimi_saved_names(const NamedTensors& tensors);

}  // namespace lat
