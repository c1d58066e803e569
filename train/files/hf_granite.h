// The Hugging Face Granite-4.0-H family of lat's export and import (hf_config.h): transformers'
// GraniteMoeHybridForCausalLM (model_type "granitemoehybrid") without experts, its config.json
// keys and tensors to and from lat's.
//
//   hidden_size = d_model          num_hidden_layers = n_layers       vocab_size = vocab_size
//   layer_types[i] = mamba (mamba2) | attention (attn), one per layer (transformers 5 also
//                    spells them linear_attention / full_attention; both are read)
//   num_attention_heads = attn.n_heads   head_dim = attn.head_dim   num_key_value_heads = attn.n_kv_heads
//   rope_parameters = {rope_type: default, rope_theta: attn.rope_theta}, position_embedding_type
//                     rope (null in a model without attention layers)
//   shared_intermediate_size = the SwiGLU width (intermediate_size, the experts' width, is written
//   equal and otherwise not used)   rms_norm_eps = norm_eps   tie_word_embeddings = tie_embeddings
//   mamba_n_heads = expand * d_model / mamba.head_dim   mamba_d_head = mamba.head_dim
//   mamba_d_state = mamba.d_state   mamba_n_groups = mamba.n_groups   mamba_expand = mamba.expand
//   mamba_d_conv = mamba.conv_size  mamba_chunk_size = mamba.chunk_size
//   mamba_conv_bias = mamba.conv_bias   mamba_proj_bias = mamba.proj_bias
//   time_step_limit = mamba.time_step_limit (an infinite bound as transformers writes it,
//                     {"__float__": "Infinity"})
// Implied by lat's layers: num_local_experts 0 (a dense shared_mlp only), hidden_act silu,
// attention_bias false, attention without output gate, q/k norms or sliding window, RoPE over the
// whole head (rope_fraction 1), plain norms (scale by w), and the multipliers of a plain
// transformer: embedding_multiplier, residual_multiplier, logits_scaling 1 and
// attention_multiplier = 1/sqrt(head_dim), the scale of lat's attention. lat's attention always
// applies RoPE, so a file with attention layers and position_embedding_type null is refused.
//
// Tensors, lat -> transformers:
//   embeddings.weight                 model.embed_tokens.weight
//   layers.i.attn_norm.weight         model.layers.i.input_layernorm.weight           (norm)
//   layers.i.mlp_norm.weight          model.layers.i.post_attention_layernorm.weight  (norm)
//   layers.i.mlp.gate_proj, up_proj   model.layers.i.shared_mlp.input_linear.weight [2*F, d]
//                                     (rows: gate then up: silu(first half) * second half)
//   layers.i.mlp.down_proj            model.layers.i.shared_mlp.output_linear.weight [d, F]
//   norm.weight                       model.norm.weight                               (norm)
//   lm_head.weight                    lm_head.weight (absent when tied)
//   mamba2 layer i, layers.i.attn.* -> model.layers.i.mamba.* under the same names: in_proj,
//     conv1d (weight, bias), dt_bias, A_log, D, norm.weight (the gated norm, scale by w in
//     both), out_proj (+ in_proj.bias, out_proj.bias with proj_bias)
//   attn layer i, layers.i.attn.* ->  model.layers.i.self_attn.{q,k,v,o}_proj
// transformers scales by w in the (norm) tensors; where lat's model.norm_zero_centered is true
// lat scales by 1 + w, so the export stores w + 1.
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
inline constexpr const char* kGraniteModelType = "granitemoehybrid";

/// Throws ConfigError "export --format hf: layer <i> (<kind>): <feature> ..." for the first
/// feature of `model` (resolved) that granitemoehybrid cannot express: a mixer other than
/// mamba2 and attn, attn.window_size > 0, attention with output_gate or qk_norm, or
/// attn.rope_fraction other than 1.
void check_granite_expressible(const ModelConfig& model);

/// The config.json transformers writes for `model` (resolved; check_granite_expressible first)
/// with `vocab_size` tokens, keys sorted as save_pretrained sorts them; "dtype" is "float32" or
/// "bfloat16" after `dtype`. A model without mamba2 layers writes one mamba head of d_inner
/// channels (transformers checks the mamba_* sizes even then).
nlohmann::ordered_json granite_config_json(const ModelConfig& model, int64_t vocab_size, SafetensorsDType dtype);

/// lat's model.* keys (other keys at their defaults, not yet resolved or validated) from the
/// granitemoehybrid config.json `config` read from `path`: norm_zero_centered, attn.output_gate,
/// attn.qk_norm false, attn.rope_fraction 1. Informational keys (the common ones, the experts'
/// intermediate_size, num_experts_per_tok, output_router_logits, router_aux_loss_coef) are
/// accepted. Throws lat::Error "load_model_weights: '<path>': keys lat cannot honour: ..."
/// naming every key lat cannot honour with its value: num_local_experts other than 0 (or
/// absent: transformers' default is 8), a multiplier other than 1 (attention_multiplier other
/// than 1/sqrt(head_dim), or absent), position_embedding_type other than "rope" with attention
/// layers, rope_type other than default, hidden_act other than silu, attention_bias true,
/// attention_dropout > 0, a layer type other than mamba / attention, mamba_d_head *
/// mamba_n_heads other than mamba_expand * hidden_size, a time_step_limit that is not two
/// numbers, an unknown key, a required dimension missing, or a value of the wrong JSON type.
ModelConfig model_config_from_granite(const nlohmann::json& config, const std::string& path);

/// Every tensor of GraniteMoeHybridForCausalLM for `model` (resolved, granite-expressible) with
/// `vocab_size` tokens (the table above); no lm_head.weight when tied.
std::vector<HfTensorSpec> granite_tensor_layout(const ModelConfig& model, int64_t vocab_size);

}  // namespace lat
