// Model FLOPs per token of a HybridLM training step, counted from the model's structure:
// every matrix product of the forward and of the backward as lat's kernels do them, each
// m x n x k product 2 m n k FLOPs. Elementwise work, norms, softmax, short convolutions and
// the optimizer are not counted (the MFU convention: products only). docs/MFU.md gives the
// formula with each term; bench_torch_peer.py ports it.
//
// Letters: T tokens of a sequence (data.block_size), D d_model, H heads, K key and V value
// head sizes, C chunk size, W attention window (0: full causal), Hk query/key heads of a
// grouped kernel (H / Hk value heads share each).
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "layers/attention.h"
#include "layers/hybrid_lm.h"
#include "layers/linear_attention_layers.h"
#include "layers/mamba2_layer.h"
#include "layers/mla_attention.h"

namespace lat::bench {

/// FLOPs per token of one training step (a forward and a backward).
struct ModelFlops {
  double forward = 0.0;
  double backward = 0.0;
  double total() const { return forward + backward; }
};

/// Query-key pairs a causal attention with window W (0: none) scores over a sequence of T
/// tokens: sum over queries t = 0..T-1 of min(t + 1, W).
inline double attended_pairs(int64_t T, int64_t W) {
  const int64_t w = W > 0 ? std::min(W, T) : T;
  // The first w queries see t + 1 keys each, the other T - w see w.
  return static_cast<double>(w) * static_cast<double>(w + 1) / 2.0 + static_cast<double>(T - w) * static_cast<double>(w);
}

/// A Linear layer's products per token: y = x W^T forward (2 in out), dx = dy W and
/// dW = dy^T x backward (2 x 2 in out).
inline ModelFlops linear_flops(int64_t in, int64_t out) {
  const double f = 2.0 * static_cast<double>(in) * static_cast<double>(out);
  return {f, 2.0 * f};
}

/// Fused causal attention per token, H heads of size K (queries and keys) and V (values),
/// only the pairs the mask keeps (the kernel skips the rest): forward S = Q K^T and O = P V;
/// backward (FlashAttention-2, which recomputes S) S, dP = dO V^T, dQ = dS K, dK = dS^T Q,
/// dV = P^T dO.
inline ModelFlops attention_flops(int64_t T, int64_t W, int64_t H, int64_t K, int64_t V) {
  const double pairs_per_token = attended_pairs(T, W) / static_cast<double>(T);
  const double h = static_cast<double>(H), k = static_cast<double>(K), v = static_cast<double>(V);
  return {h * pairs_per_token * (2.0 * k + 2.0 * v), h * pairs_per_token * (6.0 * k + 4.0 * v)};
}

/// The C^2 K coefficients of a chunk kernel's forward and backward (the pair products of
/// queries and keys), which is where the delta rule's and KDA's counts differ.
struct PairProducts {
  double forward, backward;
};

/// A chunkwise delta-rule kernel in the WY form per token, H value heads, per chunk of C rows
/// (T padded to whole chunks): `pairs` C^2 K, plus forward 4 C^2 V + 6 C K V + C^3 / 3 and
/// backward 10 C^2 V + 16 C K V + C^3 / 3 (the terms delta_rule_flops and kda_flops spell out).
inline ModelFlops wy_chunk_flops(int64_t T, int64_t C, int64_t H, int64_t K, int64_t V, PairProducts pairs) {
  const double c = static_cast<double>(C), k = static_cast<double>(K), v = static_cast<double>(V);
  const double chunks_per_token = static_cast<double>((T + C - 1) / C) / static_cast<double>(T);
  const double inverse = c * c * c / 3.0;
  const double forward = pairs.forward * c * c * k + 4.0 * c * c * v + 6.0 * c * k * v + inverse;
  const double backward = pairs.backward * c * c * k + 10.0 * c * c * v + 16.0 * c * k * v + inverse;
  const double scale = static_cast<double>(H) * chunks_per_token;
  return {scale * forward, scale * backward};
}

/// The chunkwise (gated) delta rule per token, H value heads, ALGORITHMS.md 2.4 as
/// chunk_gated_delta_rule_cpu.cpp computes it, per chunk of C rows (T padded to whole chunks):
///   forward  A = K K^T, W = T (beta gamma K), Q K^T: 3 x 2 C^2 K;  U = T (beta V), (Q K^T) V_new:
///            2 x 2 C^2 V;  V_new = U - W S, the state update K^T V_new, Q S: 3 x 2 C K V;
///            T = (I + A)^-1 by forward substitution: C^3 / 3
///   backward the forward's A, W, U, V_new, state update and Q K^T again (recomputed), then
///            dV_new (2 C^2 V + 2 C K V), dh (2 x 2 C K V), P = dO V_new^T (2 C^2 V),
///            dQ (2 C K V + 2 C^2 K), dK (2 C K V + 2 C^2 K), dW = -dV_new S^T (2 C K V),
///            T^T [dW | dU] and dA (2 x 2 C^2 (K + V)), the WY term of dK (2 C^2 K), T again
///            (C^3 / 3): 16 C^2 K + 10 C^2 V + 16 C K V + C^3 / 3 per chunk.
inline ModelFlops delta_rule_flops(int64_t T, int64_t C, int64_t H, int64_t K, int64_t V) {
  return wy_chunk_flops(T, C, H, K, V, {.forward = 6.0, .backward = 16.0});
}

/// Chunkwise KDA per token, H heads, ALGORITHMS.md 2.7 as chunk_kda_cpu.cpp computes it, per
/// chunk of C rows (T padded to whole chunks). The pair matrices are only their triangles
/// (strictly lower A, lower Q K^T with its diagonal: C^2 pairs together, each a K-long dot
/// product, 2 K, whether it lies in a sub-chunk's tile product or inside a sub-chunk):
///   forward  A and Q K^T: 2 C^2 K;  [W | U] = T [beta K o E | beta V]: 2 C^2 (K + V);
///            V_new = U - W S, the state update, (Q o E) S: 3 x 2 C K V;  (Q K^T) V_new:
///            2 C^2 V;  T = (I + A)^-1 by forward substitution: C^3 / 3
///   backward the forward's A, Q K^T, T, [W | U], V_new and state update again (recomputed),
///            then dV_new (2 C^2 V + 2 C K V), dq's readout dO S^T (2 C K V), the writes'
///            V_new dh^T (2 C K V), dh (2 x 2 C K V), dQ = dO V_new^T (2 C^2 V), through Q K^T's
///            pairs dq and dk (2 x 2 K per pair, the diagonal's included: 2 C^2 K + 2 C K),
///            dW = -dV_new S^T (2 C K V), T^T [dW | dU] and dA (2 x 2 C^2 (K + V)), through A's
///            pairs dk twice (2 C^2 K - 2 C K): 12 C^2 K + 10 C^2 V + 16 C K V + C^3 / 3 per chunk.
inline ModelFlops kda_flops(int64_t T, int64_t C, int64_t H, int64_t K, int64_t V) {
  return wy_chunk_flops(T, C, H, K, V, {.forward = 4.0, .backward = 12.0});
}

/// The chunkwise decayed linear attention per token (chunk_simple_gla_cpu.cpp, ALGORITHMS.md
/// 2.2 and 2.3; Mamba-2's SSD with K = d_state, V = head_dim, Hk = n_groups), H value heads
/// whose queries and keys come in Hk groups, per chunk of C rows (T padded to whole chunks).
/// Q K^T and the products with the summed scores' gradient are one per group chunk, the
/// others one per head chunk:
///   forward  per head: U = (K o decay)^T V, (Q o decay) S: 2 x 2 C K V;  A V: 2 C^2 V;
///            per group: Q K^T: 2 C^2 K
///   backward (nothing recomputed) per head: Q^T dO, dO S^T, V dh^T, dv = K dh:
///            4 x 2 C K V;  P = dO V^T, A^T dO: 2 x 2 C^2 V;  per group: P K, P^T Q: 2 x 2 C^2 K
inline ModelFlops decayed_chunk_flops(int64_t T, int64_t C, int64_t H, int64_t Hk, int64_t K, int64_t V) {
  const double c = static_cast<double>(C), k = static_cast<double>(K), v = static_cast<double>(V);
  const double chunks_per_token = static_cast<double>((T + C - 1) / C) / static_cast<double>(T);
  const double h = static_cast<double>(H), hk = static_cast<double>(Hk);
  const double forward = h * (4.0 * c * k * v + 2.0 * c * c * v) + hk * 2.0 * c * c * k;
  const double backward = h * (8.0 * c * k * v + 4.0 * c * c * v) + hk * 4.0 * c * c * k;
  return {chunks_per_token * forward, chunks_per_token * backward};
}

/// The model's FLOPs per token at sequences of T tokens: each Linear (every "*_proj.weight",
/// mla's "kv_a_proj_with_mqa.weight" and lm_head.weight: projections, SwiGLU, LM head; the
/// tied embeddings when they are the LM head) plus each mixer's own products. Mixer kinds
/// counted: attn, gdn, delta_net, kda, mla, mamba2; for another kind nullopt, and `uncounted`
/// (when given) names it.
inline std::optional<ModelFlops> training_flops_per_token(const HybridLM& model, int64_t T,
                                                          std::string* uncounted = nullptr) {
  ModelFlops sum;
  auto add = [&](const ModelFlops& f) {
    sum.forward += f.forward;
    sum.backward += f.backward;
  };
  for (const auto& [name, weight] : model.named_parameters()) {
    const bool projection = name.ends_with("_proj.weight") || name.ends_with("_proj_with_mqa.weight");
    const bool head = name == "lm_head.weight" || (name == "embeddings.weight" && model.config().tie_embeddings);
    if ((projection || head) && weight.dim() == 2) add(linear_flops(weight.size(1), weight.size(0)));
  }
  for (int64_t i = 0; i < model.n_layers(); ++i) {
    const Mixer& mixer = model.block(i).mixer();
    if (const auto* attn = dynamic_cast<const Attention*>(&mixer)) {
      const MixerConfig& c = attn->config();
      add(attention_flops(T, c.window_size, c.attn_n_heads, c.attn_head_dim, c.attn_head_dim));
    } else if (const auto* linear = dynamic_cast<const LinearMixer*>(&mixer);
               linear != nullptr && (linear->kind() == "gdn" || linear->kind() == "delta_net")) {
      add(delta_rule_flops(T, linear->config().chunk_size, linear->value_heads(), linear->key_dim(),
                           linear->value_dim()));
    } else if (linear != nullptr && linear->kind() == "kda") {
      add(kda_flops(T, linear->config().chunk_size, linear->value_heads(), linear->key_dim(), linear->value_dim()));
    } else if (const auto* mla = dynamic_cast<const MlaAttention*>(&mixer)) {
      // Training expands the latents to per-head keys [nope | rope] and values (no absorption).
      const MixerConfig& c = mla->config();
      add(attention_flops(T, c.window_size, c.attn_n_heads, c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim,
                          c.mla.v_head_dim));
    } else if (const auto* mamba = dynamic_cast<const Mamba2*>(&mixer)) {
      const Mamba2Options& o = mamba->options();
      add(decayed_chunk_flops(T, o.chunk_size, mamba->heads(), o.n_groups, o.d_state, o.head_dim));
    } else {
      if (uncounted != nullptr) *uncounted = model.config().layers.at(static_cast<size_t>(i));
      return std::nullopt;
    }
  }
  return sum;
}

}  // namespace lat::bench
