// The Mamba-2 mixer ("mamba2" in model.layers): transformers' Mamba2Mixer and mamba_ssm's
// Mamba2 block (Dao & Gu 2024, "Transformers are SSMs", sec. 7-8), its SSD recurrence run as
// linear attention with a scalar per-head decay through chunk_simple_gla.
//
// Letters: B batch, T tokens, D d_model, I = d_inner = expand * D, H heads of P = head_dim
// channels (H * P = I), G groups of B and C with N = d_state channels each (the H / G heads of
// a group share them), W conv_size. The projection's outputs, in order:
//   in_proj(x) = [z (I) | xBC (I + 2 G N) | dt (H)],
//   xBC = silu(conv1d(xBC)) = [x (I) | B (G N) | C (G N)],
//   dt = clamp(softplus(dt + dt_bias), time_step_limit), A = -exp(A_log),
//   S_t = exp(A dt_t) S_{t-1} + dt_t B_t x_t^T  (per head: S [N, P]),  y_t = C_t^T S_t + D x_t,
//   out = out_proj(rmsnorm_G(y * silu(z)) * norm.weight)
// with rmsnorm_G the RMS norm over each group's I / G channels (norm_before_gate false).
// Parameter names and shapes are Mamba2Mixer's, so weights map one to one (conv1d.weight in
// lat's short_conv layout [I + 2 G N, 1, W], torch.nn.Conv1d's).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "layers/fused/short_conv.h"
#include "layers/linear.h"
#include "layers/linear_attention_layers.h"
#include "layers/mixer.h"
#include "layers/rms_norm.h"

namespace lat {

/// Generation state of a Mamba2 mixer: the last W - 1 inputs of the convolution and the SSM
/// state of every head. Made by Mamba2::make_state.
struct Mamba2State : MixerState {
  int64_t batch = 0;
  Tensor conv_state;  // [B, W - 1, I + 2 G N] f32; undefined for W = 1
  Tensor ssm_state;   // [B, H, N, P] f32
};

/// "mamba2": parameters in_proj.weight [2 I + 2 G N + H, D] (+ in_proj.bias with proj_bias),
/// conv1d.weight [I + 2 G N, 1, W] (+ conv1d.bias [I + 2 G N] with conv_bias), dt_bias [H],
/// A_log [H], D [H], norm.weight [I], out_proj.weight [D, I] (+ out_proj.bias). Initialized as
/// transformers' Mamba2Mixer and mamba_ssm: A_log = log(1 .. H), dt_bias = softplus^-1(dt) for
/// dt log-uniform in [dt_min, dt_max] (at least 1e-4), D = 1, norm.weight = 1; in_proj and
/// out_proj as lat's other projections (N(0, init_std^2), N(0, out_init_std^2)).
class Mamba2 : public Mixer {
 public:
  /// Throws lat::Error naming the option for non-positive sizes, head_dim not dividing
  /// expand * d_model, n_groups not dividing H, d_state or head_dim above 256 (the kernels'
  /// limit), dt_min > dt_max or not positive, or a time_step_limit other than 0 <= lo < hi.
  Mamba2(const MixerConfig& config, Generator& gen);

  /// x [B, T, d_model] -> [B, T, d_model]; with cu_seqlens the convolution and the SSM state
  /// restart at every packed sequence (Mixer::forward).
  Tensor forward(const Tensor& x, const Tensor& cu_seqlens = {}) const override;
  /// A Mamba2State of zeros for `batch` sequences, on the parameters' device.
  std::unique_ptr<MixerState> make_state(int64_t batch) const override;
  /// Continues the sequences of `state` (a Mamba2State) by x [B, T, d_model]: prompts longer
  /// than chunk_size through the chunk op, shorter ones through the fused recurrent op, single
  /// tokens through recurrent_step_simple_gla.
  Tensor step(const Tensor& x, MixerState& state) const override;

  int64_t inner_dim() const { return inner_dim_; }
  int64_t heads() const { return heads_; }
  /// Channels of the convolution: I + 2 G N.
  int64_t conv_dim() const { return inner_dim_ + 2 * options().n_groups * options().d_state; }
  const Mamba2Options& options() const { return config_.mamba; }

 private:
  /// The block on x [B, T, D]; `state` null in forward() (on the tape), the generation state in
  /// step(); cu_seqlens: packed sequences of a one-row x, or undefined.
  Tensor run(const Tensor& x, Mamba2State* state, const Tensor& cu_seqlens) const;
  /// in_proj's outputs, each [B, T, width]: z (I), x (I), B (G N), C (G N), dt (H).
  struct Parts {
    Tensor z, x, B, C, dt;
  };
  /// in_proj(x) part by part (one tape node: shared_input_linear over in_proj.weight's row
  /// blocks), so that no [B, T, ...] activation is split or concatenated.
  Parts project(const Tensor& x) const;
  /// silu(conv1d(.)) of x, B and C as three depthwise convolutions over conv1d's channel
  /// blocks, from zeros (forward()); cu_seqlens as short_conv's. Returns {x, B, C}.
  std::vector<Tensor> convolve(const Parts& parts, const Tensor& cu_seqlens) const;
  /// dt [B, T, H] = clamp(softplus(dt + dt_bias), time_step_limit).
  Tensor time_step(const Tensor& dt) const;
  /// rmsnorm over each group's I / G channels of y * silu(z) (y, z [B, T, I]), times norm.weight.
  Tensor gated_norm(const Tensor& y, const Tensor& z) const;

  MixerConfig config_;
  int64_t inner_dim_ = 0;
  int64_t heads_ = 0;
  Linear* in_proj_ = nullptr;
  ShortConvolution* conv1d_ = nullptr;
  RMSNorm* norm_ = nullptr;
  Linear* out_proj_ = nullptr;
  Tensor dt_bias_, A_log_, D_;
};

}  // namespace lat
