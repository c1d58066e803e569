// Attention mixer: projections, q/k norms, RoPE, the fused causal attention op, the output
// gate, and the KV cache.
#include "layers/attention.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "lat/ops.h"
#include "lat/tape.h"
#include "layers/cu_seqlens.h"
#include "layers/fused/attention_op.h"
#include "layers/fused/rope.h"

namespace lat {
namespace {

// Appends k_new, v_new [B, T, Hkv, D] to the cache rows [length, length + T). When the
// buffer is full, rows no longer visible through the sliding window are dropped first, and
// then the buffer doubles; both are amortized O(1) per token.
void append_to_cache(KVCache& cache, const Tensor& k_new, const Tensor& v_new, int64_t window_size) {
  const int64_t B = k_new.size(0), T = k_new.size(1);
  const int64_t row = k_new.size(2) * k_new.size(3);  // floats per token
  int64_t capacity = cache.k.defined() ? cache.k.size(1) : 0;
  if (cache.length + T > capacity && window_size > 0) {
    // The next query (position `position`) sees keys after position - window_size: the
    // last window_size - 1 cached rows.
    const int64_t keep = std::min(cache.length, window_size - 1);
    const int64_t drop = cache.length - keep;
    if (drop > 0) {
      for (Tensor* t : {&cache.k, &cache.v}) {
        float* base = t->data<float>();
        for (int64_t b = 0; b < B; ++b) {
          float* rows = base + b * capacity * row;
          std::memmove(rows, rows + drop * row, static_cast<size_t>(keep * row) * sizeof(float));
        }
      }
      cache.length = keep;
    }
  }
  if (cache.length + T > capacity) {
    const int64_t new_capacity = std::max({cache.length + T, 2 * capacity, int64_t{16}});
    for (Tensor* t : {&cache.k, &cache.v}) {
      Tensor grown = Tensor::empty({B, new_capacity, k_new.size(2), k_new.size(3)});
      for (int64_t b = 0; b < B && cache.length > 0; ++b)
        std::memcpy(grown.data<float>() + b * new_capacity * row, t->data<float>() + b * capacity * row,
                    static_cast<size_t>(cache.length * row) * sizeof(float));
      *t = grown;
    }
    capacity = new_capacity;
  }
  for (int64_t b = 0; b < B; ++b) {
    const size_t bytes = static_cast<size_t>(T * row) * sizeof(float);
    std::memcpy(cache.k.data<float>() + (b * capacity + cache.length) * row, k_new.data<float>() + b * T * row, bytes);
    std::memcpy(cache.v.data<float>() + (b * capacity + cache.length) * row, v_new.data<float>() + b * T * row, bytes);
  }
  cache.length += T;
}

}  // namespace

Attention::Attention(const AttentionConfig& config, Generator& gen) : config_(config) {
  AttentionConfig& c = config_;
  LAT_CHECK(c.d_model > 0 && c.n_heads > 0,
            "Attention: expected positive d_model and n_heads, got " << c.d_model << ", " << c.n_heads);
  if (c.attn_n_heads == 0) c.attn_n_heads = c.n_heads;
  if (c.attn_head_dim == 0) {
    if (c.head_dim == 0) {
      LAT_CHECK(c.d_model % c.n_heads == 0,
                "Attention: d_model: expected a multiple of n_heads " << c.n_heads << ", got " << c.d_model);
      c.head_dim = c.d_model / c.n_heads;
    }
    c.attn_head_dim = c.head_dim;
  }
  const int64_t H = c.attn_n_heads, D = c.attn_head_dim;
  LAT_CHECK(H > 0, "Attention: attn_n_heads: expected a positive count (0 = n_heads), got " << H);
  if (c.n_kv_heads == 0) c.n_kv_heads = H;
  LAT_CHECK(c.n_kv_heads > 0 && H % c.n_kv_heads == 0,
            "Attention: n_kv_heads: expected a divisor of n_heads " << H << ", got " << c.n_kv_heads);
  LAT_CHECK(c.rope_fraction > 0 && c.rope_fraction <= 1,
            "Attention: rope_fraction: expected a value in (0, 1], got " << c.rope_fraction);
  const bool full_rotary = c.rope_fraction == 1.0;
  LAT_CHECK(D > 0 && (!full_rotary || D % 2 == 0), "Attention: head_dim: expected a positive "
                                                       << (full_rotary ? "even " : "")
                                                       << "size (RoPE rotates pairs), got " << D);
  rotary_dim_ = rotary_dim_of(D, c.rope_fraction);
  LAT_CHECK(rotary_dim_ >= 2 && rotary_dim_ % 2 == 0,
            "Attention: rope_fraction: rotates floor(head_dim "
                << D << " * " << c.rope_fraction << ") = " << rotary_dim_
                << " dims, expected an even number >= 2 (RoPE rotates pairs)");
  LAT_CHECK(c.window_size >= 0, "Attention: window_size: expected >= 0 (0 = full), got " << c.window_size);
  LAT_CHECK(c.rope_theta > 0, "Attention: rope_theta: expected a positive base, got " << c.rope_theta);
  // Registration order is the checkpoint order: the options' children come last, so that
  // checkpoints of layers without them keep their layout.
  const int64_t q_rows = H * D * (c.output_gate ? 2 : 1), kv_dim = c.n_kv_heads * D;
  q_proj_ = &register_module("q_proj", std::make_unique<Linear>(c.d_model, q_rows, gen, c.init_std));
  k_proj_ = &register_module("k_proj", std::make_unique<Linear>(c.d_model, kv_dim, gen, c.init_std));
  v_proj_ = &register_module("v_proj", std::make_unique<Linear>(c.d_model, kv_dim, gen, c.init_std));
  o_proj_ = &register_module("o_proj", std::make_unique<Linear>(H * D, c.d_model, gen, c.out_init_std));
  if (c.qk_norm) {
    LAT_CHECK(c.norm_eps > 0, "Attention: norm_eps: expected a positive value (qk_norm), got " << c.norm_eps);
    const NormWeight kind = c.norm_zero_centered ? NormWeight::zero_centered : NormWeight::plain;
    q_norm_ = &register_module("q_norm", std::make_unique<RMSNorm>(D, c.norm_eps, kind));
    k_norm_ = &register_module("k_norm", std::make_unique<RMSNorm>(D, c.norm_eps, kind));
  }
}

Tensor Attention::forward(const Tensor& x, const Tensor& cu_seqlens) const {
  const char* op = "Attention::forward";
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

Attention::Projected Attention::project(const Tensor& x, int64_t position_offset, const Tensor& cu_seqlens) const {
  const int64_t B = x.size(0), T = x.size(1), H = config_.attn_n_heads, Hkv = config_.n_kv_heads,
                D = config_.attn_head_dim;
  const std::vector<Tensor> qkv = fused_linear_forward(x, {q_proj_, k_proj_, v_proj_});
  Projected p;
  if (config_.output_gate) {
    std::vector<Tensor> parts = split(qkv[0].reshape({B, T, H, 2 * D}), {D, D}, 3);
    p.q = parts[0];
    p.gate = parts[1];
  } else {
    p.q = qkv[0].reshape({B, T, H, D});
  }
  p.k = qkv[1].reshape({B, T, Hkv, D});
  p.v = qkv[2].reshape({B, T, Hkv, D});
  if (q_norm_ != nullptr) {
    p.q = q_norm_->forward(p.q);
    p.k = k_norm_->forward(p.k);
  }
  p.q = rotary_embedding(p.q, config_.rope_theta, position_offset, cu_seqlens, rotary_dim_);
  p.k = rotary_embedding(p.k, config_.rope_theta, position_offset, cu_seqlens, rotary_dim_);
  return p;
}

Tensor Attention::output(const Tensor& o, const Tensor& gate) const {
  const int64_t B = o.size(0), T = o.size(1);
  const Tensor gated = gate.defined() ? o * sigmoid(gate) : o;
  return o_proj_->forward(gated.reshape({B, T, config_.attn_n_heads * config_.attn_head_dim}));
}

Tensor Attention::attend(const Tensor& x, const Tensor& cu_seqlens) const {
  Projected p = project(x, 0, cu_seqlens);
  return output(causal_attention(p.q, p.k, p.v, {}, config_.window_size, {}, cu_seqlens), p.gate);
}

std::unique_ptr<MixerState> Attention::make_state(int64_t batch) const {
  LAT_CHECK(batch > 0, "Attention::make_state: batch: expected a positive size, got " << batch);
  auto cache = std::make_unique<KVCache>();
  cache->batch = batch;
  return cache;
}

Tensor Attention::step(const Tensor& x, MixerState& state) const {
  auto* cache = dynamic_cast<KVCache*>(&state);
  LAT_CHECK(cache != nullptr, "Attention::step: state: expected a KVCache (made by Attention::make_state)");
  LAT_CHECK(x.dim() == 3 && x.size(0) == cache->batch && x.size(2) == config_.d_model,
            "Attention::step: x: expected shape [" << cache->batch << ", T, " << config_.d_model << "], got "
                                                   << shape_str(x.shape()));
  NoGradGuard no_grad;
  Projected p = project(x, cache->position, Tensor());
  append_to_cache(*cache, p.k, p.v, config_.window_size);
  cache->position += x.size(1);
  return output(causal_attention_cached(p.q, cache->k, cache->v, cache->length, {}, config_.window_size), p.gate);
}

}  // namespace lat
