// `lat export --format gguf`: a model as one GGUF file of llama.cpp's arch `qwen35`
// (DESIGN.md "Export formats"). Each lat tensor goes through its Hugging Face Qwen3.5 meaning
// (hf_weights.h) to llama.cpp's tensor, as llama.cpp's own converter would write it:
//
//   model.embed_tokens / lm_head           token_embd / output        (rows padded with zeros
//                                                                       for the appended tokens)
//   model.norm                             output_norm                 (norm)
//   layers.i.input_layernorm               blk.i.attn_norm             (norm)
//   layers.i.post_attention_layernorm      blk.i.post_attention_norm   (norm)
//   layers.i.mlp.{gate,up,down}_proj       blk.i.ffn_{gate,up,down}
//   linear_attn.in_proj_qkv                blk.i.attn_qkv              (v rows tiled)
//   linear_attn.conv1d [C, 1, k]           blk.i.ssm_conv1d [C, k]     (v channels tiled)
//   linear_attn.in_proj_z                  blk.i.attn_gate             (rows tiled)
//   linear_attn.in_proj_a, in_proj_b       blk.i.ssm_alpha, ssm_beta   (rows tiled)
//   linear_attn.A_log                      blk.i.ssm_a = -exp(A_log)   (tiled)
//   linear_attn.dt_bias                    blk.i.ssm_dt.bias           (tiled)
//   linear_attn.norm                       blk.i.ssm_norm
//   linear_attn.out_proj                   blk.i.ssm_out               (columns tiled)
//   self_attn.{q,k,v,o}_proj               blk.i.attn_{q,k,v,output}
//   self_attn.{q,k}_norm                   blk.i.attn_{q,k}_norm       (norm)
// (norm): llama.cpp scales by w: lat's w, or 1 + w where model.norm_zero_centered.
// Tiled: with Hv value heads over H key heads (r = Hv / H), transformers groups value heads by
// key head (g * r + j) and llama.cpp tiles them (j * H + g), so value-head rows, channels and
// columns are permuted. Norms, 1-D tensors and ssm_conv1d stay f32 (as llama.cpp's converter
// keeps them); q8_0 tensors whose rows are not a multiple of 32 are stored f16.
#pragma once
#include <optional>
#include <string>

#include "data/tokenizer.h"
#include "train/config/config_types.h"
#include "train/files/gguf_writer.h"
#include "train/files/model_reader.h"

namespace lat {

/// "f32" | "f16" | "bf16" | "q8_0" -> the tensor type of the file's weight matrices. Throws
/// ConfigError naming --dtype otherwise.
GgmlType parse_gguf_dtype(const std::string& name);

/// Throws ConfigError "export --format gguf: ..." for the first thing of `model` (resolved)
/// and `tokenizer` (for `vocab_size` embedding rows) that llama.cpp's qwen35 cannot express: what Qwen3.5 cannot
/// (check_hf_expressible), a gdn value head dim other than its key head dim, layers of one kind
/// only (gdn or attn: llama.cpp aborts on them), a model without a tokenizer (trained on token ids), or a tokenizer gguf_vocabulary refuses.
void check_gguf_expressible(const ModelConfig& model, const std::optional<Tokenizer>& tokenizer, int64_t vocab_size);

/// Writes `w` (check_gguf_expressible first) with `vocab_size` embedding rows as the GGUF file
/// `path`, weight matrices in `dtype`. Throws lat::Error naming a tensor of `w` that is missing
/// or mis-shaped, or the file when it cannot be written.
void write_gguf_export(const ModelWeights& w, int64_t vocab_size, GgmlType dtype, const std::string& path);

}  // namespace lat
