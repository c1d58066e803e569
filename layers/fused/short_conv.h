// Causal depthwise short convolution over time followed by SiLU, the "ShortConvolution" that
// the linear-attention layers apply to q, k and v (flash-linear-attention; H3, Fu et al. 2023).
//
// Letters: B batch, T tokens, D channels, W kernel size (conv_size).
// The weight is [D, 1, W], torch.nn.Conv1d's layout for groups = D, so exported weights map
// onto flash-linear-attention's `*_conv1d.weight`. Output at t reads inputs t-W+1 .. t:
//   y[b, t, c] = silu( sum_{w<W} weight[c, 0, w] * x[b, t - (W-1) + w, c] + bias[c] ),
// where positions before 0 come from the conv state (zeros when there is none), and with
// packed sequences positions before the start of t's sequence are zeros. The bias is optional
// (Mamba-2's conv1d has one; flash-linear-attention's short convolutions have none).
#pragma once
#include <cstdint>

#include "layers/module.h"

namespace lat {

/// The convolution op: x [B, T, D], weight [D, 1, W], optional initial_state [B, W-1, D]
/// (the W-1 inputs before x, oldest first; zeros when undefined), optional bias [D] (added
/// before the SiLU; none when undefined) -> y [B, T, D], same
/// dtype (f32 or f64, all alike). With cu_seqlens (i64 [N + 1], packed sequences of a
/// B == 1 batch, layers/cu_seqlens.h) no output reads a token of another sequence: each
/// sequence starts from zeros, however short (1 token included), and no initial_state is
/// taken. One tape node with a hand-written backward giving dx, dweight, d(initial_state)
/// and dbias; on the CPU a recorded call keeps y and sigmoid(pre) (both [B, T, D])
/// for it, which spares the backward the sigmoid, its costliest part. Throws lat::Error on
/// mismatched shapes, dtypes or devices, invalid cu_seqlens (read_cu_seqlens) or an
/// initial_state given with cu_seqlens.
Tensor short_conv(const Tensor& x, const Tensor& weight, const Tensor& initial_state = {},
                  const Tensor& cu_seqlens = {}, const Tensor& bias = {});

/// One decoding step: x_t [B, 1, D] -> y_t [B, 1, D], equal to short_conv's output for
/// that token given the previous W-1 inputs in `conv_state` [B, W-1, D]; then shifts x_t
/// into conv_state in place. Not recorded on the tape (generation only). bias as short_conv.
Tensor short_conv_step(const Tensor& x_t, const Tensor& weight, Tensor& conv_state, const Tensor& bias = {});

/// The conv state after x: the last W-1 rows of concat(initial_state, x) along time,
/// [B, W-1, D] (initial_state undefined = zeros), on x's device (CPU or CUDA). For prefill
/// before step-by-step decoding. Throws lat::Error for a shape, dtype or device mismatch.
Tensor short_conv_final_state(const Tensor& x, int64_t conv_size, const Tensor& initial_state = {});

/// Whether a ShortConvolution has a bias (Mamba-2's conv1d) or not (flash-linear-attention's).
enum class ConvBias { without, with };

/// Module with parameter `weight` [dim, 1, conv_size] and, with ConvBias::with, `bias` [dim],
/// both drawn as torch.nn.Conv1d does, U(-1/sqrt(conv_size), 1/sqrt(conv_size)).
class ShortConvolution : public Module {
 public:
  ShortConvolution(int64_t dim, int64_t conv_size, Generator& gen, ConvBias bias = ConvBias::without);

  /// x: [B, T, dim] -> [B, T, dim] (short_conv with zero initial state; with cu_seqlens,
  /// B == 1 and each packed sequence from zeros).
  Tensor forward(const Tensor& x, const Tensor& cu_seqlens = {}) const;
  /// x_t: [B, 1, dim] -> [B, 1, dim]; updates conv_state [B, conv_size-1, dim].
  Tensor step(const Tensor& x_t, Tensor& conv_state) const;
  /// A zero conv state [batch, conv_size-1, dim] (f32).
  Tensor initial_state(int64_t batch) const;

  int64_t dim() const { return weight_.size(0); }
  int64_t conv_size() const { return weight_.size(2); }
  const Tensor& weight() const { return weight_; }
  /// Undefined without a bias.
  const Tensor& bias() const { return bias_; }

 private:
  Tensor weight_, bias_;
};

}  // namespace lat
