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

// cos and sin of position * theta^(-2i/R) for positions [0, positions) and i < R/2, row
// `position` at [position * R/2, ...), computed in float64 and rounded to S once.
template <class S>
struct AngleTable {
  double theta = 0;
  int64_t R = 0, positions = 0;
  std::vector<S> cos, sin;
};

// The table of (theta, R) covering positions [0, positions). Kept per thread across calls:
// training rotates the same positions in every step, forward and backward, and recomputing
// the sines and cosines took longer than the rotations. Grown (at least doubled) when a call
// reaches later positions, as decoding does.
template <class S>
const AngleTable<S>& angle_table(double theta, int64_t R, int64_t positions) {
  thread_local std::vector<AngleTable<S>> tables;
  auto it = std::find_if(tables.begin(), tables.end(),
                         [&](const AngleTable<S>& t) { return t.theta == theta && t.R == R; });
  if (it == tables.end()) it = tables.insert(tables.end(), AngleTable<S>{theta, R, 0, {}, {}});
  AngleTable<S>& table = *it;
  if (table.positions >= positions) return table;
  const int64_t half = R / 2, grown = std::max(positions, 2 * table.positions);
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(R));
  table.cos.resize(static_cast<size_t>(grown * half));
  table.sin.resize(static_cast<size_t>(grown * half));
#pragma omp parallel for if ((grown - table.positions) * half > 4096)
  for (int64_t p = table.positions; p < grown; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[i];
      table.cos[p * half + i] = static_cast<S>(std::cos(angle));
      table.sin[p * half + i] = static_cast<S>(std::sin(angle));
    }
  table.positions = grown;
  return table;
}

// dst[b, t, h, :R] = src[b, t, h, :R] rotated by sign * angle(position_offset + t - start[t], i)
// (start: the first token of t's sequence, or null for 0); dst[b, t, h, R:] = src[b, t, h, R:].
template <class S>
void rotate(const S* src, S* dst, int64_t B, int64_t T, int64_t H, int64_t D, int64_t R, double theta,
            int64_t position_offset, const int64_t* start, double sign) {
  const int64_t half = R / 2;
  // Positions never exceed position_offset + T - 1 (start[t] >= 0).
  const AngleTable<S>& table = angle_table<S>(theta, R, position_offset + T);
  const bool inverse = sign < 0;
#pragma omp parallel for if (B * T * H * D > 32768)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t t = bt % T, position = position_offset + t - (start ? start[t] : 0);
    const S* c = table.cos.data() + position * half;
    const S* s = table.sin.data() + position * half;
    for (int64_t h = 0; h < H; ++h) {
      const S* x = src + (bt * H + h) * D;
      S* y = dst + (bt * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const S x1 = x[i], x2 = x[i + half], sn = inverse ? -s[i] : s[i];
        y[i] = x1 * c[i] - x2 * sn;
        y[i + half] = x2 * c[i] + x1 * sn;
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
