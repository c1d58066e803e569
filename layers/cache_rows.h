// The growing per-token buffers of the attention layers' generation caches (the attn layer's
// keys and values, the mla layer's latents and shared key part).
#pragma once
#include <cstdint>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// Appends the T rows of each rows[i] [B, T, ...] (f32, CPU) to buffers[i] [B, capacity, ...]
/// at rows [length, length + T) and advances length; the buffers share length and capacity,
/// and each may have its own row width. When they are full, rows no longer visible through a
/// sliding window of window_size tokens (0 = none) are dropped first (the next query sees the
/// last window_size - 1 rows before it), and then the capacity doubles: amortized O(1) per
/// token. An undefined buffer is allocated on first use.
void append_cache_rows(const std::vector<Tensor*>& buffers, const std::vector<Tensor>& rows, int64_t& length,
                       int64_t window_size);

}  // namespace lat
