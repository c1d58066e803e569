// Multi-head latent attention: projections to queries and per-token latents, the expansion
// of the latents into per-head keys and values, the fused causal attention op, and the
// latent cache.
#include "layers/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "lat/ops.h"
#include "lat/tape.h"
#include "layers/cu_seqlens.h"
#include "layers/fused/attention_op.h"
#include "layers/fused/rope.h"

namespace lat {
namespace {

// transformers' KimiLinearRMSNorm default, which KimiLinearAttention's q_a_layernorm and
// kv_a_layernorm keep whatever the config's rms_norm_eps.
constexpr double kLatentNormEps = 1e-6;

// The cache rows [B, L, width] followed by the T new ones [B, T, width]. With a sliding window
// only the last window_size - 1 old rows stay: all that the first new query (and any later
// one) still sees. Each step attends over every kept row, O(L) work, so the O(L) copy here
// costs no more; ops keep the cache on the parameters' device.
Tensor append_rows(const Tensor& rows, const Tensor& new_rows, int64_t window_size) {
  if (!rows.defined()) return new_rows;
  const int64_t L = rows.size(1);
  const int64_t keep = window_size > 0 ? std::min(L, window_size - 1) : L;
  if (keep == 0) return new_rows;
  return concat({keep < L ? slice(rows, 1, L - keep, L) : rows, new_rows}, 1);
}

}  // namespace

MlaAttention::MlaAttention(const MixerConfig& config, Generator& gen) : config_(config) {
  MixerConfig& c = config_;
  const MlaOptions& o = c.mla;
  LAT_CHECK(c.d_model > 0 && c.n_heads > 0,
            "MlaAttention: expected positive d_model and n_heads, got " << c.d_model << ", " << c.n_heads);
  if (c.attn_n_heads == 0) c.attn_n_heads = c.n_heads;
  const int64_t H = c.attn_n_heads;
  LAT_CHECK(H > 0, "MlaAttention: attn_n_heads: expected a positive count (0 = n_heads), got " << H);
  LAT_CHECK(o.kv_lora_rank >= 1, "MlaAttention: kv_lora_rank: expected a size >= 1, got " << o.kv_lora_rank);
  LAT_CHECK(o.q_lora_rank >= 0,
            "MlaAttention: q_lora_rank: expected a size >= 0 (0 = a plain q_proj), got " << o.q_lora_rank);
  LAT_CHECK(o.qk_nope_head_dim >= 0,
            "MlaAttention: qk_nope_head_dim: expected a size >= 0, got " << o.qk_nope_head_dim);
  LAT_CHECK(o.qk_rope_head_dim >= 0,
            "MlaAttention: qk_rope_head_dim: expected a size >= 0, got " << o.qk_rope_head_dim);
  LAT_CHECK(o.qk_nope_head_dim + o.qk_rope_head_dim >= 1,
            "MlaAttention: qk_nope_head_dim + qk_rope_head_dim: expected a query/key head size >= 1, got 0");
  LAT_CHECK(o.v_head_dim >= 1, "MlaAttention: v_head_dim: expected a size >= 1, got " << o.v_head_dim);
  LAT_CHECK(!o.rope || (o.qk_rope_head_dim >= 2 && o.qk_rope_head_dim % 2 == 0),
            "MlaAttention: qk_rope_head_dim: expected an even size >= 2 with rope (RoPE rotates pairs), got "
                << o.qk_rope_head_dim);
  LAT_CHECK(c.window_size >= 0, "MlaAttention: window_size: expected >= 0 (0 = full), got " << c.window_size);
  LAT_CHECK(c.rope_theta > 0, "MlaAttention: rope_theta: expected a positive base, got " << c.rope_theta);

  const int64_t Dq = o.qk_nope_head_dim + o.qk_rope_head_dim;
  if (o.q_lora_rank == 0) {
    q_proj_ = &register_module("q_proj", std::make_unique<Linear>(c.d_model, H * Dq, gen, c.init_std));
  } else {
    q_a_proj_ = &register_module("q_a_proj", std::make_unique<Linear>(c.d_model, o.q_lora_rank, gen, c.init_std));
    q_a_layernorm_ = &register_module("q_a_layernorm", std::make_unique<RMSNorm>(o.q_lora_rank, kLatentNormEps));
    q_b_proj_ = &register_module("q_b_proj", std::make_unique<Linear>(o.q_lora_rank, H * Dq, gen, c.init_std));
  }
  kv_a_proj_with_mqa_ = &register_module(
      "kv_a_proj_with_mqa", std::make_unique<Linear>(c.d_model, o.kv_lora_rank + o.qk_rope_head_dim, gen, c.init_std));
  kv_a_layernorm_ = &register_module("kv_a_layernorm", std::make_unique<RMSNorm>(o.kv_lora_rank, kLatentNormEps));
  kv_b_proj_ = &register_module(
      "kv_b_proj", std::make_unique<Linear>(o.kv_lora_rank, H * (o.qk_nope_head_dim + o.v_head_dim), gen, c.init_std));
  o_proj_ = &register_module("o_proj", std::make_unique<Linear>(H * o.v_head_dim, c.d_model, gen, c.out_init_std));
}

Tensor MlaAttention::forward(const Tensor& x, const Tensor& cu_seqlens) const {
  const char* op = "MlaAttention::forward";
  LAT_CHECK(x.dim() == 3 && x.size(2) == config_.d_model,
            op << ": x: expected shape [B, T, " << config_.d_model << "], got " << shape_str(x.shape()));
  if (cu_seqlens.defined()) {
    // The ops take packed sequences as one row (B == 1).
    const int64_t B = x.size(0), T = x.size(1);
    const Tensor cu = cu_seqlens_with_row_starts(op, cu_seqlens, B, T);
    return attend(x.reshape({1, B * T, config_.d_model}), cu).reshape({B, T, config_.d_model});
  }
  return attend(x, Tensor());
}

Tensor MlaAttention::rotate(const Tensor& x, int64_t position_offset, const Tensor& cu_seqlens) const {
  if (!config_.mla.rope) return x;
  return rotary_embedding(x, config_.rope_theta, position_offset, cu_seqlens, config_.mla.qk_rope_head_dim);
}

MlaAttention::Projected MlaAttention::project(const Tensor& x, int64_t position_offset,
                                              const Tensor& cu_seqlens) const {
  const MlaOptions& o = config_.mla;
  const int64_t B = x.size(0), T = x.size(1), H = config_.attn_n_heads, Dn = o.qk_nope_head_dim,
                Dr = o.qk_rope_head_dim;
  // x is read once for the query projection and the latent projection.
  const Linear* q_first = q_proj_ != nullptr ? q_proj_ : q_a_proj_;
  const std::vector<Tensor> first = fused_linear_forward(x, {q_first, kv_a_proj_with_mqa_});
  Tensor q = q_proj_ != nullptr ? first[0] : q_b_proj_->forward(q_a_layernorm_->forward(first[0]));
  q = q.reshape({B, T, H, Dn + Dr});
  Projected p;
  if (Dr == 0) {
    p.q = q;
    p.latent = kv_a_layernorm_->forward(first[1]);
    return p;
  }
  const std::vector<Tensor> latent_and_rot = split(first[1], {o.kv_lora_rank, Dr}, 2);
  p.latent = kv_a_layernorm_->forward(latent_and_rot[0]);
  p.k_rot = rotate(latent_and_rot[1].reshape({B, T, 1, Dr}), position_offset, cu_seqlens).reshape({B, T, Dr});
  if (!o.rope) {
    p.q = q;
  } else if (Dn == 0) {
    p.q = rotate(q, position_offset, cu_seqlens);
  } else {
    // Each head's query is [nope | rope]: only its last Dr channels meet the shared k_rot.
    const std::vector<Tensor> parts = split(q, {Dn, Dr}, 3);
    p.q = concat({parts[0], rotate(parts[1], position_offset, cu_seqlens)}, 3);
  }
  return p;
}

MlaAttention::Expanded MlaAttention::expand(const Tensor& latent, const Tensor& k_rot) const {
  const MlaOptions& o = config_.mla;
  const int64_t B = latent.size(0), L = latent.size(1), H = config_.attn_n_heads, Dn = o.qk_nope_head_dim,
                Dr = o.qk_rope_head_dim;
  const Tensor kv = kv_b_proj_->forward(latent).reshape({B, L, H, Dn + o.v_head_dim});
  Expanded e;
  if (Dn == 0) {
    e.v = kv;  // Dr > 0: the keys are the shared part alone (below)
  } else {
    std::vector<Tensor> parts = split(kv, {Dn, o.v_head_dim}, 3);
    e.k = parts[0];
    e.v = parts[1];
  }
  if (Dr == 0) return e;
  // The shared part, the same in every head: its gradient sums over the heads.
  const Tensor shared = concat(std::vector<Tensor>(static_cast<size_t>(H), k_rot.reshape({B, L, 1, Dr})), 2);
  e.k = Dn == 0 ? shared : concat({e.k, shared}, 3);
  return e;
}

Tensor MlaAttention::attend(const Tensor& x, const Tensor& cu_seqlens) const {
  const int64_t B = x.size(0), T = x.size(1);
  const Projected p = project(x, 0, cu_seqlens);
  const Expanded e = expand(p.latent, p.k_rot);
  // The op's default scale is Dq^-0.5, as KimiLinearAttention's qk_head_dim ** -0.5.
  const Tensor o = causal_attention(p.q, e.k, e.v, {}, config_.window_size, {}, cu_seqlens);
  return o_proj_->forward(o.reshape({B, T, config_.attn_n_heads * config_.mla.v_head_dim}));
}

std::unique_ptr<MixerState> MlaAttention::make_state(int64_t batch) const {
  LAT_CHECK(batch > 0, "MlaAttention::make_state: batch: expected a positive size, got " << batch);
  auto cache = std::make_unique<MlaCache>();
  cache->batch = batch;
  return cache;
}

Tensor MlaAttention::step(const Tensor& x, MixerState& state) const {
  auto* cache = dynamic_cast<MlaCache*>(&state);
  LAT_CHECK(cache != nullptr, "MlaAttention::step: state: expected an MlaCache (made by MlaAttention::make_state)");
  LAT_CHECK(x.dim() == 3 && x.size(0) == cache->batch && x.size(2) == config_.d_model,
            "MlaAttention::step: x: expected shape [" << cache->batch << ", T, " << config_.d_model << "], got "
                                                      << shape_str(x.shape()));
  NoGradGuard no_grad;
  const int64_t B = x.size(0), T = x.size(1);
  const Projected p = project(x, cache->position, Tensor());
  cache->latent = append_rows(cache->latent, p.latent, config_.window_size);
  if (p.k_rot.defined()) cache->k_rot = append_rows(cache->k_rot, p.k_rot, config_.window_size);
  cache->length = cache->latent.size(1);
  cache->position += T;
  const Tensor o = attend_latent(p.q, *cache);
  return o_proj_->forward(o.reshape({B, T, config_.attn_n_heads * config_.mla.v_head_dim}));
}

Tensor MlaAttention::attend_latent(const Tensor& q, const MlaCache& cache) const {
  const MlaOptions& o = config_.mla;
  const int64_t B = q.size(0), T = q.size(1), H = config_.attn_n_heads, C = o.kv_lora_rank,
                Dn = o.qk_nope_head_dim, Dr = o.qk_rope_head_dim, Dv = o.v_head_dim, L = cache.length;
  // kv_b_proj's rows per head: Dn key rows, then Dv value rows, each over the C latent channels.
  const std::vector<Tensor> w = split(kv_b_proj_->weight().reshape({H, Dn + Dv, C}), {Dn, Dv}, 1);
  const Tensor latent = cache.latent.reshape({B, L, 1, C});
  // q_nope . (W_uk c) = (q_nope W_uk) . c: each head's query moves into the latent space, where
  // every head reads the same keys (multi-query attention over the cache rows).
  Tensor q_latent, k;
  std::vector<Tensor> q_parts = split(q, {Dn, Dr}, 3);
  if (Dn > 0) {
    const Tensor q_nope = permute(q_parts[0], {2, 0, 1, 3}).reshape({H, B * T, Dn});
    q_latent = permute(matmul(q_nope, w[0]).reshape({H, B, T, C}), {1, 2, 0, 3});
  }
  if (Dr == 0) {
    k = latent;
  } else if (Dn == 0) {
    q_latent = q_parts[1];
    k = cache.k_rot.reshape({B, L, 1, Dr});
  } else {
    q_latent = concat({q_latent, q_parts[1]}, 3);
    k = concat({latent, cache.k_rot.reshape({B, L, 1, Dr})}, 3);
  }
  // The scale stays the expanded key's Dq^-0.5: the scores are the same numbers.
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dn + Dr));
  const Tensor o_latent = causal_attention_cached(q_latent, k, latent, L, scale, config_.window_size);
  // softmax . (W_uv c) = W_uv (softmax . c): each head's output leaves the latent space.
  const Tensor o_heads = permute(o_latent, {2, 0, 1, 3}).reshape({H, B * T, C});
  return permute(matmul(o_heads, transpose(w[1], 1, 2)).reshape({H, B, T, Dv}),
                 {1, 2, 0, 3});
}

}  // namespace lat
