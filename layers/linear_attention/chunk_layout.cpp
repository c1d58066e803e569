// The CPU kernels' data movement between layouts (see chunk_layout.h).
#include "layers/linear_attention/chunk_layout.h"

#include <algorithm>
#include <cstring>

#include "layers/linear_attention/common.h"

namespace lat::linear_attention {

void copy_or_zero(const float* src, int64_t n, float* dst) {
  if (src)
    std::memcpy(dst, src, n * sizeof(float));
  else
    std::fill(dst, dst + n, 0.0f);
}

namespace {

// Runs copy(array, offset of (b, h) in api, offset of (b, h) in chunked, T, H, padded rows)
// for every array of head bh = b*H + h.
template <class Array, class Copy>
void copy_head(std::span<const Array> arrays, int64_t bh, int64_t T, int64_t H, int64_t C, const Copy& copy) {
  const int64_t padded = num_chunks(T, C) * C, b = bh / H, h = bh % H;
  for (const Array& x : arrays) copy(x, (b * T * H + h) * x.D, bh * padded * x.D, T, H, padded);
}

// copy_head for every head, OpenMP over the heads when the arrays are large enough to share.
template <class Array, class Copy>
void for_each_head(const std::vector<Array>& arrays, int64_t B, int64_t T, int64_t H, int64_t C, const Copy& copy) {
  int64_t columns = 0;
  for (const Array& x : arrays) columns += x.D;
#pragma omp parallel for if (B * H * T * columns > (1 << 14))
  for (int64_t bh = 0; bh < B * H; ++bh) copy_head(std::span<const Array>(arrays), bh, T, H, C, copy);
}

// T rows of D floats from src (row stride ld_src) to dst (row stride ld_dst). A [B, T, H]
// array (D = 1) is a strided gather or scatter, not one memcpy call per float. (Rows of a
// head, D = K or V, stay memcpy calls: an inline loop of vector copies, each store waiting
// on its load from the strided API layout, measured slower than the library's
// loads-first copy.)
void copy_rows(const float* src, int64_t ld_src, float* dst, int64_t ld_dst, int64_t T, int64_t D) {
  if (D == 1)
    for (int64_t t = 0; t < T; ++t) dst[t * ld_dst] = src[t * ld_src];
  else
    for (int64_t t = 0; t < T; ++t) std::memcpy(dst + t * ld_dst, src + t * ld_src, D * sizeof(float));
}

// One array's head: T rows api -> chunked, the padding rows zeroed.
void copy_in(const ToChunked& x, int64_t api, int64_t chunked, int64_t T, int64_t H, int64_t padded) {
  float* out = x.chunked + chunked;
  copy_rows(x.api + api, H * x.D, out, x.D, T, x.D);
  std::memset(out + T * x.D, 0, (padded - T) * x.D * sizeof(float));
}

// One array's head: T rows chunked -> api.
void copy_out(const FromChunked& x, int64_t api, int64_t chunked, int64_t T, int64_t H, int64_t) {
  copy_rows(x.chunked + chunked, x.D, x.api + api, H * x.D, T, x.D);
}

}  // namespace

void to_chunked(const std::vector<ToChunked>& arrays, int64_t B, int64_t T, int64_t H, int64_t C) {
  for_each_head(arrays, B, T, H, C, copy_in);
}

void from_chunked(const std::vector<FromChunked>& arrays, int64_t B, int64_t T, int64_t H, int64_t C) {
  for_each_head(arrays, B, T, H, C, copy_out);
}

void head_to_chunked(std::span<const ToChunked> arrays, int64_t bh, int64_t T, int64_t H, int64_t C) {
  copy_head(arrays, bh, T, H, C, copy_in);
}

void head_from_chunked(std::span<const FromChunked> arrays, int64_t bh, int64_t T, int64_t H, int64_t C) {
  copy_head(arrays, bh, T, H, C, copy_out);
}

void gather_chunk(const float* x, int64_t T, int64_t H, int64_t D, int64_t C, const ChunkAt& at, float* dst,
                  bool ones_column) {
  int64_t cols = D + (ones_column ? 1 : 0);
  for (int64_t r = 0; r < C; ++r) {
    int64_t t = at.c * C + r;
    float* row = dst + r * cols;
    if (t < T) {
      std::memcpy(row, x + ((at.b * T + t) * H + at.h) * D, D * sizeof(float));
      if (ones_column) row[D] = 1.0f;
    } else {
      std::memset(row, 0, cols * sizeof(float));
    }
  }
}

void scatter_chunk(const float* src, int64_t cols, int64_t T, int64_t H, int64_t D, int64_t C, const ChunkAt& at,
                   float* x) {
  for (int64_t r = 0; r < C && at.c * C + r < T; ++r)
    std::memcpy(x + ((at.b * T + at.c * C + r) * H + at.h) * D, src + r * cols, D * sizeof(float));
}

}  // namespace lat::linear_attention
