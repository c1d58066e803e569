// Shared pieces of the linear-attention ops (layers/linear_attention/): argument checks
// for all four families, the default scale, and the re-layout between the API layout
// [B, T, H, D] and the per-head chunked layout [B*H, NT*C, D] that the CPU kernels use.
//
// Letters: B batch, T tokens, H heads, K key dim, V value dim, C chunk size,
// NT = ceil(T / C) chunks. The chunked layout stores, for each (b, h), the NT*C rows of
// one head contiguously (rows t >= T are zero), so every per-chunk product is one
// batched gemm with a single batch stride over (b, h, chunk).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "autograd/cpu/fast_exp.h"
#include "lat/tensor.h"

namespace lat::linear_attention {

/// Sizes of one call, taken from q [B, T, H, K] and v [B, T, H, V].
struct Dims {
  int64_t B = 0, T = 0, H = 0, K = 0, V = 0;
};

/// Largest K and V the ops accept (the delta-rule state kernels use 64-wide K slabs,
/// ALGORITHMS.md 2.6; all four ops share the limit so layers can swap ops freely).
inline constexpr int64_t kMaxHeadDim = 256;

/// Checks q, k [B, T, H, K] and v [B, T, H, V]: defined, rank 4, same device, q and k
/// the same shape, v sharing B, T, H, T >= 1, B, H >= 1, K and V in 1..256, dtype f32
/// (f32 or f64, all the same, when allow_f64). Throws lat::Error naming `op`.
Dims check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool allow_f64 = false);

/// Checks a log-decay g [B, T, H]: same dtype and device as q, every value <= 0 (the
/// error names the first offending value and its [b, t, h]; NaN is rejected too).
void check_g(const char* op, const Tensor& g, const Tensor& q, const Dims& d);

/// Checks beta [B, T, H]: same dtype and device as q, every value in [0, 1].
void check_beta(const char* op, const Tensor& beta, const Tensor& q, const Dims& d);

/// Checks an optional initial_state [B, H, K, state_v] (state_v = V, or V + 1 for the
/// normalized linear attention): nothing when undefined; else same dtype and device as q.
void check_initial_state(const char* op, const Tensor& initial_state, const Tensor& q, const Dims& d,
                         int64_t state_v);

/// Checks that q lives on the CPU (for ops with no device kernel yet).
void check_cpu(const char* op, const Tensor& q);

/// Checks chunk_size > 0.
void check_chunk_size(const char* op, int chunk_size);

/// Checks the arguments of a recurrent_step_*: q_t, k_t [B, H, K], v_t [B, H, V], state
/// [B, H, K, state_v(V)] (state_v_extra = 1 for the normalized form), all f32 on one
/// device, state defined. Returns the sizes with T = 1.
Dims check_step(const char* op, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& state,
                int64_t state_v_extra = 0);

/// Checks a per-step gate g_t [B, H] (values <= 0) or beta_t [B, H] (values in [0, 1]).
void check_step_g(const char* op, const Tensor& g_t, const Dims& d);
void check_step_beta(const char* op, const Tensor& beta_t, const Dims& d);

/// The scale of o_t = scale S_t^T q_t: the given value, or K^-0.5.
float resolve_scale(std::optional<float> scale, int64_t K);
double resolve_scale(std::optional<double> scale, int64_t K);

/// Number of chunks ceil(T / C).
inline int64_t num_chunks(int64_t T, int64_t C) { return (T + C - 1) / C; }

/// exp(x) for x <= 0: the branch-free float exp of autograd/cpu/fast_exp.h (within 1e-7
/// relative; 0 for results below 2^-125 and for -inf), so loops over it vectorize. Decay
/// factors are always exp of a non-positive number (ALGORITHMS.md 2.3, stability rules),
/// so this is the only exp the kernels need.
inline float exp_nonpositive(float x) { return cpu::fast_exp(x); }

/// dst[0, n) = src[0, n), or zeros when src is null (an optional initial state or final-state
/// gradient).
void copy_or_zero(const float* src, int64_t n, float* dst);

/// One array of an op in both layouts: api [B, T, H, D] (D = 1 for [B, T, H]) and chunked
/// [B*H, NT*C, D], chunked row (b*H + h, t) = api[b, t, h, :], rows t in [T, NT*C) zero.
/// to_chunked reads `api_in`, from_chunked writes `api_out`; `chunked` holds B*H*NT*C*D floats.
struct ChunkedArray {
  const float* api_in = nullptr;
  float* api_out = nullptr;
  float* chunked = nullptr;
  int64_t D = 1;
};

/// api -> chunked (zero padded) for every array, in one OpenMP pass over (b, h): one thread
/// team for all of an op's arrays.
void to_chunked(const std::vector<ChunkedArray>& arrays, int64_t B, int64_t T, int64_t H, int64_t C);

/// chunked -> api for every array (padding rows dropped), in one OpenMP pass over (b, h).
void from_chunked(const std::vector<ChunkedArray>& arrays, int64_t B, int64_t T, int64_t H, int64_t C);

/// One chunk n of the chunked order (n = (b*H + h)*NT + c): copies its C rows of
/// x [B, T, H, D] into dst [C, D + ones_column]; with ones_column, the extra last column
/// is 1 on valid rows; rows t >= T are zero. For kernels that walk blocks of chunks.
void gather_chunk(const float* x, int64_t T, int64_t H, int64_t D, int64_t C, int64_t n, float* dst,
                  bool ones_column = false);

/// The inverse of gather_chunk: the first D of the `cols` columns of src [C, cols] into
/// the valid rows of chunk n of x [B, T, H, D].
void scatter_chunk(const float* src, int64_t cols, int64_t T, int64_t H, int64_t D, int64_t C, int64_t n,
                   float* x);

}  // namespace lat::linear_attention
