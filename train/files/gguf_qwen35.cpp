// lat's gdn + attn models as llama.cpp's arch `qwen35` (gguf_architecture.h). Each lat tensor
// goes through its Hugging Face Qwen3.5 meaning (hf_weights.h) to llama.cpp's tensor, as
// llama.cpp's own converter would write it:
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
#include <algorithm>
#include <cmath>
#include <map>

#include "lat/error.h"
#include "layers/fused/rope.h"
#include "train/files/gguf_architecture.h"
#include "train/files/hf_qwen35.h"
#include "train/files/hf_weights.h"
#include "train/text/format.h"

namespace lat {
namespace {

constexpr const char* kArch = "qwen35";

/// How a tensor's values change on the way from transformers' layout to llama.cpp's.
enum class GgufValues { same, norm, negative_exp };

/// Which axis holds value heads that llama.cpp wants tiled (the top of this file), and each head's width.
enum class HeadAxis { none, rows, qkv_rows, columns };

struct GgufTensorRule {
  std::string gguf_suffix;  // after "blk.<i>." (or the whole name outside the layers)
  GgufValues values = GgufValues::same;
  HeadAxis heads = HeadAxis::none;
  bool value_head_width = false;  // heads of value_head_dim rows/columns; otherwise 1
};

/// transformers' name (after "model.layers.<i>." inside the layers) -> llama.cpp's.
const std::map<std::string, GgufTensorRule>& tensor_rules() {
  static const std::map<std::string, GgufTensorRule> rules = {
      {"model.embed_tokens.weight", {"token_embd.weight"}},
      {"lm_head.weight", {"output.weight"}},
      {"model.norm.weight", {"output_norm.weight", GgufValues::norm}},
      {"input_layernorm.weight", {"attn_norm.weight", GgufValues::norm}},
      {"post_attention_layernorm.weight", {"post_attention_norm.weight", GgufValues::norm}},
      {"mlp.gate_proj.weight", {"ffn_gate.weight"}},
      {"mlp.up_proj.weight", {"ffn_up.weight"}},
      {"mlp.down_proj.weight", {"ffn_down.weight"}},
      {"linear_attn.in_proj_qkv.weight", {"attn_qkv.weight", GgufValues::same, HeadAxis::qkv_rows, true}},
      {"linear_attn.conv1d.weight", {"ssm_conv1d.weight", GgufValues::same, HeadAxis::qkv_rows, true}},
      {"linear_attn.in_proj_z.weight", {"attn_gate.weight", GgufValues::same, HeadAxis::rows, true}},
      {"linear_attn.in_proj_a.weight", {"ssm_alpha.weight", GgufValues::same, HeadAxis::rows}},
      {"linear_attn.in_proj_b.weight", {"ssm_beta.weight", GgufValues::same, HeadAxis::rows}},
      {"linear_attn.A_log", {"ssm_a", GgufValues::negative_exp, HeadAxis::rows}},
      {"linear_attn.dt_bias", {"ssm_dt.bias", GgufValues::same, HeadAxis::rows}},
      {"linear_attn.norm.weight", {"ssm_norm.weight"}},
      {"linear_attn.out_proj.weight", {"ssm_out.weight", GgufValues::same, HeadAxis::columns, true}},
      {"self_attn.q_proj.weight", {"attn_q.weight"}},
      {"self_attn.k_proj.weight", {"attn_k.weight"}},
      {"self_attn.v_proj.weight", {"attn_v.weight"}},
      {"self_attn.o_proj.weight", {"attn_output.weight"}},
      {"self_attn.q_norm.weight", {"attn_q_norm.weight", GgufValues::norm}},
      {"self_attn.k_norm.weight", {"attn_k_norm.weight", GgufValues::norm}},
  };
  return rules;
}

/// "model.layers.3.mlp.up_proj.weight" -> {"blk.3.", "mlp.up_proj.weight"}; other names keep
/// an empty prefix.
std::pair<std::string, std::string> split_layer_name(const std::string& hf_name) {
  const std::string layers = "model.layers.";
  if (hf_name.rfind(layers, 0) != 0) return {"", hf_name};
  const size_t dot = hf_name.find('.', layers.size());
  return {"blk." + hf_name.substr(layers.size(), dot - layers.size()) + ".", hf_name.substr(dot + 1)};
}

/// Permutes value heads from grouped (g * r + j) to tiled (j * H + g) along one axis of the
/// row-major [rows, cols] matrix `data`: heads of `width` rows starting at row `first_row`
/// (HeadAxis::rows, qkv_rows), or of `width` columns (HeadAxis::columns).
void tile_value_heads(std::vector<float>& data, int64_t rows, int64_t cols, HeadAxis axis, int64_t first_row, int64_t H,
                      int64_t Hv, int64_t width) {
  const int64_t r = Hv / H;
  const std::vector<float> source = data;
  for (int64_t g = 0; g < H; ++g)
    for (int64_t j = 0; j < r; ++j) {
      const int64_t from = g * r + j, to = j * H + g;
      for (int64_t w = 0; w < width; ++w) {
        if (axis == HeadAxis::columns) {
          for (int64_t row = 0; row < rows; ++row)
            data[static_cast<size_t>(row * cols + to * width + w)] =
                source[static_cast<size_t>(row * cols + from * width + w)];
        } else {
          const int64_t to_row = first_row + to * width + w, from_row = first_row + from * width + w;
          std::copy_n(source.begin() + static_cast<std::ptrdiff_t>(from_row * cols), cols,
                      data.begin() + static_cast<std::ptrdiff_t>(to_row * cols));
        }
      }
    }
}

/// What Qwen3.5 cannot express (check_qwen35_expressible, its text naming gguf), a gdn value head
/// dim other than the key head dim, or layers of one kind only (llama.cpp aborts on them).
void check_qwen35(const ModelConfig& m) {
  try {
    check_qwen35_expressible(m);
  } catch (const ConfigError& e) {
    std::string text = e.what();
    const std::string hf = "export --format hf";
    if (text.rfind(hf, 0) == 0) text = "export --format gguf" + text.substr(hf.size());
    throw ConfigError(text);
  }
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i)
    if (kinds[i] == "gdn" && value_head_dim(m) != m.head_dim)
      throw ConfigError("export --format gguf: layer " + std::to_string(i) + " (gdn): value head dim " +
                        std::to_string(value_head_dim(m)) + " (model.expand_v " + format_significant(m.expand_v) +
                        "): llama.cpp's qwen35 needs it equal to the key head dim " + std::to_string(m.head_dim) +
                        " (expected model.expand_v 1)");
  for (const char* kind : {"gdn", "attn"})
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end())
      throw ConfigError(std::string("export --format gguf: model.layers has no ") + kind +
                        " layer: llama.cpp's qwen35 keeps a recurrent state and a KV cache and aborts on a model "
                        "without either kind (expected both gdn and attn layers)");
}

void add_qwen35_metadata(GgufWriter& out, const ModelConfig& m) {
  const int64_t rotary_dim = rotary_dim_of(m.attn.head_dim, m.attn.rope_fraction);
  const std::string a = std::string(kArch) + ".";
  add_gguf_model_shape(out, kArch, m);
  out.add_uint32(a + "attention.head_count_kv", static_cast<uint32_t>(m.attn.n_kv_heads));
  out.add_uint32(a + "attention.key_length", static_cast<uint32_t>(m.attn.head_dim));
  out.add_uint32(a + "attention.value_length", static_cast<uint32_t>(m.attn.head_dim));
  out.add_float32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(m.norm_eps));
  out.add_float32(a + "rope.freq_base", static_cast<float>(m.attn.rope_theta));
  out.add_uint32(a + "rope.dimension_count", static_cast<uint32_t>(rotary_dim));
  // Interleaved multimodal RoPE: rotated pair i takes position section i mod 3 (time, height,
  // width) while i < 3 x that section's size, else the fourth section's. llama.cpp gives text
  // the same position in the first three sections only, so the three must cover all n pairs,
  // which is plain RoPE: ceil(n/3) + floor((n+1)/3) + floor(n/3) = n (Qwen3.5's 11, 11, 10).
  const int32_t pairs = static_cast<int32_t>(rotary_dim / 2);
  out.add_int32s(a + "rope.dimension_sections", {(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0});
  out.add_uint32(a + "ssm.conv_kernel", static_cast<uint32_t>(m.linear.conv_size));
  out.add_uint32(a + "ssm.state_size", static_cast<uint32_t>(m.head_dim));
  out.add_uint32(a + "ssm.group_count", static_cast<uint32_t>(m.n_heads));
  out.add_uint32(a + "ssm.time_step_rank", static_cast<uint32_t>(m.linear.n_v_heads));
  out.add_uint32(a + "ssm.inner_size", static_cast<uint32_t>(m.linear.n_v_heads * value_head_dim(m)));
  std::vector<bool> recurrent;
  for (const std::string& kind : layer_mixers(m)) recurrent.push_back(kind == "gdn");
  out.add_bools(a + "attention.recurrent_layers", recurrent);
}

void add_qwen35_tensors(GgufWriter& out, const ModelWeights& w, int64_t vocab_size, int64_t n_tokens, GgmlType dtype) {
  const ModelConfig& m = w.config.model;
  // hf_tensors_from_lat checks every lat tensor and gives hf_tensor_layout's order.
  const NamedTensors hf = hf_tensors_from_lat(m, vocab_size, w.checkpoint.model, w.path);
  const std::vector<HfTensorSpec> specs = hf_tensor_layout(m, vocab_size);
  const int64_t H = m.n_heads, Hv = m.linear.n_v_heads, key_rows = 2 * m.n_heads * m.head_dim;
  for (size_t k = 0; k < hf.size(); ++k) {
    const auto& [hf_name, tensor] = hf[k];
    const auto [prefix, local] = split_layer_name(hf_name);
    const auto rule_it = tensor_rules().find(local);
    LAT_CHECK(rule_it != tensor_rules().end(), "export --format gguf: no llama.cpp tensor for '" << hf_name << "'");
    const GgufTensorRule& rule = rule_it->second;
    std::vector<int64_t> shape = tensor.shape();
    std::vector<float> data = tensor.to_vector<float>();
    if (local == "linear_attn.conv1d.weight") shape = {shape[0], shape[2]};  // [C, 1, k] -> [C, k]
    if (rule.values == GgufValues::norm) data = gguf_norm_scale(lat_tensor(w, specs[k].parts.front().lat_name), m);
    if (rule.values == GgufValues::negative_exp)
      for (float& x : data) x = -std::exp(x);
    if (rule.heads != HeadAxis::none && Hv != H) {
      const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
      const int64_t width = rule.value_head_width ? value_head_dim(m) : 1;
      const int64_t first_row = rule.heads == HeadAxis::qkv_rows ? key_rows : 0;
      tile_value_heads(data, rows, cols, rule.heads == HeadAxis::columns ? HeadAxis::columns : HeadAxis::rows,
                       first_row, H, Hv, width);
    }
    if (prefix.empty() && (local == "model.embed_tokens.weight" || local == "lm_head.weight")) {
      data = with_token_rows(std::move(data), shape[1], n_tokens);
      shape[0] = n_tokens;
    }
    const bool keep_f32 = shape.size() == 1 || rule.values == GgufValues::norm || local == "linear_attn.conv1d.weight";
    add_gguf_tensor(out, prefix + rule.gguf_suffix, shape, data, dtype,
                    keep_f32 ? GgufStorage::f32 : GgufStorage::weight);
  }
}
}  // namespace

const GgufArchitecture& gguf_qwen35() {
  static const GgufArchitecture arch = {kArch, check_qwen35, add_qwen35_metadata, add_qwen35_tensors};
  return arch;
}

}  // namespace lat
