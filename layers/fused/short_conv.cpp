// Short convolution: forward, hand-written backward and the decoding step.
//
// Both passes view the input as the extended sequence xe = concat(initial_state, x) of
// T + W - 1 rows per batch item, so pre[t] = sum_w weight[w] * xe[t + w] and
//   dxe[s]     = sum_w weight[w] * dpre[s - w]    (0 <= s - w < T),
//   dweight[w] = sum_t dpre[t] * xe[t + w],
// with dx = dxe[W-1 ..] and d(initial_state) = dxe[.. W-1]. With packed sequences a pair
// (t, t + w) whose input lies before the start of t's sequence is left out of all three
// sums (ConvArgs::reads), so no gradient crosses a boundary either, whatever the lengths.
// The channel axis is innermost, so every inner loop runs over contiguous channels and
// vectorizes.
#include "layers/fused/short_conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "autograd/cpu/fast_exp.h"
#include "autograd/cpu/simd.h"
#include "lat/ops.h"
#include "lat/tape.h"
#include "layers/cu_seqlens.h"
#ifdef LAT_WITH_CUDA
#include "layers/fused/short_conv_cuda.h"
#endif

namespace lat {
namespace {

template <class S>
struct ConvArgs {
  const S* x;            // [B, T, D]
  const S* state;        // [B, W-1, D] or nullptr (zeros)
  const S* bias;         // [D] or nullptr (none)
  const int64_t* start;  // [T]: the first token of each token's sequence (B == 1), or nullptr
  std::vector<S> wt;     // weight transposed to [W, D]
  int64_t B, T, D, W;

  // Row s of the extended input of batch item b; nullptr for an all-zero row.
  const S* row(int64_t b, int64_t s) const {
    if (s >= W - 1) return x + (b * T + s - (W - 1)) * D;
    return state ? state + (b * (W - 1) + s) * D : nullptr;
  }
  // True when output t reads extended row t + k: always without sequences; with them, only
  // rows of t's own sequence (the tokens before its start act as zeros).
  bool reads(int64_t t, int64_t k) const { return start == nullptr || t + k - (W - 1) >= start[t]; }
  // The row output t reads at tap k, or nullptr for zeros.
  const S* input(int64_t b, int64_t t, int64_t k) const { return reads(t, k) ? row(b, t + k) : nullptr; }
};

template <class S>
ConvArgs<S> make_args(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& state,
                      const Tensor& starts) {
  ConvArgs<S> a{x.data<S>(),
                state.defined() ? state.data<S>() : nullptr,
                bias.defined() ? bias.data<S>() : nullptr,
                starts.defined() ? starts.data<int64_t>() : nullptr,
                {},
                x.size(0),
                x.size(1),
                x.size(2),
                weight.size(2)};
  const S* w = weight.data<S>();
  a.wt.resize(static_cast<size_t>(a.W * a.D));
  for (int64_t c = 0; c < a.D; ++c)
    for (int64_t k = 0; k < a.W; ++k) a.wt[k * a.D + c] = w[c * a.W + k];
  return a;
}

// Blocks of channels for the inner loops: one 64-byte vector (16 floats, 8 doubles; an
// AVX-512 register with -march=native, split into narrower ones elsewhere, through the
// compiler's vector extension) whose sums stay in a register across the taps or rows they
// run over, or a single channel for the tail; both kinds run the same multiply-adds in the
// same order.
using cpu::Simd;

// Loads a block value A (S itself or Simd<S>::V) from consecutive values of S. Through an
// output argument: a 64-byte vector returned by value would change the ABI (and warn) in a
// build without AVX-512.
template <class A, class S>
inline void load(A& v, const S* p) {
  std::memcpy(&v, p, sizeof(A));
}

// For the channels of one block A at c: out[c..] = sum over k of wt[k, c..] * rows[k][c..],
// k in order from 0, skipping null rows (zeros).
template <class A, class S>
inline void tap_sum_block(const S* const* rows, const S* wt, int64_t D, int64_t W, int64_t c, S* out) {
  A acc{}, w, x;
  for (int64_t k = 0; k < W; ++k) {
    if (rows[k] == nullptr) continue;
    load(w, wt + k * D + c);
    load(x, rows[k] + c);
    acc += w * x;
  }
  std::memcpy(out + c, &acc, sizeof(A));
}

// tap_sum_block over the channels [c0, c1) of the row `out`: whole vectors, then one channel
// at a time.
template <class S>
inline void tap_sum(const S* const* rows, const S* wt, int64_t D, int64_t W, int64_t c0, int64_t c1, S* out) {
  int64_t c = c0;
  for (; c + Simd<S>::L <= c1; c += Simd<S>::L) tap_sum_block<typename Simd<S>::V>(rows, wt, D, W, c, out);
  for (; c < c1; ++c) tap_sum_block<S>(rows, wt, D, W, c, out);
}

// The W rows output t of batch item b reads (null for zeros), tap k at rows[k].
template <class S>
void gather_inputs(const ConvArgs<S>& a, int64_t b, int64_t t, const S** rows) {
  for (int64_t k = 0; k < a.W; ++k) rows[k] = a.input(b, t, k);
}

// pre (before the SiLU) of row bt for the channels [c0, c1): the taps' sum plus the bias.
template <class S>
inline void pre_activation(const ConvArgs<S>& a, int64_t bt, int64_t c0, int64_t c1, const S** rows, S* out) {
  gather_inputs(a, bt / a.T, bt % a.T, rows);
  tap_sum(rows, a.wt.data(), a.D, a.W, c0, c1, out);
  if (a.bias != nullptr)
    for (int64_t c = c0; c < c1; ++c) out[c] += a.bias[c];
}

// y [B, T, D] = silu(pre).
template <class S>
void conv_forward(const ConvArgs<S>& a, S* y) {
#pragma omp parallel if (a.B * a.T * a.D > 32768)
  {
    std::vector<const S*> rows(static_cast<size_t>(a.W));
#pragma omp for
    for (int64_t bt = 0; bt < a.B * a.T; ++bt) {
      S* out = y + bt * a.D;
      pre_activation(a, bt, 0, a.D, rows.data(), out);
      for (int64_t c = 0; c < a.D; ++c) out[c] *= cpu::fast_sigmoid(out[c]);
    }
  }
}

// For the channels of NA blocks A at c, over the rows [r0, r1) in order from 0: dw[k, c..]
// = sum of dpre[row, c..] * (the row's input at tap k); k outermost so that the sums stay
// in registers across the rows.
template <class A, int NA, class S>
void dweight_blocks(const ConvArgs<S>& a, const S* dpre, int64_t r0, int64_t r1, int64_t c, S* dw) {
  constexpr int64_t n = static_cast<int64_t>(sizeof(A) / sizeof(S));  // channels per block
  for (int64_t k = 0; k < a.W; ++k) {
    A acc[NA] = {};
    for (int64_t bt = r0, b = r0 / a.T, t = r0 % a.T; bt < r1; ++bt) {
      const S* r = a.input(b, t, k);
      if (r != nullptr) {
        const S* d = dpre + bt * a.D;
        for (int i = 0; i < NA; ++i) {
          A dv, xv;
          load(dv, d + c + i * n);
          load(xv, r + c + i * n);
          acc[i] += dv * xv;
        }
      }
      if (++t == a.T) t = 0, ++b;
    }
    std::memcpy(dw + k * a.D + c, acc, sizeof(acc));
  }
}

// From dy [B, T, D]: dx [B, T, D], dweight [D, 1, W], dstate [B, W-1, D] and dbias [D]
// (nullptr when not wanted).
template <class S>
void conv_backward(const ConvArgs<S>& a, const S* dy, S* dx, S* dweight, S* dstate, S* dbias) {
  const int64_t B = a.B, T = a.T, D = a.D, W = a.W;
  // Each element of dpre is written before it is read, so the buffer starts uninitialized
  // (a std::vector would zero it in a pass of its own).
  const std::unique_ptr<S[]> dpre(new S[static_cast<size_t>(B * T * D)]);
  // dweight[w] = sum over the B * T rows of dpre * xe, in S. The rows are cut into two
  // halves (the first one row longer when B * T is odd; one part below the size where a
  // parallel loop pays), each half is summed in row order, and the halves are added in
  // order. That is the order two threads have always used; it is now the order for every
  // thread count, so 2-thread runs keep their bits and 1 or N threads give the same ones.
  // Threads split (half, block of channels); each first writes the block's dpre over its
  // rows, dpre = dy * silu'(pre), silu'(p) = s (1 + p (1 - s)) = s + y (1 - s) with
  // s = sigmoid(pre) and y = pre s recomputed from x by the forward's own functions (keeping
  // them would hold two [B, T, D] tensors per convolution from the forward to the backward),
  // then sums it while it is in cache.
  const int64_t rows = B * T, parts = B * T * D * W > 65536 ? 2 : 1, part_rows = (rows + parts - 1) / parts;
  using V = typename Simd<S>::V;
  constexpr int64_t kChannels = 8 * Simd<S>::L;
  const int64_t channel_blocks = (D + kChannels - 1) / kChannels;
  std::vector<S> partial(static_cast<size_t>(parts * W * D));
#pragma omp parallel for collapse(2) if (parts > 1)
  for (int64_t p = 0; p < parts; ++p)
    for (int64_t cb = 0; cb < channel_blocks; ++cb) {
      const int64_t c0 = cb * kChannels, c1 = std::min(D, c0 + kChannels);
      const int64_t r0 = p * part_rows, r1 = std::min(rows, (p + 1) * part_rows);
      std::vector<const S*> taps(static_cast<size_t>(W));
      for (int64_t bt = r0; bt < r1; ++bt) {
        S* d = dpre.get() + bt * D;
        const S* g = dy + bt * D;
        pre_activation(a, bt, c0, c1, taps.data(), d);  // pre, overwritten by dpre below
        for (int64_t c = c0; c < c1; ++c) {
          const S s = cpu::fast_sigmoid(d[c]), y = d[c] * s;
          d[c] = g[c] * (s + y * (S(1) - s));
        }
      }
      S* dw = partial.data() + p * W * D;
      int64_t c = c0;
      for (; c + kChannels <= c1; c += kChannels) dweight_blocks<V, 8>(a, dpre.get(), r0, r1, c, dw);
      for (; c + Simd<S>::L <= c1; c += Simd<S>::L) dweight_blocks<V, 1>(a, dpre.get(), r0, r1, c, dw);
      for (; c < c1; ++c) dweight_blocks<S, 1>(a, dpre.get(), r0, r1, c, dw);
    }
  std::vector<S> dwt(static_cast<size_t>(W * D), S(0));
  for (int64_t p = 0; p < parts; ++p)
    for (int64_t i = 0; i < W * D; ++i) dwt[i] += partial[p * W * D + i];
  for (int64_t c = 0; c < D; ++c)
    for (int64_t k = 0; k < W; ++k) dweight[c * W + k] = dwt[k * D + c];
  // dbias = sum over the B * T rows of dpre, in row order.
  if (dbias != nullptr) {
    std::fill(dbias, dbias + D, S(0));
    for (int64_t bt = 0; bt < rows; ++bt)
      for (int64_t c = 0; c < D; ++c) dbias[c] += dpre[bt * D + c];
  }
  // dxe[b, s] = sum_w wt[w] * dpre[b, s - w]: the same tap sum with the rows of dpre, tap
  // k reading row s - k.
  const int64_t TE = T + W - 1;
#pragma omp parallel if (B * TE * D * W > 65536)
  {
    std::vector<const S*> in(static_cast<size_t>(W));
#pragma omp for
    for (int64_t bs = 0; bs < B * TE; ++bs) {
      const int64_t b = bs / TE, s = bs % TE;
      S* out = s >= W - 1 ? dx + (b * T + s - (W - 1)) * D : (dstate ? dstate + (b * (W - 1) + s) * D : nullptr);
      if (out == nullptr) continue;
      for (int64_t k = 0; k < W; ++k) {
        const int64_t t = s - k;
        in[k] = t >= 0 && t < T && a.reads(t, k) ? dpre.get() + (b * T + t) * D : nullptr;
      }
      tap_sum(in.data(), a.wt.data(), D, W, 0, D, out);
    }
  }
}

#ifdef LAT_WITH_CUDA
short_conv_cuda::Args cuda_args(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& state,
                                const Tensor& starts) {
  return {x.data<float>(),
          weight.data<float>(),
          bias.defined() ? bias.data<float>() : nullptr,
          state.defined() ? state.data<float>() : nullptr,
          starts.defined() ? starts.data<int64_t>() : nullptr,
          x.size(0),
          x.size(1),
          x.size(2),
          weight.size(2),
          x.device().index};
}
#endif

// starts: i64 [T] on x's device, the first token of each token's sequence, or undefined.
template <class S>
Tensor forward_typed(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& state,
                     const Tensor& starts) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
#ifdef LAT_WITH_CUDA
  if (x.device().is_cuda()) {
    short_conv_cuda::forward(cuda_args(x, weight, bias, state, starts), y.data<float>());
    return y;
  }
#endif
  conv_forward(make_args<S>(x, weight, bias, state, starts), y.data<S>());
  return y;
}

// The backward recomputes pre from x (on CUDA as well), so the node keeps the inputs only.
template <class S>
std::vector<Tensor> backward_typed(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& state,
                                   const Tensor& starts, const Tensor& dy) {
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor dweight = Tensor::empty(weight.shape(), weight.dtype(), weight.device());
  Tensor dstate = state.defined() ? Tensor::empty(state.shape(), state.dtype(), state.device()) : Tensor();
  Tensor dbias = bias.defined() ? Tensor::empty(bias.shape(), bias.dtype(), bias.device()) : Tensor();
#ifdef LAT_WITH_CUDA
  if (x.device().is_cuda()) {
    short_conv_cuda::backward(cuda_args(x, weight, bias, state, starts), dy.data<float>(), dx.data<float>(),
                              dweight.data<float>(), dstate.defined() ? dstate.data<float>() : nullptr,
                              dbias.defined() ? dbias.data<float>() : nullptr);
    return {dx, dweight, dstate, dbias};
  }
#endif
  conv_backward(make_args<S>(x, weight, bias, state, starts), dy.data<S>(), dx.data<S>(), dweight.data<S>(),
                dstate.defined() ? dstate.data<S>() : nullptr, dbias.defined() ? dbias.data<S>() : nullptr);
  return {dx, dweight, dstate, dbias};
}

void check_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& state, const Tensor& bias) {
  LAT_CHECK(x.defined() && weight.defined(), op << ": x and weight must be defined");
  LAT_CHECK(x.dim() == 3, op << ": x: expected shape [B, T, D], got " << shape_str(x.shape()));
  int64_t D = x.size(2);
  LAT_CHECK(weight.dim() == 3 && weight.size(0) == D && weight.size(1) == 1 && weight.size(2) >= 1,
            op << ": weight: expected shape [" << D << ", 1, W] with W >= 1, got " << shape_str(weight.shape()));
  LAT_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64,
            op << ": x: expected f32 or f64, got " << dtype_name(x.dtype()));
  LAT_CHECK(weight.dtype() == x.dtype(),
            op << ": weight: expected " << dtype_name(x.dtype()) << ", got " << dtype_name(weight.dtype()));
  LAT_CHECK(weight.device() == x.device(), op << ": weight: expected device " << x.device().str() << ", got "
                                                << weight.device().str());
  LAT_CHECK(x.device().is_cpu() || (cuda_built() && x.dtype() == DType::f32),
            op << ": x: expected a CPU tensor (or f32 on CUDA), got " << dtype_name(x.dtype()) << " on "
               << x.device().str());
  if (bias.defined())
    LAT_CHECK(bias.shape() == Shape({D}) && bias.dtype() == x.dtype() && bias.device() == x.device(),
              op << ": bias: expected " << dtype_name(x.dtype()) << " [" << D << "] on " << x.device().str() << ", got "
                 << dtype_name(bias.dtype()) << " " << shape_str(bias.shape()) << " on " << bias.device().str());
  if (state.defined()) {
    Shape expected{x.size(0), weight.size(2) - 1, D};
    LAT_CHECK(state.shape() == expected, op << ": conv state: expected shape " << shape_str(expected) << ", got "
                                            << shape_str(state.shape()));
    LAT_CHECK(state.dtype() == x.dtype(),
              op << ": conv state: expected " << dtype_name(x.dtype()) << ", got " << dtype_name(state.dtype()));
    LAT_CHECK(state.device() == x.device(), op << ": conv state: expected device " << x.device().str() << ", got "
                                               << state.device().str());
  }
}

}  // namespace

Tensor short_conv(const Tensor& x, const Tensor& weight, const Tensor& initial_state, const Tensor& cu_seqlens,
                  const Tensor& bias) {
  const char* op = "short_conv";
  check_args(op, x, weight, initial_state, bias);
  Tensor starts;
  if (cu_seqlens.defined()) {
    const std::vector<int64_t> offsets = read_cu_seqlens(op, cu_seqlens, x.size(0), x.size(1));
    LAT_CHECK(!initial_state.defined(), op << ": initial_state: expected none with cu_seqlens (every sequence starts "
                                              "from zeros), got "
                                           << shape_str(initial_state.shape()));
    const std::vector<int64_t> first = sequence_starts(offsets);
    starts = Tensor::from_vector(first, {x.size(1)}).to(x.device());
  }
  const Tensor y = x.dtype() == DType::f32 ? forward_typed<float>(x, weight, bias, initial_state, starts)
                                            : forward_typed<double>(x, weight, bias, initial_state, starts);
  if (needs_grad({&x, &weight, &initial_state, &bias})) {
    record(op, {x, weight, initial_state, bias}, {y},
           [x, weight, bias, initial_state, starts](const std::vector<Tensor>& g) {
             return x.dtype() == DType::f32 ? backward_typed<float>(x, weight, bias, initial_state, starts, g[0])
                                            : backward_typed<double>(x, weight, bias, initial_state, starts, g[0]);
           });
  }
  return y;
}

Tensor short_conv_step(const Tensor& x_t, const Tensor& weight, Tensor& conv_state, const Tensor& bias) {
  LAT_CHECK(conv_state.defined(), "short_conv_step: conv_state: undefined tensor");
  check_args("short_conv_step", x_t, weight, conv_state, bias);
  LAT_CHECK(x_t.size(1) == 1, "short_conv_step: x_t: expected one token [B, 1, D], got " << shape_str(x_t.shape()));
  NoGradGuard no_grad;
  Tensor y = short_conv(x_t, weight, conv_state, {}, bias);
  conv_state.copy_(short_conv_final_state(x_t, weight.size(2), conv_state));
  return y;
}

Tensor short_conv_final_state(const Tensor& x, int64_t conv_size, const Tensor& initial_state) {
  LAT_CHECK(x.defined() && x.dim() == 3,
            "short_conv_final_state: x: expected shape [B, T, D], got " << (x.defined() ? shape_str(x.shape()) : "undefined"));
  LAT_CHECK(conv_size >= 1, "short_conv_final_state: conv_size: expected >= 1, got " << conv_size);
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), K = conv_size - 1;
  if (initial_state.defined())
    LAT_CHECK(initial_state.shape() == Shape({B, K, D}) && initial_state.dtype() == x.dtype() &&
                  initial_state.device() == x.device(),
              "short_conv_final_state: initial_state: expected " << dtype_name(x.dtype()) << " "
                                                                 << shape_str({B, K, D}) << " on " << x.device().str()
                                                                 << ", got " << dtype_name(initial_state.dtype()) << " "
                                                                 << shape_str(initial_state.shape()) << " on "
                                                                 << initial_state.device().str());
  if (!x.device().is_cpu()) {
    // On a GPU the same rows through the device copies of concat and slice (a state of a few
    // rows per prompt or token; the CPU path below avoids the intermediate).
    NoGradGuard no_grad;
    if (K == 0) return Tensor::zeros({B, 0, D}, x.dtype(), x.device());
    const Tensor start = initial_state.defined() ? initial_state : Tensor::zeros({B, K, D}, x.dtype(), x.device());
    return slice(concat({start, x}, 1), 1, T, T + K);
  }
  Tensor state = Tensor::zeros({B, K, D}, x.dtype());
  const size_t row_bytes = static_cast<size_t>(D) * dtype_size(x.dtype());
  auto* dst = static_cast<char*>(state.raw_data());
  const auto* xs = static_cast<const char*>(x.raw_data());
  const auto* is = initial_state.defined() ? static_cast<const char*>(initial_state.raw_data()) : nullptr;
  // Row k of the final state is row T + k of the extended input concat(initial_state, x).
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < K; ++k) {
      int64_t s = T + k;  // index into the extended sequence of T + K rows
      char* out = dst + (b * K + k) * row_bytes;
      if (s >= K)
        std::memcpy(out, xs + (b * T + s - K) * row_bytes, row_bytes);
      else if (is != nullptr)
        std::memcpy(out, is + (b * K + s) * row_bytes, row_bytes);
    }
  return state;
}

ShortConvolution::ShortConvolution(int64_t dim, int64_t conv_size, Generator& gen, ConvBias bias) {
  LAT_CHECK(dim > 0 && conv_size >= 1,
            "ShortConvolution: expected dim > 0 and conv_size >= 1, got " << dim << ", " << conv_size);
  double bound = 1.0 / std::sqrt(static_cast<double>(conv_size));
  weight_ = register_parameter("weight", Tensor::uniform({dim, 1, conv_size}, gen, -bound, bound));
  if (bias == ConvBias::with) bias_ = register_parameter("bias", Tensor::uniform({dim}, gen, -bound, bound));
}

Tensor ShortConvolution::forward(const Tensor& x, const Tensor& cu_seqlens) const {
  return short_conv(x, weight_, {}, cu_seqlens, bias_);
}

Tensor ShortConvolution::step(const Tensor& x_t, Tensor& conv_state) const {
  return short_conv_step(x_t, weight_, conv_state, bias_);
}

Tensor ShortConvolution::initial_state(int64_t batch) const {
  return Tensor::zeros({batch, conv_size() - 1, dim()});
}

}  // namespace lat
