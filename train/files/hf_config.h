// config.json of a Hugging Face Qwen3.5 text model (transformers' Qwen3_5TextConfig,
// model_type "qwen3_5_text", class Qwen3_5ForCausalLM) to and from lat's model.* keys.
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
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "train/config/config_types.h"
#include "train/files/safetensors.h"

namespace lat {

/// The model_type of the config.json files this translation reads and writes.
inline constexpr const char* kHfModelType = "qwen3_5_text";

/// Throws ConfigError "export --format hf: layer <i> (<kind>): <feature> ..." for the first
/// feature of `model` (resolved) that Qwen3.5 cannot express: a mixer other than gdn and attn,
/// attn.window_size > 0, attention without output_gate or qk_norm, gdn without
/// linear.use_short_conv or linear.use_gate.
void check_hf_expressible(const ModelConfig& model);

/// The config.json transformers writes for `model` (resolved; check_hf_expressible first) with
/// `vocab_size` tokens, keys sorted as save_pretrained sorts them; "dtype" is "float32" or
/// "bfloat16" after `dtype`.
nlohmann::ordered_json hf_config_json(const ModelConfig& model, int64_t vocab_size, SafetensorsDType dtype);

/// True when `config` is a JSON object whose model_type is kHfModelType.
bool is_hf_config(const nlohmann::json& config);

/// lat's model.* keys (other keys at their defaults, not yet resolved or validated) from the
/// config.json `config` read from `path`: norm_zero_centered, attn.output_gate, attn.qk_norm
/// true. Informational keys (architectures, model_type, dtype, token ids, initializer_range,
/// use_cache, transformers_version, mtp_* (transformers ignores the mtp weights),
/// rope_parameters' mrope_* ...) are accepted; max_position_embeddings too, when an integer in
/// [1, 2^30]. Throws lat::Error "load_model_weights: '<path>': ..." naming every key lat
/// cannot honour with its value (attention_bias true, hidden_act other than silu, rope_type
/// other than default, attention_dropout > 0, a layer type other than linear_attention /
/// full_attention, an unknown key, rms_norm_eps outside (0, 1] or null), a required dimension
/// missing, or a value of the wrong JSON type.
ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& path);

}  // namespace lat
