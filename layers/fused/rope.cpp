// RoPE forward and backward: one rotation kernel, run with +angle forward and -angle
// backward (a rotation's transpose is its inverse); the unrotated tail of a partial rotary
// head is copied through both ways (its Jacobian is the identity).
#include "layers/fused/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "lat/tape.h"
#include "layers/cu_seqlens.h"
#ifdef LAT_WITH_CUDA
#include "layers/fused/rope_cuda.h"
#endif

namespace lat {
namespace {

// dst[b, t, h, :R] = src[b, t, h, :R] rotated by sign * angle(position_offset + t - start[t], i)
// (start: the first token of t's sequence, or null for 0); dst[b, t, h, R:] = src[b, t, h, R:].
template <class S>
void rotate(const S* src, S* dst, int64_t B, int64_t T, int64_t H, int64_t D, int64_t R, double theta,
            int64_t position_offset, const int64_t* start, double sign) {
  const int64_t half = R / 2;
  // cos/sin table [T, half], shared by every batch row and head.
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(R));
  std::vector<S> cos_table(static_cast<size_t>(T * half)), sin_table(static_cast<size_t>(T * half));
#pragma omp parallel for if (T * half > 4096)
  for (int64_t t = 0; t < T; ++t) {
    double position = static_cast<double>(position_offset + t - (start ? start[t] : 0));
    for (int64_t i = 0; i < half; ++i) {
      double angle = position * inv_freq[i];
      cos_table[t * half + i] = static_cast<S>(std::cos(angle));
      sin_table[t * half + i] = static_cast<S>(sign * std::sin(angle));
    }
  }
#pragma omp parallel for if (B * T * H * D > 32768)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const S* c = cos_table.data() + (bt % T) * half;
    const S* s = sin_table.data() + (bt % T) * half;
    for (int64_t h = 0; h < H; ++h) {
      const S* x = src + (bt * H + h) * D;
      S* y = dst + (bt * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        S x1 = x[i], x2 = x[i + half];
        y[i] = x1 * c[i] - x2 * s[i];
        y[i + half] = x2 * c[i] + x1 * s[i];
      }
      std::copy(x + R, x + D, y + R);
    }
  }
}

// starts: i64 [T] on x's device (the first token of each token's sequence), or undefined.
Tensor rotate_tensor(const Tensor& x, int64_t rotary_dim, double theta, int64_t position_offset, const Tensor& starts,
                     double sign) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
  const int64_t* start = starts.defined() ? starts.data<int64_t>() : nullptr;
#ifdef LAT_WITH_CUDA
  if (x.device().is_cuda()) {
    rope_cuda::rotate(x.data<float>(), y.data<float>(), B, T, H, D, rotary_dim, theta, position_offset, start, sign,
                      x.device().index);
    return y;
  }
#endif
  if (x.dtype() == DType::f32)
    rotate(x.data<float>(), y.data<float>(), B, T, H, D, rotary_dim, theta, position_offset, start, sign);
  else
    rotate(x.data<double>(), y.data<double>(), B, T, H, D, rotary_dim, theta, position_offset, start, sign);
  return y;
}

}  // namespace

int64_t rotary_dim_of(int64_t head_dim, double rope_fraction) {
  return static_cast<int64_t>(static_cast<double>(head_dim) * rope_fraction);
}

Tensor rotary_embedding(const Tensor& x, double theta, int64_t position_offset, const Tensor& cu_seqlens,
                        std::optional<int64_t> rotary_dim) {
  LAT_CHECK(x.defined(), "rotary_embedding: x: undefined tensor");
  LAT_CHECK(x.dim() == 4, "rotary_embedding: x: expected shape [B, T, H, D], got " << shape_str(x.shape()));
  const int64_t D = x.size(3);
  if (rotary_dim)
    LAT_CHECK(*rotary_dim >= 2 && *rotary_dim <= D && *rotary_dim % 2 == 0,
              "rotary_embedding: rotary_dim: expected an even size in [2, D = " << D << "], got " << *rotary_dim);
  else
    LAT_CHECK(D % 2 == 0, "rotary_embedding: x: expected an even head dim D, got " << D);
  const int64_t R = rotary_dim.value_or(D);
  LAT_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64,
            "rotary_embedding: x: expected f32 or f64, got " << dtype_name(x.dtype()));
  LAT_CHECK(x.device().is_cpu() || (cuda_built() && x.dtype() == DType::f32),
            "rotary_embedding: x: expected a CPU tensor (or f32 on CUDA), got " << dtype_name(x.dtype()) << " on "
                                                                                << x.device().str());
  LAT_CHECK(theta > 0, "rotary_embedding: theta: expected a positive base, got " << theta);
  LAT_CHECK(position_offset >= 0, "rotary_embedding: position_offset: expected >= 0, got " << position_offset);

  Tensor starts;
  if (cu_seqlens.defined())
    starts = Tensor::from_vector(sequence_starts(read_cu_seqlens("rotary_embedding", cu_seqlens, x.size(0), x.size(1))),
                                 {x.size(1)})
                 .to(x.device());

  Tensor y = rotate_tensor(x, R, theta, position_offset, starts, 1.0);
  if (needs_grad({&x})) {
    record("rotary_embedding", {x}, {y}, [R, theta, position_offset, starts](const std::vector<Tensor>& grads) {
      return std::vector<Tensor>{rotate_tensor(grads[0], R, theta, position_offset, starts, -1.0)};
    });
  }
  return y;
}

}  // namespace lat
