// Shared pieces of the linear-attention ops (layers/linear_attention/): argument checks
// for both op families, the backend choice, the default scale and the exp of the CPU
// kernels. Letters: B batch, T tokens, H heads, K key dim, V value dim, C chunk size,
// NT = ceil(T / C) chunks.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "autograd/cpu/fast_exp.h"
#include "lat/tensor.h"

namespace lat::linear_attention {

/// Sizes of one call, taken from q [B, T, Hk, K] and v [B, T, H, V]: Hk == H unless the
/// op takes grouped q/k heads (QkHeads::grouped).
struct Dims {
  int64_t B = 0, T = 0, H = 0, K = 0, V = 0;
  int64_t Hk = 0;
};

/// Whether an op's q and k must have v's H heads (same) or may have Hk heads with Hk
/// dividing H (grouped: v head h reads q/k head h / (H / Hk), as repeat_interleave of q
/// and k to H heads would; the decayed family).
enum class QkHeads { same, grouped };

/// Largest K and V the ops accept (the delta-rule state kernels use 64-wide K slabs,
/// ALGORITHMS.md 2.6; all four ops share the limit so layers can swap ops freely).
inline constexpr int64_t kMaxHeadDim = 256;

/// The dtypes an op accepts: f32 (the kernels), or f32 and f64 (the float64 references).
enum class Dtypes { f32, f32_or_f64 };

/// Checks q, k [B, T, H, K] and v [B, T, H, V]: defined, rank 4, same device, q and k
/// the same shape, v sharing B, T, H, T >= 1, B, H >= 1, K and V in 1..256, a dtype of
/// `dtypes`, all the same. With QkHeads::grouped, q and k may have Hk heads, Hk dividing
/// v's H. Throws lat::Error naming `op`.
Dims check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, Dtypes dtypes = Dtypes::f32,
               QkHeads qk_heads = QkHeads::same);

/// Checks that an input the op requires, though its type allows it absent (g of the gated
/// ops), is defined: "op: arg: expected a tensor LAYOUT, got an undefined tensor".
void check_defined(const char* op, const char* arg, const Tensor& t, const char* layout);

/// Checks a log-decay g [B, T, H]: same dtype and device as q, every value <= 0 (the
/// error names the first offending value and its [b, t, h]; NaN is rejected too).
void check_g(const char* op, const Tensor& g, const Tensor& q, const Dims& d);

/// Checks a per-key-channel log-decay g [B, T, H, K] (KDA) as check_g does.
void check_g_per_key(const char* op, const Tensor& g, const Tensor& q, const Dims& d);

/// Checks beta [B, T, H]: same dtype and device as q, every value in [0, 1].
void check_beta(const char* op, const Tensor& beta, const Tensor& q, const Dims& d);

/// What one kernel call covers: tokens [t0, t1) of every batch row, from initial state n
/// and into final state n. A call without cu_seqlens is one span, the whole batch (n = 0,
/// t0 = 0, t1 = T, all B rows); a packed call (B == 1) is one span per sequence.
struct Span {
  int64_t n = 0, t0 = 0, t1 = 0;
};

/// The spans of a call and the number of states it takes and returns: B without
/// cu_seqlens, N (one per sequence) with it.
struct Spans {
  std::vector<Span> spans;
  int64_t states = 0;
  bool packed = false;  // cu_seqlens given: states are [N, H, K, Vs]
};

/// The spans of a call of sizes d: the whole call when cu_seqlens is undefined, else one
/// per sequence of cu_seqlens (checked by read_cu_seqlens, layers/cu_seqlens.h: i64 [N + 1],
/// 0 = c_0 < ... < c_N = T, B == 1; lat::Error naming `op` and cu_seqlens otherwise).
Spans call_spans(const char* op, const Tensor& cu_seqlens, const Dims& d);

/// Checks an optional initial_state [states, H, K, state_v] (states = B, or N with
/// cu_seqlens; state_v = V, or V + 1 for the normalized linear attention): nothing when
/// undefined; else same dtype and device as q.
void check_initial_state(const char* op, const Tensor& initial_state, const Tensor& q, const Dims& d, int64_t state_v,
                         const Spans& spans);

/// Checks that q lives on the CPU (for ops with no device kernel yet).
void check_cpu(const char* op, const Tensor& q);

/// Largest chunk size of the CUDA chunk kernels (one 64-row tile per chunk, tile.cuh).
inline constexpr int kMaxCudaChunkSize = 64;

/// Checks chunk_size > 0, and at most kMaxCudaChunkSize when q is a CUDA tensor.
void check_chunk_size(const char* op, int chunk_size, const Tensor& q);

/// The rows of the chunks a call of T tokens runs: chunk_size, or fewer when the call is
/// shorter (T rounded up to a multiple of 16, never above chunk_size): a chunk larger than the
/// whole call would only multiply padding rows. The result is the same computation (the
/// padded rows are zero), in a multiple of 16 whenever chunk_size is one.
inline int chunk_rows(int chunk_size, int64_t T) {
  const int64_t rounded = (T + 15) / 16 * 16;
  return rounded < chunk_size ? static_cast<int>(rounded) : chunk_size;
}

/// Which kernels run an op's recurrence: chunkwise (chunk_*), or token by token
/// (fused_recurrent_*, CPU only but for KDA's).
enum class Form { chunk, fused_recurrent };

/// What a delta-rule or KDA tape node keeps of its `inputs` (q, k, v, g, beta and
/// initial_state, all on one device) for a backward whose kernel params point into them (the
/// tape keeps no intermediate alive): all of them, but for the CPU chunk kernels, which read
/// their own chunked copies and, of the inputs, `initial_state` only.
inline std::vector<Tensor> inputs_backward_reads(Form form, const std::vector<Tensor>& inputs,
                                                 const Tensor& initial_state) {
  const bool reads_copies = form == Form::chunk && inputs.front().device().is_cpu();
  return reads_copies ? std::vector<Tensor>{initial_state} : inputs;
}

/// p + n, or null when p is null (an absent optional input or unwanted gradient).
template <class T>
T* offset_or_null(T* p, int64_t n) {
  return p ? p + n : nullptr;
}

/// The tensor's f32 data, or null for an undefined tensor (an absent optional input).
const float* data_or_null(const Tensor& t);
float* data_or_null(Tensor& t);

/// Checks the arguments of a recurrent_step_*: q_t, k_t [B, H, K], v_t [B, H, V], state
/// [B, H, K, state_v(V)] (state_v_extra = 1 for the normalized form), all f32 on one
/// device, state defined; with QkHeads::grouped, q_t and k_t may have Hk heads dividing
/// v_t's H. Returns the sizes with T = 1.
Dims check_step(const char* op, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& state,
                int64_t state_v_extra = 0, QkHeads qk_heads = QkHeads::same);

/// Checks a per-step gate g_t [B, H] (values <= 0) or beta_t [B, H] (values in [0, 1]).
void check_step_g(const char* op, const Tensor& g_t, const Dims& d);
void check_step_beta(const char* op, const Tensor& beta_t, const Dims& d);
/// Checks a per-key-channel step gate g_t [B, H, K] (values <= 0).
void check_step_g_per_key(const char* op, const Tensor& g_t, const Dims& d);

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

/// t [B, T, H, K] -> [B, T, H*G, K], head j repeated as heads j*G .. j*G + G - 1
/// (torch.repeat_interleave on dim 2), on the tape: the backward sums each group's gradients
/// into its head. For kernels without grouped q/k heads (and layers calling them).
Tensor repeat_heads(const Tensor& t, int64_t G);

}  // namespace lat::linear_attention
