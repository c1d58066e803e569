// Rotary position embedding (RoPE; Su et al. 2021, "RoFormer", sec. 3.4), applied to q and k
// of the softmax-attention layers.
#pragma once
#include <cstdint>
#include <optional>

#include "lat/tensor.h"

namespace lat {

/// The rotated width of a head of head_dim dimensions when RoPE covers the fraction
/// rope_fraction of it: floor(head_dim * rope_fraction), as transformers' partial_rotary_factor.
int64_t rotary_dim_of(int64_t head_dim, double rope_fraction);

/// Rotates the first rotary_dim dimensions of each head vector of x: [B, T, H, D] (f32 or
/// f64) by position-dependent angles, in the non-interleaved (GPT-NeoX, flash-linear-attention
/// default) layout, and passes dimensions [rotary_dim, D) through unchanged (partial rotary, as
/// transformers' partial_rotary_factor). With R = rotary_dim, for i < R/2 the pair
/// (x_i, x_{i+R/2}) at position p = position_offset + t turns by p * theta^(-2i/R):
///   y_i = x_i cos - x_{i+R/2} sin,   y_{i+R/2} = x_{i+R/2} cos + x_i sin.
/// rotary_dim defaults to D. Angles are computed in float64. position_offset is the position
/// of token 0 (the number of tokens before it when decoding). With cu_seqlens (i64 [N + 1],
/// packed sequences of a B == 1 batch, layers/cu_seqlens.h) positions restart at each
/// sequence: token t of sequence n is at p = position_offset + t - c_n. One tape node; the
/// backward is the inverse rotation. Throws lat::Error for a rank other than 4, an odd D
/// (without rotary_dim), a rotary_dim that is odd or outside [2, D], theta <= 0,
/// position_offset < 0, a non-CPU or non-float tensor, or invalid cu_seqlens.
Tensor rotary_embedding(const Tensor& x, double theta = 10000.0, int64_t position_offset = 0,
                        const Tensor& cu_seqlens = {}, std::optional<int64_t> rotary_dim = {});

}  // namespace lat
