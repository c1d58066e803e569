// lat's mamba2 + attn models as llama.cpp's arch `granitehybrid` (gguf_architecture.h), the
// tensors llama.cpp's converter writes from a Hugging Face GraniteMoeHybrid (Granite-4.0-H)
// model with a dense shared MLP and no experts:
//
//   embeddings                        token_embd          (rows padded with zeros for the
//   lm_head (absent when tied)        output               appended tokens)
//   norm                              output_norm         (norm)
//   layers.i.attn_norm                blk.i.attn_norm     (norm)
//   layers.i.mlp_norm                 blk.i.ffn_norm      (norm)
//   layers.i.mlp.{gate,up,down}_proj  blk.i.ffn_{gate,up,down}
//   mamba2 layer i, layers.i.attn.* ->
//     in_proj [2I + 2GN + H, D]       blk.i.ssm_in        (rows z | x | B | C | dt, as lat's)
//     conv1d.weight [C, 1, W]         blk.i.ssm_conv1d    [C, W]
//     conv1d.bias [C]                 blk.i.ssm_conv1d.bias (zeros without model.mamba.conv_bias)
//     dt_bias [H]                     blk.i.ssm_dt.bias
//     A_log [H]                       blk.i.ssm_a = -exp(A_log)  [H, 1]
//     D [H]                           blk.i.ssm_d         [H, 1]
//     norm.weight [I]                 blk.i.ssm_norm      [G, I / G] (one row per group)
//     out_proj [D, I]                 blk.i.ssm_out
//   attn layer i, layers.i.attn.* ->  blk.i.attn_{q,k,v,output}  (q, k rows permuted)
// (norm): llama.cpp scales by w: lat's w, or 1 + w where model.norm_zero_centered.
// RoPE: lat turns the pairs (j, j + R/2) of a head's first R = rotary dims (GPT-NeoX layout);
// granitehybrid's RoPE turns adjacent pairs (2j, 2j + 1), so q and k rows of each head are
// permuted to put row j at 2j and row j + R/2 at 2j + 1 (llama.cpp's converter does the same
// for Llama models); scores q.k are unchanged, as both sides move alike.
// Granite's multipliers (embedding, residual, logit) are written as 1 and attention.scale as
// 1/sqrt(head_dim): lat's model has none. The per-layer attention.head_count_kv marks the
// recurrent layers (0); attention layers have model.attn.n_kv_heads.
// I = d_inner, H mamba heads, G groups, N d_state, C = I + 2GN, W conv_size, D d_model.
#include <algorithm>
#include <cmath>
#include <utility>

#include "lat/error.h"
#include "layers/fused/rope.h"
#include "train/files/gguf_architecture.h"
#include "train/text/format.h"

namespace lat {
namespace {

constexpr const char* kArch = "granitehybrid";
/// llama.cpp's granitehybrid asserts d_inner = 2 d_model.
constexpr int64_t kExpand = 2;

/// "export --format gguf: layer <i> (<kind>): ".
std::string layer_prefix(size_t i, const std::string& kind) {
  return "export --format gguf: layer " + std::to_string(i) + " (" + kind + "): ";
}

/// The refusal of a boolean key of layer i that llama.cpp's granitehybrid cannot honour when true.
ConfigError switched_on(size_t i, const std::string& kind, const std::string& key, const std::string& why) {
  return ConfigError(layer_prefix(i, kind) + key + " true: llama.cpp's granitehybrid " + why + " (expected false)");
}

void check_granite_hybrid(const ModelConfig& m) {
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string& kind = kinds[i];
    if (kind == "attn") {
      if (m.attn.window_size > 0)
        throw ConfigError(layer_prefix(i, kind) + "model.attn.window_size " + std::to_string(m.attn.window_size) +
                          ": llama.cpp's granitehybrid has no sliding window (expected 0)");
      if (m.attn.output_gate)
        throw switched_on(i, kind, "model.attn.output_gate", "does not gate the attention output");
      if (m.attn.qk_norm) throw switched_on(i, kind, "model.attn.qk_norm", "does not normalize q and k");
    } else if (kind == "mamba2") {
      const MambaConfig& o = m.mamba;
      if (o.expand != kExpand)
        throw ConfigError(layer_prefix(i, kind) + "model.mamba.expand " + std::to_string(o.expand) +
                          ": llama.cpp's granitehybrid asserts d_inner = 2 d_model (expected 2)");
      if (o.proj_bias) throw switched_on(i, kind, "model.mamba.proj_bias", "has no in_proj or out_proj bias");
      const auto [lo, hi] = o.time_step_limit;
      if (lo > 0 || std::isfinite(hi))
        throw ConfigError(layer_prefix(i, kind) + "model.mamba.time_step_limit [" + format_significant(lo) + ", " +
                          format_significant(hi) +
                          "]: llama.cpp's granitehybrid does not clamp dt (expected [0, inf])");
    } else {
      throw ConfigError(layer_prefix(i, kind) + "a " + kind +
                        " mixer: llama.cpp's granitehybrid has mamba2 and attn layers only");
    }
  }
  if (std::find(kinds.begin(), kinds.end(), "attn") == kinds.end())
    throw ConfigError(
        "export --format gguf: model.layers has no attn layer: llama.cpp's granitehybrid keeps a KV cache and "
        "aborts on a model without attention layers (expected mamba2 and attn layers)");
}

void add_granite_hybrid_metadata(GgufWriter& out, const ModelConfig& m) {
  const std::string a = std::string(kArch) + ".";
  const MambaConfig& o = m.mamba;
  const int64_t d_inner = o.expand * m.d_model;
  add_gguf_model_shape(out, kArch, m);
  std::vector<int32_t> kv_heads;
  for (const std::string& kind : layer_mixers(m))
    kv_heads.push_back(kind == "attn" ? static_cast<int32_t>(m.attn.n_kv_heads) : 0);
  out.add_int32s(a + "attention.head_count_kv", kv_heads);
  out.add_uint32(a + "attention.key_length", static_cast<uint32_t>(m.attn.head_dim));
  out.add_uint32(a + "attention.value_length", static_cast<uint32_t>(m.attn.head_dim));
  out.add_float32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(m.norm_eps));
  out.add_float32(a + "attention.scale", static_cast<float>(1.0 / std::sqrt(static_cast<double>(m.attn.head_dim))));
  out.add_float32(a + "embedding_scale", 1.0f);
  out.add_float32(a + "residual_scale", 1.0f);
  out.add_float32(a + "logit_scale", 1.0f);
  out.add_float32(a + "rope.freq_base", static_cast<float>(m.attn.rope_theta));
  out.add_uint32(a + "rope.dimension_count",
                 static_cast<uint32_t>(rotary_dim_of(m.attn.head_dim, m.attn.rope_fraction)));
  out.add_bool(a + "rope.scaling.finetuned", true);  // granitehybrid's switch for RoPE
  out.add_uint32(a + "ssm.conv_kernel", static_cast<uint32_t>(o.conv_size));
  out.add_uint32(a + "ssm.state_size", static_cast<uint32_t>(o.d_state));
  out.add_uint32(a + "ssm.group_count", static_cast<uint32_t>(o.n_groups));
  out.add_uint32(a + "ssm.inner_size", static_cast<uint32_t>(d_inner));
  out.add_uint32(a + "ssm.time_step_rank", static_cast<uint32_t>(d_inner / o.head_dim));  // the head count
}

/// q or k [heads * head_dim, cols] with each head's first `rotary` rows reordered from lat's
/// halves (j, j + rotary/2) to adjacent pairs (2j, 2j + 1); the other rows stay.
std::vector<float> rope_pairs_adjacent(const std::vector<float>& w, int64_t heads, int64_t head_dim, int64_t rotary,
                                       int64_t cols) {
  std::vector<float> out = w;
  const int64_t half = rotary / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t side = 0; side < 2; ++side) {
        const int64_t from = h * head_dim + j + side * half, to = h * head_dim + 2 * j + side;
        std::copy_n(w.begin() + static_cast<std::ptrdiff_t>(from * cols), cols,
                    out.begin() + static_cast<std::ptrdiff_t>(to * cols));
      }
  return out;
}

void add_granite_hybrid_tensors(GgufWriter& out, const ModelWeights& w, int64_t /*vocab_size*/, int64_t n_tokens,
                                GgmlType dtype) {
  const ModelConfig& m = w.config.model;
  const GgufTensorCopier copy(out, w, dtype, n_tokens);
  const int64_t D = m.d_model;

  copy.token_rows("token_embd.weight", "embeddings.weight");
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string layer = "layers." + std::to_string(i) + ".", blk = "blk." + std::to_string(i) + ".";
    const std::string mixer = layer + "attn.";
    copy.norm(blk + "attn_norm.weight", layer + "attn_norm.weight");
    if (kinds[i] == "mamba2") {
      const MambaConfig& o = m.mamba;
      const int64_t I = o.expand * D, H = I / o.head_dim, G = o.n_groups, C = I + 2 * G * o.d_state;
      copy.weight(blk + "ssm_in.weight", mixer + "in_proj.weight");
      const Tensor& conv = lat_tensor(w, mixer + "conv1d.weight");
      add_gguf_tensor(out, blk + "ssm_conv1d.weight", {C, o.conv_size}, conv.to_vector<float>(), dtype,
                      GgufStorage::f32);
      // llama.cpp always adds the bias: zeros are the same convolution.
      const std::vector<float> bias = o.conv_bias ? lat_tensor(w, mixer + "conv1d.bias").to_vector<float>()
                                                  : std::vector<float>(C, 0.0f);
      add_gguf_tensor(out, blk + "ssm_conv1d.bias", {C}, bias, dtype, GgufStorage::f32);
      add_gguf_tensor(out, blk + "ssm_dt.bias", {H}, lat_tensor(w, mixer + "dt_bias").to_vector<float>(), dtype,
                      GgufStorage::f32);
      std::vector<float> A = lat_tensor(w, mixer + "A_log").to_vector<float>();
      for (float& x : A) x = -std::exp(x);
      add_gguf_tensor(out, blk + "ssm_a", {H, 1}, A, dtype, GgufStorage::f32);
      add_gguf_tensor(out, blk + "ssm_d", {H, 1}, lat_tensor(w, mixer + "D").to_vector<float>(), dtype,
                      GgufStorage::f32);
      add_gguf_tensor(out, blk + "ssm_norm.weight", {G, I / G}, lat_tensor(w, mixer + "norm.weight").to_vector<float>(),
                      dtype, GgufStorage::f32);
      copy.weight(blk + "ssm_out.weight", mixer + "out_proj.weight");
    } else {
      const int64_t head_dim = m.attn.head_dim, rotary = rotary_dim_of(head_dim, m.attn.rope_fraction);
      for (const auto& [name, heads] :
           {std::pair<std::string, int64_t>{"q", m.attn.n_heads}, {"k", m.attn.n_kv_heads}}) {
        const Tensor& t = lat_tensor(w, mixer + name + "_proj.weight");
        add_gguf_tensor(out, blk + "attn_" + name + ".weight", t.shape(),
                        rope_pairs_adjacent(t.to_vector<float>(), heads, head_dim, rotary, D), dtype,
                        GgufStorage::weight);
      }
      copy.weight(blk + "attn_v.weight", mixer + "v_proj.weight");
      copy.weight(blk + "attn_output.weight", mixer + "o_proj.weight");
    }
    copy.norm(blk + "ffn_norm.weight", layer + "mlp_norm.weight");
    copy.weight(blk + "ffn_gate.weight", layer + "mlp.gate_proj.weight");
    copy.weight(blk + "ffn_up.weight", layer + "mlp.up_proj.weight");
    copy.weight(blk + "ffn_down.weight", layer + "mlp.down_proj.weight");
  }
  copy.norm("output_norm.weight", "norm.weight");
  if (!m.tie_embeddings) copy.token_rows("output.weight", "lm_head.weight");
}

}  // namespace

const GgufArchitecture& gguf_granite_hybrid() {
  static const GgufArchitecture arch = {kArch, check_granite_hybrid, add_granite_hybrid_metadata,
                                        add_granite_hybrid_tensors};
  return arch;
}

}  // namespace lat
