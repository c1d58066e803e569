// The CPU kernels' data movement between the API layout [B, T, H, D] and chunks: whole
// arrays into and out of the per-head chunked layout [B*H, NT*C, D] (the delta rule's
// kernel), and single chunks gathered into and scattered out of a kernel's tiles (the
// decayed kernel). Letters as in common.h; D = 1 for [B, T, H] arrays (g, beta).
//
// The chunked layout stores, for each (b, h), the NT*C rows of one head contiguously:
// chunked row (b*H + h, t) = api[b, t, h, :], rows t in [T, NT*C) zero. Every per-chunk
// array then has one stride over the chunks n = (b*H + h)*NT + c.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace lat::linear_attention {

/// dst[0, n) = src[0, n), or zeros when src is null (an optional initial state or
/// final-state gradient).
void copy_or_zero(const float* src, int64_t n, float* dst);

/// One array to copy from the API layout into the chunked layout: api [B, T, H, D] is
/// read, chunked [B*H, NT*C, D] written (padding rows zeroed).
struct ToChunked {
  const float* api = nullptr;
  float* chunked = nullptr;
  int64_t D = 1;
};

/// One array to copy from the chunked layout back into the API layout: chunked is read,
/// api written (padding rows dropped).
struct FromChunked {
  const float* chunked = nullptr;
  float* api = nullptr;
  int64_t D = 1;
};

/// Every array api -> chunked, in one OpenMP pass over (b, h): one thread team for all of
/// an op's arrays.
void to_chunked(const std::vector<ToChunked>& arrays, int64_t B, int64_t T, int64_t H, int64_t C);

/// Every array chunked -> api, in one OpenMP pass over (b, h).
void from_chunked(const std::vector<FromChunked>& arrays, int64_t B, int64_t T, int64_t H, int64_t C);

/// One head bh = b*H + h of every array api -> chunked, on the calling thread: for a
/// kernel that copies a head in right before working on it, while its rows are in cache.
void head_to_chunked(std::span<const ToChunked> arrays, int64_t bh, int64_t T, int64_t H, int64_t C);

/// One head bh of every array chunked -> api, on the calling thread.
void head_from_chunked(std::span<const FromChunked> arrays, int64_t bh, int64_t T, int64_t H, int64_t C);

/// Chunk c (rows [c*C, c*C + C)) of head h of batch row b.
struct ChunkAt {
  int64_t b = 0, h = 0, c = 0;
};

/// One chunk of x [B, T, H, D]: copies its C rows into dst [C, D + ones_column]; with
/// ones_column, the extra last column is 1 on valid rows; rows t >= T are zero. For
/// kernels that walk blocks of chunks.
void gather_chunk(const float* x, int64_t T, int64_t H, int64_t D, int64_t C, const ChunkAt& at, float* dst,
                  bool ones_column = false);

/// The inverse of gather_chunk: the first D of the `cols` columns of src [C, cols] into
/// the valid rows of the chunk `at` of x [B, T, H, D].
void scatter_chunk(const float* src, int64_t cols, int64_t T, int64_t H, int64_t D, int64_t C, const ChunkAt& at,
                   float* x);

}  // namespace lat::linear_attention
