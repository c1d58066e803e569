// The step's memory from the model's widths. Letters: D d_model, F the MLP's hidden width,
// H heads of K key dims, Hv value heads of V dims (linear mixers), Ha attention heads of Ka
// dims with Hkv key/value heads, C linear.chunk_size, N = rows x block_size tokens. Counts
// are f32 values per token unless said otherwise; what each layer saves was read from its
// forward (layers/) and the sum checked against the peak RSS of real steps (DESIGN.md).
#include "train/run/memory_estimate.h"

#include <sys/resource.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "layers/linear_attention/common.h"
#include "layers/swiglu.h"
#include "train/text/format.h"

namespace lat {
namespace {

constexpr double kFloatBytes = 4.0;
constexpr double kGiB = double(int64_t{1} << 30);
// What the process maps only once training starts: oneDNN's JIT kernels, thread pools' stacks.
constexpr double kStartupBytes = 64.0 * (1 << 20);
// Weights, their gradients and AdamW's two moments (SGD's one momentum is counted as two).
constexpr double kCopiesPerParameter = 4.0;

/// The resolved widths of the model.* keys.
struct Widths {
  double D, F, H, K, Hv, V, Ha, Ka, Hkv, C;
};

Widths widths_of(const ModelConfig& m) {
  Widths w{};
  w.D = static_cast<double>(m.d_model);
  w.F = static_cast<double>(swiglu_hidden_size(m.d_model, m.mlp_ratio, m.intermediate_size));
  w.H = static_cast<double>(m.n_heads);
  w.K = static_cast<double>(m.head_dim > 0 ? m.head_dim : m.d_model / std::max<int64_t>(m.n_heads, 1));
  w.V = w.K * m.expand_v;
  w.Hv = static_cast<double>(m.linear.n_v_heads > 0 ? m.linear.n_v_heads : m.n_heads);
  w.Ha = static_cast<double>(m.attn.n_heads > 0 ? m.attn.n_heads : m.n_heads);
  w.Ka = m.attn.head_dim > 0 ? static_cast<double>(m.attn.head_dim) : w.K;
  w.Hkv = m.attn.n_kv_heads > 0 ? static_cast<double>(m.attn.n_kv_heads) : w.Ha;
  w.C = static_cast<double>(std::max<int64_t>(m.linear.chunk_size, 1));
  return w;
}

/// The widths of a mamba2 layer (model.mamba.*): I = d_inner, Hm heads of P, G groups of N,
/// the conv's channels I + 2 G N, Cm its chunk size.
struct MambaWidths {
  double I, Hm, P, GN, conv, Cm;
};

MambaWidths mamba_widths_of(const ModelConfig& m) {
  const MambaConfig& o = m.mamba;
  MambaWidths w{};
  w.I = static_cast<double>(o.expand * m.d_model);
  w.P = static_cast<double>(std::max<int64_t>(o.head_dim, 1));
  w.Hm = w.I / w.P;
  w.GN = static_cast<double>(o.n_groups * o.d_state);
  w.conv = w.I + 2 * w.GN;
  w.Cm = static_cast<double>(std::max<int64_t>(o.chunk_size, 1));
  return w;
}

/// The widths of an mla layer (model.mla.*): R q_lora_rank, L kv_lora_rank, Dn, Dr, Dv and
/// Dq = Dn + Dr per head.
struct MlaWidths {
  double R, L, Dn, Dr, Dv, Dq;
};

MlaWidths mla_widths_of(const ModelConfig& m) {
  const MlaConfig& o = m.mla;
  return {static_cast<double>(o.q_lora_rank),      static_cast<double>(o.kv_lora_rank),
          static_cast<double>(o.qk_nope_head_dim), static_cast<double>(o.qk_rope_head_dim),
          static_cast<double>(o.v_head_dim),       static_cast<double>(o.qk_nope_head_dim + o.qk_rope_head_dim)};
}

/// Values one mla layer saves for backward per token, by the model.mla.* key each grows with:
/// q (and its low-rank path), the latent projection and norm, kv_b_proj's output and its
/// split, the keys with the shared part, the output; `rest` is the heads' log-sum-exp and
/// o_proj's output.
struct MlaActivations {
  double q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, rest;
  double total() const { return q_lora_rank + kv_lora_rank + qk_nope_head_dim + qk_rope_head_dim + v_head_dim + rest; }
};

MlaActivations mla_activations(const ModelConfig& m, const Widths& w) {
  const MlaWidths a = mla_widths_of(m);
  // q [Ha, Dq] (and its two RoPE copies), the keys [Ha, Dq] with the shared part, kv_b_proj's
  // output [Ha, Dn + Dv] and its split, the output [Ha, Dv].
  const double q_copies = m.mla.rope ? 3 : 1;
  return {.q_lora_rank = 2 * a.R,
          .kv_lora_rank = 3 * a.L,
          .qk_nope_head_dim = w.Ha * a.Dn * (q_copies + 2 + 2),
          .qk_rope_head_dim = w.Ha * a.Dr * (q_copies + 2) + 2 * a.Dr,
          .v_head_dim = w.Ha * a.Dv * 3,
          .rest = w.Ha + w.D};
}

/// Parameters of one mixer of `kind`.
double mixer_parameters(const std::string& kind, const ModelConfig& m, const Widths& w) {
  if (kind == "mla") {
    // q_proj (or q_a_proj, its norm, q_b_proj), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj.
    const MlaWidths a = mla_widths_of(m);
    const double q = a.R > 0 ? w.D * a.R + a.R + a.R * w.Ha * a.Dq : w.D * w.Ha * a.Dq;
    return q + w.D * (a.L + a.Dr) + a.L + a.L * w.Ha * (a.Dn + a.Dv) + w.Ha * a.Dv * w.D;
  }
  if (kind == "mamba2") {
    // in_proj, conv1d (and its bias), dt_bias, A_log, D, norm, out_proj (biases: a rounding).
    const MambaWidths mw = mamba_widths_of(m);
    return w.D * (mw.I + mw.conv + mw.Hm) + mw.conv * (static_cast<double>(m.mamba.conv_size) + 1) + 3 * mw.Hm +
           mw.I + mw.I * w.D;
  }
  if (kind == "attn") {
    const double q = w.Ha * w.Ka * (m.attn.output_gate ? 2 : 1), kv = w.Hkv * w.Ka;
    return w.D * (q + 2 * kv) + w.Ha * w.Ka * w.D;
  }
  const double qk = w.H * w.K, vv = w.Hv * w.V;
  const double gate = m.linear.use_gate ? w.D * vv : 0;
  const double conv = m.linear.use_short_conv ? static_cast<double>(m.linear.conv_size) * (2 * qk + vv) : 0;
  return w.D * (2 * qk + vv) + gate + 2 * w.D * w.Hv + conv + vv * w.D + vv;
}

/// Values one mixer of `kind` saves for backward per token: projections, the short
/// convolutions' outputs, normalized q and k, the chunk kernel's per-chunk states (K x V per
/// value head every C tokens) and intra-chunk matrices (C per head), the output norm and gate,
/// o_proj's output.
double mixer_activations(const std::string& kind, const ModelConfig& m, const Widths& w) {
  if (kind == "mla") return mla_activations(m, w).total();
  if (kind == "mamba2") {
    // in_proj's output and its split; the conv's output and sigmoid and their split; B and C
    // repeated to the heads; dt's chain; v = dt x; the chunk kernel's states and intra-chunk
    // matrices; y, the D skip, the gate, the norm; out_proj's output.
    const MambaWidths mw = mamba_widths_of(m);
    const double projections = 2 * (mw.I + mw.conv + mw.Hm);
    const double conv = 3 * mw.conv;
    const double heads = 2 * 2 * mw.Hm * static_cast<double>(m.mamba.d_state) + 4 * mw.Hm + mw.I;
    const double kernel = mw.Hm * mw.Cm + mw.Hm * static_cast<double>(m.mamba.d_state) * mw.P / mw.Cm;
    return projections + conv + heads + kernel + 4 * mw.I + w.D;
  }
  if (kind == "attn") {
    const double q = w.Ha * w.Ka, kv = w.Hkv * w.Ka, gate = m.attn.output_gate ? 2 * q : 0;
    // q, k, v; q and k after RoPE (and the qk norms); the output, its log-sum-exp; o_proj.
    return (q + 2 * kv) + (q + kv) * (m.attn.qk_norm ? 2 : 1) + q + w.Ha + gate + w.D;
  }
  const double qk = w.H * w.K, vv = w.Hv * w.V;
  const double projections = 2 * qk + vv + (m.linear.use_gate ? vv : 0) + 2 * w.Hv;
  const double convs = m.linear.use_short_conv ? 2 * qk + vv : 0;
  const double kernel = 2 * qk + vv + w.Hv * w.C + w.Hv * w.K * w.V / w.C;
  return projections + convs + kernel + 3 * vv + w.D;
}

/// How many rows a linear mixer's chunk kernel holds per token of a block: the block rounded
/// up to whole chunks (linear_attention::chunk_rows) over the block; 1 for attn and mla.
double chunk_padding(const std::string& kind, const ModelConfig& m, int64_t block) {
  if (kind == "attn" || kind == "mla" || block < 1) return 1.0;
  const int64_t chunk = kind == "mamba2" ? m.mamba.chunk_size : m.linear.chunk_size;
  const int64_t rows = linear_attention::chunk_rows(static_cast<int>(std::max<int64_t>(chunk, 1)), block);
  return static_cast<double>((block + rows - 1) / rows * rows) / static_cast<double>(block);
}

// The process's peak resident memory so far: libraries, thread pools, the loaded data.
double resident_bytes() {
  rusage usage{};
  return getrusage(RUSAGE_SELF, &usage) == 0 ? 1024.0 * static_cast<double>(usage.ru_maxrss) : 0.0;
}

std::string gib(double bytes) { return format_fixed(bytes / kGiB, 1) + " GiB"; }

}  // namespace

StepMemory estimate_step_memory(const Config& config, int64_t vocab_size, int64_t rows) {
  const ModelConfig& m = config.model;
  const Widths w = widths_of(m);
  const double tokens = static_cast<double>(rows) * static_cast<double>(config.data.block_size);
  const double vocab = static_cast<double>(m.vocab_size > 0 ? m.vocab_size : vocab_size);

  const double embeddings = vocab * w.D * (m.tie_embeddings ? 1 : 2);
  double parameters = embeddings + w.D;
  // Per token: the embedding, the final norm's input and output.
  double per_token = 3 * w.D, largest_layer = 0, mla_per_token = 0;
  for (const std::string& kind : layer_mixers(m)) {
    parameters += mixer_parameters(kind, m, w) + 3 * w.D * w.F + 2 * w.D;
    const double mixer = mixer_activations(kind, m, w) * chunk_padding(kind, m, config.data.block_size);
    if (kind == "mla") mla_per_token += mixer;
    // Two norms (sum, output), SwiGLU's gate, up and product, its output.
    const double layer = mixer + 4 * w.D + 3 * w.F + w.D;
    per_token += layer;
    largest_layer = std::max(largest_layer, layer);
  }
  StepMemory s;
  s.parameters = kFloatBytes * kCopiesPerParameter * parameters;
  s.embeddings = kFloatBytes * kCopiesPerParameter * embeddings;
  // Backward holds a layer's input and output gradients and its kernels' scratch beside what
  // is saved: two layers' worth matched the measured peaks (one fell short at long blocks).
  s.activations = kFloatBytes * tokens * (per_token + 2 * largest_layer);
  s.mla_activations = kFloatBytes * tokens * mla_per_token;
  s.logits = kFloatBytes * tokens * 2 * vocab;
  s.runtime = resident_bytes() + kStartupBytes;
  return s;
}

void check_step_memory(const Config& config, const StepMemory& estimate, int64_t vocab_size, double physical_bytes) {
  if (estimate.total() <= 0.9 * physical_bytes) return;
  const ModelConfig& m = config.model;
  const auto key = [](const std::string& name, int64_t value) { return name + " (" + std::to_string(value) + ")"; };
  std::vector<std::string> keys;
  const auto add = [&keys](const std::string& k) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  };
  // A part counts when it holds at least a quarter of the estimate.
  const double large = estimate.total() / 4;
  if (estimate.activations >= large || estimate.logits >= large) {
    add(key("data.block_size", config.data.block_size));
    add(key("train.batch_size", config.train.batch_size));
  }
  // Of the parameters, the embeddings grow with the vocabulary, the layers with the width.
  const bool large_embeddings = estimate.parameters >= large && estimate.embeddings >= estimate.parameters / 4;
  const bool large_layers = estimate.parameters >= large &&
                            estimate.parameters - estimate.embeddings >= estimate.parameters / 4;
  if (estimate.logits >= large || large_embeddings)
    add(key("model.vocab_size", m.vocab_size > 0 ? m.vocab_size : vocab_size));
  if (estimate.activations >= large || large_layers) {
    add(key("model.d_model", m.d_model));
    add(key("model.n_layers", m.n_layers));
  }
  // The mla layers' own sizes, where their attention saves a quarter of the activations: the
  // keys that each grow a quarter of what one mla layer saves.
  if (estimate.activations >= large && estimate.mla_activations >= estimate.activations / 4) {
    const MlaActivations a = mla_activations(m, widths_of(m));
    const MlaConfig& o = m.mla;
    for (const auto& [name, part, value] :
         {std::tuple{"model.mla.kv_lora_rank", a.kv_lora_rank, o.kv_lora_rank},
          std::tuple{"model.mla.qk_nope_head_dim", a.qk_nope_head_dim, o.qk_nope_head_dim},
          std::tuple{"model.mla.qk_rope_head_dim", a.qk_rope_head_dim, o.qk_rope_head_dim},
          std::tuple{"model.mla.v_head_dim", a.v_head_dim, o.v_head_dim},
          std::tuple{"model.mla.q_lora_rank", a.q_lora_rank, o.q_lora_rank}})
      if (part >= a.total() / 4) add(key(name, value));
  }
  std::string named;
  for (size_t i = 0; i < keys.size(); ++i) named += (i == 0 ? "" : i + 1 == keys.size() ? " or " : ", ") + keys[i];
  throw ConfigError("train: one training step needs about " + gib(estimate.total()) + " (parameters, gradients and " +
                    "optimizer moments " + gib(estimate.parameters) + ", activations saved for backward " +
                    gib(estimate.activations) + ", logits " + gib(estimate.logits) + "), more than 90% of this " +
                    "machine's memory (" + gib(physical_bytes) + "): make " + named + " smaller");
}

}  // namespace lat
