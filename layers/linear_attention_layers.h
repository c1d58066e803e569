// The linear-attention token mixers (model.layers kinds linear_attn, simple_gla, retention,
// delta_net, gdn), each built from the kernel ops of lat/linear_attention.h, and make_mixer,
// which builds any mixer kind (softmax "attn" included) from one MixerConfig.
//
// Letters: B batch, T tokens, H heads, K key head dim (head_dim), V value head dim
// (head_dim * expand_v), Hv value heads (gdn and delta_net: n_v_heads, a multiple of H; the
// others: H), G = Hv / H value heads per key head. Parametrization and parameter names follow
// flash-linear-attention's layers (fla/layers/{linear_attn,simple_gla,delta_net,
// gated_deltanet}.py), so exported weights map onto them; the parent model prefixes
// "layers.{i}.attn.".
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "layers/fused/short_conv.h"
#include "layers/linear.h"
#include "layers/mixer.h"
#include "layers/mla_options.h"
#include "layers/rms_norm.h"

namespace lat {

/// The Mamba-2 mixer's own sizes and options (DESIGN.md config: model.mamba.*): d_inner =
/// expand * d_model channels in H = d_inner / head_dim heads, B and C of d_state channels in
/// n_groups groups; time_step_limit clamps dt; dt_min, dt_max: the range dt_bias starts from.
struct Mamba2Options {
  int64_t d_state = 128;
  int64_t head_dim = 64;
  int64_t expand = 2;
  int64_t n_groups = 1;
  int64_t conv_size = 4;
  int64_t chunk_size = 64;
  bool conv_bias = true;
  bool proj_bias = false;
  std::array<double, 2> time_step_limit = {0.0, std::numeric_limits<double>::infinity()};
  double dt_min = 0.001;
  double dt_max = 0.1;
};

/// Sizes and options of any mixer (DESIGN.md config: model.*, model.attn.*, model.linear.*,
/// model.mamba.*).
struct MixerConfig {
  int64_t d_model = 128;
  int64_t n_heads = 4;
  int64_t head_dim = 0;   // 0 = d_model / n_heads; the key head dim K of the linear mixers
  double expand_v = 1.0;  // V = head_dim * expand_v (linear mixers); must give a whole number
  // softmax attention ("attn")
  int64_t attn_n_heads = 0;   // 0 = n_heads: the attention layers' own head count
  int64_t attn_head_dim = 0;  // 0 = head_dim: the attention layers' own head size
  int64_t n_kv_heads = 0;     // 0 = the attention head count
  int64_t window_size = 0;
  double rope_theta = 10000.0;
  bool output_gate = false;    // o_proj(attn * sigmoid(gate)), gate from q_proj's second half per head
  bool qk_norm = false;        // q_norm, k_norm: RMSNorm over head_dim before RoPE
  double rope_fraction = 1.0;  // RoPE on the first rotary_dim_of(head_dim, rope_fraction) dims
  // linear mixers
  std::string feature_map = "elu1";  // linear_attn: elu1 (elu + 1), relu, identity
  bool normalize = false;            // linear_attn: Katharopoulos' normalizer
  bool use_short_conv = true;        // causal depthwise conv + SiLU on q, k, v
  int64_t conv_size = 4;
  bool use_gate = true;  // swish output gate g_proj before o_proj
  int64_t chunk_size = 64;
  int64_t n_v_heads = 0;       // gdn, delta_net: value heads (0 = n_heads), a multiple of n_heads
  double norm_eps = 1e-6;      // o_norm (model.norm_eps)
  bool norm_zero_centered = false;  // q_norm, k_norm scale by 1 + weight (model.norm_zero_centered)
  double init_std = 0.02;      // every projection but o_proj
  double out_init_std = 0.02;  // o_proj (GPT-2: init_std / sqrt(2 n_layers))
  Mamba2Options mamba;         // mamba2
  MlaOptions mla;              // mla (its heads: attn_n_heads)
};

/// Generation state of a linear mixer: the recurrent state plus, with short convolutions,
/// the last conv_size - 1 inputs of each convolution. Made by LinearMixer::make_state.
struct LinearMixerState : MixerState {
  std::string kind;        // the mixer kind that made it
  int64_t batch = 0;
  Tensor recurrent_state;  // [B, Hv, K, V] f32 (V + 1 for normalized linear_attn)
  Tensor q_conv, k_conv, v_conv;  // [B, conv_size - 1, H*K | H*K | Hv*V]; undefined without short conv
};

/// Shared body of the linear mixers: config checks, the pieces every kind combines
/// (projections, short convolutions, Mamba-2 decay, beta, gated output norm) and the
/// forward/step plumbing. A kind implements run(); forward() is run without a state, step()
/// is run with one. Prompts in step() go through the chunk op when longer than chunk_size,
/// the fused recurrent op otherwise, and single tokens through the recurrent_step op, as
/// flash-linear-attention does.
class LinearMixer : public Mixer {
 public:
  /// x: [B, T, d_model] f32 -> [B, T, d_model], optionally packed (Mixer::forward: x is
  /// flattened to one row of B*T tokens whose sequences every op keeps apart). Throws
  /// lat::Error on a wrong shape or invalid cu_seqlens.
  Tensor forward(const Tensor& x, const Tensor& cu_seqlens = {}) const override;
  /// A LinearMixerState with zero recurrent and conv states for `batch` sequences, on the
  /// parameters' device.
  std::unique_ptr<MixerState> make_state(int64_t batch) const override;
  /// Continues the sequences of `state` (a LinearMixerState of this kind) by x [B, T, d_model].
  Tensor step(const Tensor& x, MixerState& state) const override;

  const std::string& kind() const { return kind_; }
  const MixerConfig& config() const { return config_; }
  int64_t key_dim() const { return config_.head_dim; }
  int64_t value_dim() const { return value_dim_; }
  /// Hv: config.n_heads, or config.n_v_heads for a kind with grouped value heads.
  int64_t value_heads() const { return value_heads_; }

 protected:
  /// Whether a kind may have more value heads than key heads (config.n_v_heads): gdn and
  /// delta_net group them (Qwen3.5's linear_num_value_heads); the others share H.
  enum class ValueHeads { shared, grouped };

  /// Checks and resolves the config (head_dim, V, Hv). Throws lat::Error for non-positive
  /// sizes, d_model not divisible by n_heads (without head_dim), head_dim * expand_v not a
  /// whole number, K or V above 256 (the kernels' limit), conv_size < 1, chunk_size < 1, or
  /// n_v_heads (when not 0) not a positive multiple of n_heads, or other than n_heads for a
  /// kind with shared heads.
  LinearMixer(std::string kind, const MixerConfig& config, ValueHeads value_heads = ValueHeads::shared);

  /// The mixer on x [B, T, d_model]; `state` is null in forward() (recorded on the tape) and
  /// the generation state in step() (run under NoGradGuard; updates the state). cu_seqlens:
  /// the packed sequences of x (B == 1, from forward()), or undefined; the short
  /// convolutions and the kernel op take it.
  virtual Tensor run(const Tensor& x, LinearMixerState* state, const Tensor& cu_seqlens) const = 0;
  /// Columns of the recurrent state: V, or V + 1 for normalized linear attention.
  virtual int64_t state_columns() const { return value_dim_; }

  // ---- registration, in flash-linear-attention's order -------------------------------
  /// q_proj [H*K, d_model], k_proj [H*K, d_model], v_proj [Hv*V, d_model].
  void add_qkv_proj(Generator& gen);
  /// a_proj [Hv, d_model], A_log [Hv], dt_bias [Hv], initialized as Mamba-2 (init_mamba2_decay).
  void add_mamba2_decay(Generator& gen);
  /// b_proj [Hv, d_model].
  void add_beta_proj(Generator& gen);
  /// q_conv1d [H*K], k_conv1d [H*K], v_conv1d [Hv*V] (when config.use_short_conv).
  void add_short_convs(Generator& gen);
  /// g_proj [Hv*V, d_model] (when config.use_gate) and o_norm [V].
  void add_output_norm(Generator& gen);
  /// o_proj [d_model, Hv*V].
  void add_o_proj(Generator& gen);

  // ---- forward pieces ------------------------------------------------------------
  /// The input projections of x [B, T, d_model]: q [B, T, H*K], k [B, T, H*K], v [B, T, Hv*V]
  /// and, where the kind has a_proj, b_proj, g_proj: a [B, T, Hv], b [B, T, Hv], g [B, T, Hv*V]
  /// (undefined otherwise).
  struct Projections {
    Tensor q, k, v, a, b, g;
  };
  /// All of x's projections as one tape node (fused_linear_forward).
  Projections project(const Tensor& x) const;
  struct QKV {
    Tensor q, k, v;  // [B, T, Hv, K], [B, T, Hv, K], [B, T, Hv, V]
  };
  /// What q, k and v go through in place of the short convolutions when a mixer has none:
  /// nothing (fla's LinearAttention and SimpleGLA) or SiLU (fla's DeltaNet and
  /// GatedDeltaNet).
  enum class WithoutConv { identity, silu };
  /// The projected q, k, v of `p` through the short convolutions (continuing the conv states
  /// of `state` when given; each packed sequence of cu_seqlens from zeros), or `without_conv`
  /// when config.use_short_conv is off; with G > 1, q and k are then repeated from H to Hv
  /// heads, key head j serving value heads j*G .. j*G + G - 1 (torch.repeat_interleave on the
  /// head axis, as transformers' Qwen3.5 does before the kernel).
  QKV conv_qkv(const Projections& p, LinearMixerState* state, WithoutConv without_conv, const Tensor& cu_seqlens) const;
  /// g [B, T, Hv] = -exp(A_log) * softplus(a + dt_bias) for a = x a_proj^T (Projections::a).
  Tensor mamba2_decay(const Tensor& a) const;
  /// mamba2_decay of x's own a_proj product, for the layers' log_decay(x).
  Tensor mamba2_log_decay(const Tensor& x) const;
  /// beta [B, T, Hv] = sigmoid(b) for b = x b_proj^T (Projections::b).
  Tensor beta(const Tensor& b) const;
  /// o [B, T, Hv, V] -> o_proj(o_norm(o) * silu(g)) for g = x g_proj^T (Projections::g);
  /// without the gate (g undefined): o_proj(o_norm(o)).
  Tensor gated_output(const Tensor& o, const Tensor& g) const;
  /// o [B, T, Hv, V] -> o_proj(o) [B, T, d_model].
  Tensor output(const Tensor& o) const;
  /// The kernel's default scale K^-0.5, for the recurrent_step ops.
  float scale() const;
  /// Which kernel runs T tokens: the chunk op in training and for prompts longer than
  /// chunk_size; otherwise (generation) the fused recurrent op for T > 1, recurrent_step for 1.
  bool use_chunk(int64_t T, const LinearMixerState* state) const;
  /// t [B, 1, ...] -> [B, ...] (a view), the per-token layout of the recurrent_step ops.
  static Tensor token(const Tensor& t);

  MixerConfig config_;  // head_dim resolved
  int64_t value_dim_ = 0;
  int64_t value_heads_ = 0;

 private:
  std::string kind_;
  Linear* q_proj_ = nullptr;
  Linear* k_proj_ = nullptr;
  Linear* v_proj_ = nullptr;
  Linear* a_proj_ = nullptr;
  Linear* b_proj_ = nullptr;
  Linear* g_proj_ = nullptr;
  Linear* o_proj_ = nullptr;
  ShortConvolution* q_conv1d_ = nullptr;
  ShortConvolution* k_conv1d_ = nullptr;
  ShortConvolution* v_conv1d_ = nullptr;
  RMSNorm* o_norm_ = nullptr;
  Tensor A_log_, dt_bias_;
};

/// "linear_attn": causal linear attention (Katharopoulos et al. 2020, sec. 3.2-3.4) with the
/// feature map phi (config.feature_map) on q and k, optional normalizer (config.normalize).
/// Parameters q_proj, k_proj, v_proj, o_proj.
class LinearAttention : public LinearMixer {
 public:
  /// Throws lat::Error for an unknown feature map (besides LinearMixer's checks).
  LinearAttention(const MixerConfig& config, Generator& gen);

 protected:
  Tensor run(const Tensor& x, LinearMixerState* state, const Tensor& cu_seqlens) const override;
  int64_t state_columns() const override;
};

/// "simple_gla" (Mamba-2-style decay: g_t = -exp(A_log) softplus(x_t a_proj^T + dt_bias), Dao &
/// Gu 2024) and "retention" (RetNet, Sun et al. 2023: fixed g_h = log(1 - 2^(-5-h))):
/// short convolutions, chunk_simple_gla, gated output RMSNorm, o_proj. Parameters q_proj,
/// k_proj, v_proj, [a_proj, A_log, dt_bias], [q_conv1d, k_conv1d, v_conv1d], [g_proj], o_norm,
/// o_proj.
class SimpleGLA : public LinearMixer {
 public:
  /// retention = true: the fixed RetNet decay, no a_proj / A_log / dt_bias.
  SimpleGLA(const MixerConfig& config, Generator& gen, bool retention = false);

  /// The log-decay g [B, T, H] (<= 0) this layer applies to x [B, T, d_model]. Throws
  /// lat::Error on a wrong shape.
  Tensor log_decay(const Tensor& x) const;

 protected:
  Tensor run(const Tensor& x, LinearMixerState* state, const Tensor& cu_seqlens) const override;

 private:
  bool retention_;
};

/// "delta_net" (DeltaNet, Schlag et al. 2021; Yang et al. 2024) and "gdn" (Gated DeltaNet, Yang
/// et al. 2025): short convolutions, L2-normalized q and k (inside the kernel,
/// use_qk_l2norm_in_kernel), beta = sigmoid(x b_proj^T), for gdn the Mamba-2 decay, chunk
/// (gated) delta rule, gated output RMSNorm, o_proj. Parameters q_proj, k_proj, v_proj,
/// b_proj, [a_proj, A_log, dt_bias], [q_conv1d, k_conv1d, v_conv1d], [g_proj], o_norm, o_proj.
/// With config.n_v_heads = Hv > H, each q/k head serves Hv / H value heads (grouped value
/// attention, Qwen3.5's GatedDeltaNet): v, beta, g, the state and the output have Hv heads.
class DeltaNet : public LinearMixer {
 public:
  DeltaNet(const MixerConfig& config, Generator& gen);

 protected:
  /// The state's decay: none (DeltaNet) or Mamba-2's data-dependent gate (GatedDeltaNet).
  enum class Decay { none, mamba2 };
  DeltaNet(const MixerConfig& config, Generator& gen, Decay decay);
  Tensor run(const Tensor& x, LinearMixerState* state, const Tensor& cu_seqlens) const override;

 private:
  bool gated_;
};

/// "gdn": DeltaNet with the Mamba-2 decay (see DeltaNet).
class GatedDeltaNet : public DeltaNet {
 public:
  GatedDeltaNet(const MixerConfig& config, Generator& gen);

  /// The log-decay g [B, T, H] (<= 0) this layer applies to x [B, T, d_model].
  Tensor log_decay(const Tensor& x) const { return mamba2_log_decay(x); }
};

/// Mamba-2's initialization of a decay's A_log and dt_bias (any shapes, each element drawn on
/// its own): A ~ U[1, 16], A_log = log A; dt log-uniform in [1e-3, 1e-1], at least 1e-4, and
/// dt_bias = softplus^-1(dt). gdn and simple_gla ([Hv] each) and kda (A_log [H], dt_bias [H*K]).
void init_mamba2_decay(Tensor& A_log, Tensor& dt_bias, Generator& gen);

/// The mixer of model.layers kind `kind`: attn, linear_attn, simple_gla, retention, delta_net,
/// gdn, mamba2. Throws lat::Error naming an unknown kind and listing the valid ones.
std::unique_ptr<Mixer> make_mixer(const std::string& kind, const MixerConfig& config, Generator& gen);

}  // namespace lat
