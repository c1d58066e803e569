// Attention mixer: projections, RoPE, the fused causal attention op, and the KV cache.
#include "layers/attention.h"

#include <algorithm>
#include <cstring>

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
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
  if (c.head_dim == 0) {
    LAT_CHECK(c.d_model % c.n_heads == 0,
              "Attention: d_model: expected a multiple of n_heads " << c.n_heads << ", got " << c.d_model);
    c.head_dim = c.d_model / c.n_heads;
  }
  LAT_CHECK(c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0,
            "Attention: n_kv_heads: expected a divisor of n_heads " << c.n_heads << ", got " << c.n_kv_heads);
  LAT_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0,
            "Attention: head_dim: expected a positive even size (RoPE rotates pairs), got " << c.head_dim);
  LAT_CHECK(c.window_size >= 0, "Attention: window_size: expected >= 0 (0 = full), got " << c.window_size);
  LAT_CHECK(c.rope_theta > 0, "Attention: rope_theta: expected a positive base, got " << c.rope_theta);
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  q_proj_ = &register_module("q_proj", std::make_unique<Linear>(c.d_model, q_dim, gen, c.init_std));
  k_proj_ = &register_module("k_proj", std::make_unique<Linear>(c.d_model, kv_dim, gen, c.init_std));
  v_proj_ = &register_module("v_proj", std::make_unique<Linear>(c.d_model, kv_dim, gen, c.init_std));
  o_proj_ = &register_module("o_proj", std::make_unique<Linear>(q_dim, c.d_model, gen, c.out_init_std));
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

Tensor Attention::attend(const Tensor& x, const Tensor& cu_seqlens) const {
  const int64_t B = x.size(0), T = x.size(1), H = config_.n_heads, Hkv = config_.n_kv_heads, D = config_.head_dim;
  Tensor q = rotary_embedding(q_proj_->forward(x).reshape({B, T, H, D}), config_.rope_theta, 0, cu_seqlens);
  Tensor k = rotary_embedding(k_proj_->forward(x).reshape({B, T, Hkv, D}), config_.rope_theta, 0, cu_seqlens);
  Tensor v = v_proj_->forward(x).reshape({B, T, Hkv, D});
  Tensor o = causal_attention(q, k, v, {}, config_.window_size, {}, cu_seqlens);
  return o_proj_->forward(o.reshape({B, T, H * D}));
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
  const int64_t B = x.size(0), T = x.size(1), H = config_.n_heads, Hkv = config_.n_kv_heads, D = config_.head_dim;
  Tensor q = rotary_embedding(q_proj_->forward(x).reshape({B, T, H, D}), config_.rope_theta, cache->position);
  Tensor k = rotary_embedding(k_proj_->forward(x).reshape({B, T, Hkv, D}), config_.rope_theta, cache->position);
  Tensor v = v_proj_->forward(x).reshape({B, T, Hkv, D});
  append_to_cache(*cache, k, v, config_.window_size);
  cache->position += T;
  Tensor o = causal_attention_cached(q, cache->k, cache->v, cache->length, {}, config_.window_size);
  return o_proj_->forward(o.reshape({B, T, H * D}));
}

}  // namespace lat
