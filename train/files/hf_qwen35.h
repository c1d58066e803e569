// The Hugging Face Qwen3.5 family of lat's export and import (hf_config.h): a text model
// (transformers' Qwen3_5TextConfig, model_type "qwen3_5_text", class Qwen3_5ForCausalLM), its
// config.json keys and tensors to and from lat's.
//
//   hidden_size = d_model          num_hidden_layers = n_layers       vocab_size = vocab_size
//   layer_types[i] = linear_attention (gdn) | full_attention (attn), one per layer
//   linear_num_key_heads = n_heads linear_key_head_dim = head_dim     linear_conv_kernel_dim = linear.conv_size
//   linear_num_value_heads = linear.n_v_heads   linear_value_head_dim = head_dim * expand_v
//   num_attention_heads = attn.n_heads   head_dim = attn.head_dim   num_key_value_heads = attn.n_kv_heads
//   rope_parameters = {rope_type: default, rope_theta: attn.rope_theta,
//                      partial_rotary_factor: attn.rope_fraction}
//   intermediate_size = the SwiGLU width   rms_norm_eps = norm_eps   tie_word_embeddings = tie_embeddings
// Implied by the architecture: hidden_act silu, attention_bias false, zero-centred norms,
// gated attention output (output_gate), q/k norms (qk_norm), short convolutions and the gated
// output norm in the linear layers (use_short_conv, use_gate).
//
// Tensors, lat -> transformers:
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
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/config/config_types.h"
#include "train/files/hf_weights.h"
#include "train/files/safetensors.h"

namespace lat {

/// The model_type of the config.json files this family reads and writes.
inline constexpr const char* kQwen35ModelType = "qwen3_5_text";

/// Throws ConfigError "export --format hf: layer <i> (<kind>): <feature> ..." for the first
/// feature of `model` (resolved) that Qwen3.5 cannot express: a mixer other than gdn and attn,
/// attn.window_size > 0, attention without output_gate or qk_norm, gdn without
/// linear.use_short_conv or linear.use_gate.
void check_qwen35_expressible(const ModelConfig& model);

/// The config.json transformers writes for `model` (resolved; check_qwen35_expressible first)
/// with `vocab_size` tokens, keys sorted as save_pretrained sorts them; "dtype" is "float32" or
/// "bfloat16" after `dtype`.
nlohmann::ordered_json qwen35_config_json(const ModelConfig& model, int64_t vocab_size, SafetensorsDType dtype);

/// lat's model.* keys (other keys at their defaults, not yet resolved or validated) from the
/// Qwen3.5 config.json `config` read from `path`: norm_zero_centered, attn.output_gate,
/// attn.qk_norm true. Informational keys (architectures, model_type, dtype, token ids,
/// initializer_range, use_cache, transformers_version, mtp_* (transformers ignores the mtp
/// weights), rope_parameters' mrope_* ...) are accepted; max_position_embeddings too, when an
/// integer in [1, 2^30]. Throws lat::Error "load_model_weights: '<path>': ..." naming every key
/// lat cannot honour with its value (attention_bias true, hidden_act other than silu, rope_type
/// other than default, attention_dropout > 0, a layer type other than linear_attention /
/// full_attention, an unknown key, rms_norm_eps outside (0, 1] or null), a required dimension
/// missing, or a value of the wrong JSON type.
ModelConfig model_config_from_qwen35(const nlohmann::json& config, const std::string& path);

/// Every tensor of Qwen3_5ForCausalLM for `model` (resolved, Qwen3.5-expressible) with
/// `vocab_size` tokens, in state-dict order (the table above); no lm_head.weight when tied.
std::vector<HfTensorSpec> qwen35_tensor_layout(const ModelConfig& model, int64_t vocab_size);

}  // namespace lat
