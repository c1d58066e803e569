// lat's kda + mla models as llama.cpp's arch `kimi-linear` (gguf_architecture.h), the tensors
// llama.cpp's converter writes from a Hugging Face KimiLinearForCausalLM whose every layer has
// a dense MLP (leading_dense_block_count = block_count: no experts):
//
//   embeddings                        token_embd          (rows padded with zeros for the
//   lm_head (embeddings when tied)    output               appended tokens; output is required)
//   norm                              output_norm         (norm)
//   layers.i.attn_norm                blk.i.attn_norm     (norm)
//   layers.i.mlp_norm                 blk.i.ffn_norm      (norm)
//   layers.i.mlp.{gate,up,down}_proj  blk.i.ffn_{gate,up,down}
//   kda layer i, layers.i.attn.* ->
//     q_proj, k_proj, v_proj          blk.i.attn_q, attn_k, attn_v
//     q_conv1d, k_conv1d, v_conv1d    blk.i.ssm_conv1d_q, _k, _v  [H K, 1, W] (f32)
//     f_a_proj, f_b_proj              blk.i.ssm_f_a, ssm_f_b
//     A_log [H]                       blk.i.ssm_a = -exp(A_log)  [H, 1]
//     dt_bias [H K]                   blk.i.ssm_dt.bias
//     b_proj                          blk.i.ssm_beta
//     g_a_proj, g_b_proj              blk.i.ssm_g_a, ssm_g_b
//     o_norm [K]                      blk.i.ssm_norm      (as it is: both scale by w)
//     o_proj                          blk.i.attn_output
//   mla layer i, layers.i.attn.* ->
//     q_proj                          blk.i.attn_q
//     kv_a_proj_with_mqa              blk.i.attn_kv_a_mqa
//     kv_a_layernorm [C]              blk.i.attn_kv_a_norm (as it is)
//     kv_b_proj [H (Dn + Dv), C]      blk.i.attn_k_b [H, C, Dn] (each head's key rows,
//                                     transposed) and blk.i.attn_v_b [H, Dv, C] (its value rows),
//                                     the split llama.cpp's MLA cache multiplies by
//     o_proj                          blk.i.attn_output
// (norm): llama.cpp scales by w: lat's w, or 1 + w where model.norm_zero_centered.
// The per-layer attention.head_count_kv marks the recurrent (kda) layers with 0; mla layers
// have 1, the one latent "head" of (C + Dr) channels llama.cpp's MLA cache keeps per token.
// H heads (kda and mla share llama.cpp's one head count), K kda head dim (= its value head
// dim), W conv_size, C kv_lora_rank, Dn, Dr, Dv the mla head sizes.
#include <algorithm>
#include <cmath>

#include "lat/error.h"
#include "layers/swiglu.h"
#include "train/files/gguf_architecture.h"
#include "train/text/format.h"

namespace lat {
namespace {

constexpr const char* kArch = "kimi-linear";
/// llama_expert_gating_func_type's sigmoid, Kimi Linear's router: llama.cpp requires the key,
/// which a model without experts never uses.
constexpr uint32_t kSigmoidGating = 2;

/// "export --format gguf: layer <i> (<kind>): ".
std::string layer_prefix(size_t i, const std::string& kind) {
  return "export --format gguf: layer " + std::to_string(i) + " (" + kind + "): ";
}

void check_kimi_linear(const ModelConfig& m) {
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string& kind = kinds[i];
    const std::string at = layer_prefix(i, kind);
    if (kind == "kda") {
      if (!m.linear.use_short_conv)
        throw ConfigError(at +
                          "model.linear.use_short_conv false: llama.cpp's kimi-linear has short convolutions "
                          "(expected true)");
      if (!m.linear.use_gate)
        throw ConfigError(at +
                          "model.linear.use_gate false: llama.cpp's kimi-linear has the gated output norm "
                          "(expected true)");
      if (value_head_dim(m) != m.head_dim)
        throw ConfigError(at + "value head dim " + std::to_string(value_head_dim(m)) + " (model.expand_v " +
                          format_significant(m.expand_v) +
                          "): llama.cpp's kimi-linear needs it equal to the key "
                          "head dim " +
                          std::to_string(m.head_dim) + " (expected model.expand_v 1)");
      if (m.attn.n_heads != m.n_heads)
        throw ConfigError(at + "model.attn.n_heads " + std::to_string(m.attn.n_heads) +
                          ": llama.cpp's kimi-linear has one head count for its kda and mla layers (expected "
                          "model.n_heads " +
                          std::to_string(m.n_heads) + ")");
    } else if (kind == "mla") {
      if (m.mla.rope)
        throw ConfigError(at +
                          "model.mla.rope true: llama.cpp's kimi-linear applies no position encoding "
                          "(expected false)");
      if (m.attn.window_size > 0)
        throw ConfigError(at + "model.attn.window_size " + std::to_string(m.attn.window_size) +
                          ": llama.cpp's kimi-linear has no sliding window (expected 0)");
      if (m.mla.q_lora_rank > 0)
        throw ConfigError(at + "model.mla.q_lora_rank " + std::to_string(m.mla.q_lora_rank) +
                          ": llama.cpp's kimi-linear multiplies by one q_proj (expected 0)");
    } else {
      throw ConfigError(at + "a " + kind + " mixer: llama.cpp's kimi-linear has kda and mla layers only");
    }
  }
  // llama.cpp allocates an MLA cache and a recurrent state and asserts on an empty one.
  for (const char* kind : {"kda", "mla"})
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end())
      throw ConfigError(std::string("export --format gguf: model.layers has no ") + kind +
                        " layer: llama.cpp's kimi-linear aborts on a model without both kinds (expected kda and mla "
                        "layers)");
}

void add_kimi_linear_metadata(GgufWriter& out, const ModelConfig& m) {
  const std::string a = std::string(kArch) + ".";
  const MlaConfig& mla = m.mla;
  add_gguf_model_shape(out, kArch, m);
  std::vector<int32_t> kv_heads;
  for (const std::string& kind : layer_mixers(m)) kv_heads.push_back(kind == "mla" ? 1 : 0);
  out.add_int32s(a + "attention.head_count_kv", kv_heads);
  // The MLA cache's one head: the latent and the shared key part (no value cache).
  out.add_uint32(a + "attention.key_length", static_cast<uint32_t>(mla.kv_lora_rank + mla.qk_rope_head_dim));
  out.add_uint32(a + "attention.key_length_mla", static_cast<uint32_t>(mla.qk_nope_head_dim + mla.qk_rope_head_dim));
  out.add_uint32(a + "attention.value_length_mla", static_cast<uint32_t>(mla.v_head_dim));
  out.add_uint32(a + "attention.kv_lora_rank", static_cast<uint32_t>(mla.kv_lora_rank));
  out.add_float32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(m.norm_eps));
  out.add_uint32(a + "rope.dimension_count", static_cast<uint32_t>(mla.qk_rope_head_dim));
  out.add_uint32(a + "ssm.conv_kernel", static_cast<uint32_t>(m.linear.conv_size));
  out.add_uint32(a + "kda.head_dim", static_cast<uint32_t>(m.head_dim));
  // Every layer dense: the experts' keys llama.cpp requires, unused.
  out.add_uint32(a + "leading_dense_block_count", static_cast<uint32_t>(m.n_layers));
  out.add_uint32(a + "expert_feed_forward_length",
                 static_cast<uint32_t>(swiglu_hidden_size(m.d_model, m.mlp_ratio, m.intermediate_size)));
  out.add_uint32(a + "expert_shared_count", 0);
  out.add_uint32(a + "expert_gating_func", kSigmoidGating);
}

void add_kimi_linear_tensors(GgufWriter& out, const ModelWeights& w, int64_t /*vocab_size*/, int64_t n_tokens,
                             GgmlType dtype) {
  const ModelConfig& m = w.config.model;
  const GgufTensorCopier copy(out, w, dtype, n_tokens);
  const int64_t H = m.n_heads, K = m.head_dim, HK = H * K;
  const MlaConfig& mla = m.mla;

  copy.token_rows("token_embd.weight", "embeddings.weight");
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string layer = "layers." + std::to_string(i) + ".", blk = "blk." + std::to_string(i) + ".";
    const std::string mixer = layer + "attn.";
    copy.norm(blk + "attn_norm.weight", layer + "attn_norm.weight");
    if (kinds[i] == "kda") {
      copy.weight(blk + "attn_q.weight", mixer + "q_proj.weight");
      copy.weight(blk + "attn_k.weight", mixer + "k_proj.weight");
      copy.weight(blk + "attn_v.weight", mixer + "v_proj.weight");
      copy.f32(blk + "ssm_conv1d_q.weight", mixer + "q_conv1d.weight");
      copy.f32(blk + "ssm_conv1d_k.weight", mixer + "k_conv1d.weight");
      copy.f32(blk + "ssm_conv1d_v.weight", mixer + "v_conv1d.weight");
      copy.weight(blk + "ssm_f_a.weight", mixer + "f_a_proj.weight");
      copy.weight(blk + "ssm_f_b.weight", mixer + "f_b_proj.weight");
      std::vector<float> A = lat_tensor(w, mixer + "A_log").to_vector<float>();
      for (float& x : A) x = -std::exp(x);
      add_gguf_tensor(out, blk + "ssm_a", {H, 1}, A, dtype, GgufStorage::f32);
      add_gguf_tensor(out, blk + "ssm_dt.bias", {HK}, lat_tensor(w, mixer + "dt_bias").to_vector<float>(), dtype,
                      GgufStorage::f32);
      copy.weight(blk + "ssm_beta.weight", mixer + "b_proj.weight");
      copy.weight(blk + "ssm_g_a.weight", mixer + "g_a_proj.weight");
      copy.weight(blk + "ssm_g_b.weight", mixer + "g_b_proj.weight");
      copy.f32(blk + "ssm_norm.weight", mixer + "o_norm.weight");
      copy.weight(blk + "attn_output.weight", mixer + "o_proj.weight");
    } else {
      const int64_t Ha = m.attn.n_heads, C = mla.kv_lora_rank, Dn = mla.qk_nope_head_dim, Dv = mla.v_head_dim;
      copy.weight(blk + "attn_q.weight", mixer + "q_proj.weight");
      copy.weight(blk + "attn_kv_a_mqa.weight", mixer + "kv_a_proj_with_mqa.weight");
      copy.f32(blk + "attn_kv_a_norm.weight", mixer + "kv_a_layernorm.weight");
      // kv_b_proj's rows per head: Dn key rows, then Dv value rows, each [C].
      const std::vector<float> kv_b = lat_tensor(w, mixer + "kv_b_proj.weight").to_vector<float>();
      std::vector<float> k_b(static_cast<size_t>(Ha * C * Dn)), v_b(static_cast<size_t>(Ha * Dv * C));
      for (int64_t h = 0; h < Ha; ++h) {
        const int64_t head = h * (Dn + Dv);
        for (int64_t j = 0; j < Dn; ++j)
          for (int64_t c = 0; c < C; ++c)
            k_b[static_cast<size_t>((h * C + c) * Dn + j)] = kv_b[static_cast<size_t>((head + j) * C + c)];
        std::copy_n(kv_b.begin() + static_cast<std::ptrdiff_t>((head + Dn) * C), Dv * C,
                    v_b.begin() + static_cast<std::ptrdiff_t>(h * Dv * C));
      }
      add_gguf_tensor(out, blk + "attn_k_b.weight", {Ha, C, Dn}, k_b, dtype, GgufStorage::weight);
      add_gguf_tensor(out, blk + "attn_v_b.weight", {Ha, Dv, C}, v_b, dtype, GgufStorage::weight);
      copy.weight(blk + "attn_output.weight", mixer + "o_proj.weight");
    }
    copy.norm(blk + "ffn_norm.weight", layer + "mlp_norm.weight");
    copy.weight(blk + "ffn_gate.weight", layer + "mlp.gate_proj.weight");
    copy.weight(blk + "ffn_up.weight", layer + "mlp.up_proj.weight");
    copy.weight(blk + "ffn_down.weight", layer + "mlp.down_proj.weight");
  }
  copy.norm("output_norm.weight", "norm.weight");
  // llama.cpp's kimi-linear requires output: a tied model writes its embeddings again.
  copy.token_rows("output.weight", m.tie_embeddings ? "embeddings.weight" : "lm_head.weight");
}

}  // namespace

const GgufArchitecture& gguf_kimi_linear() {
  static const GgufArchitecture arch = {kArch, check_kimi_linear, add_kimi_linear_metadata, add_kimi_linear_tensors};
  return arch;
}

}  // namespace lat
