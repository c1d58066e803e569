// append_cache_rows (cache_rows.h): memmove within the buffer to drop, copy to a larger
// buffer to grow, memcpy to append.
#include "layers/cache_rows.h"

#include <algorithm>
#include <cstring>

#include "lat/error.h"

namespace lat {
namespace {

// Floats per token of t [B, T, ...].
int64_t row_width(const Tensor& t) { return t.numel() / std::max<int64_t>(1, t.size(0) * t.size(1)); }

}  // namespace

void append_cache_rows(const std::vector<Tensor*>& buffers, const std::vector<Tensor>& rows, int64_t& length,
                       int64_t window_size) {
  LAT_CHECK(buffers.size() == rows.size() && !rows.empty(),
            "append_cache_rows: expected one rows tensor per buffer, got " << rows.size() << " for " << buffers.size());
  const int64_t B = rows[0].size(0), T = rows[0].size(1);
  int64_t capacity = buffers[0]->defined() ? buffers[0]->size(1) : 0;
  if (length + T > capacity && window_size > 0) {
    // The next query (the sequence's next position) sees the keys after position -
    // window_size: the last window_size - 1 rows kept.
    const int64_t keep = std::min(length, window_size - 1);
    const int64_t drop = length - keep;
    if (drop > 0) {
      for (Tensor* t : buffers) {
        const int64_t row = row_width(*t);
        float* base = t->data<float>();
        for (int64_t b = 0; b < B; ++b) {
          float* batch_rows = base + b * capacity * row;
          std::memmove(batch_rows, batch_rows + drop * row, static_cast<size_t>(keep * row) * sizeof(float));
        }
      }
      length = keep;
    }
  }
  if (length + T > capacity) {
    const int64_t new_capacity = std::max({length + T, 2 * capacity, int64_t{16}});
    for (size_t i = 0; i < buffers.size(); ++i) {
      Tensor& t = *buffers[i];
      Shape shape = rows[i].shape();
      shape[1] = new_capacity;
      Tensor grown = Tensor::empty(shape);
      const int64_t row = row_width(rows[i]);
      for (int64_t b = 0; b < B && length > 0; ++b)
        std::memcpy(grown.data<float>() + b * new_capacity * row, t.data<float>() + b * capacity * row,
                    static_cast<size_t>(length * row) * sizeof(float));
      t = grown;
    }
    capacity = new_capacity;
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    const int64_t row = row_width(rows[i]);
    const size_t bytes = static_cast<size_t>(T * row) * sizeof(float);
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(buffers[i]->data<float>() + (b * capacity + length) * row, rows[i].data<float>() + b * T * row,
                  bytes);
  }
  length += T;
}

}  // namespace lat
