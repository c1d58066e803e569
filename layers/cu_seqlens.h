// Packed batches (flash-linear-attention's varlen convention): a batch of one row holding N
// sequences back to back, described by cu_seqlens, the i64 offsets [N + 1] with
// 0 = c_0 < c_1 < ... < c_N = T; sequence n is tokens [c_n, c_{n+1}). Every op that mixes
// tokens (the linear-attention ops, the short convolution, RoPE, softmax attention) reads
// the offsets through read_cu_seqlens, so they all accept and reject the same tensors.
#pragma once
#include <cstdint>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// The offsets of cu_seqlens (defined) on the host (a CUDA tensor is copied once), checked
/// against a batch of B rows of T tokens. Throws lat::Error "op: cu_seqlens: expected ...,
/// got ..." for a dtype other than i64, a rank other than 1, fewer than 2 entries, B != 1,
/// c_0 != 0, c_{i+1} <= c_i (naming i) or c_N != T.
std::vector<int64_t> read_cu_seqlens(const char* op, const Tensor& cu_seqlens, int64_t B, int64_t T);

/// For each token t of [0, c_N): the first token c_n of its sequence (c_n <= t < c_{n+1}).
std::vector<int64_t> sequence_starts(const std::vector<int64_t>& offsets);

/// cu_seqlens over the B*T tokens of a [B, T] batch read row after row (as read_cu_seqlens
/// checks it with B = 1, T = B*T), with every row start b*T added as a boundary, so that
/// no sequence runs from one row into the next: an i64 [N' + 1] CPU tensor. The models
/// and mixers flatten their [B, T] inputs to one row with these offsets.
Tensor cu_seqlens_with_row_starts(const char* op, const Tensor& cu_seqlens, int64_t B, int64_t T);

}  // namespace lat
