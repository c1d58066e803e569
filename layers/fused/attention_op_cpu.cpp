// CPU kernels of the fused causal attention: FlashAttention's tiling (Dao et al. 2022,
// alg. 1 forward with the online softmax; the backward of FlashAttention-2, Dao 2023,
// alg. 2, one pass over the tile pairs of a kv head).
//
// Notation per (batch, head): S = scale * Q K^T (masked), P = softmax_rows(S),
// O = P V, lse_i = log sum_j exp(S_ij). Backward with dO:
//   delta_i = dO_i . O_i,  P_ij = exp(S_ij - lse_i),  dP = dO V^T,
//   dS_ij = P_ij (dP_ij - delta_i),  dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dO.
//
// Layout. A tile pair is kBr queries x kBc keys, and its scores are kept transposed,
// S^T [keys, queries]: then every product reads its operands as they lie in memory or in
// one copy per tile. The products are all out[r, :] (+)= sum_k a(r, k) b[k, :], with b read
// as whole rows of vectors and a broadcast one element at a time from any layout:
//   S^T = K (scale Q)^T      a = rows of K, b = (scale Q)^T (one transposed copy per query tile)
//   dP^T = V dO^T            a = rows of V, b = dO^T (the same)
//   O += P V, dQ += dS K     a = columns of P^T, dS^T; b = rows of V, K
//   dV += P^T dO, dK += dS^T Q   a = rows of P^T, dS^T; b = rows of dO, Q
// The softmax runs down the columns of S^T, a vector of queries at a time. Only tile pairs
// that cross the causal diagonal or the window's edge are masked, and their products leave
// out most of the invisible part (by_row_blocks).
//
// bf16 (Precision::bf16, AVX512-BF16): the same products with both operands rounded to bf16
// and fp32 accumulation (vdpbf16ps). An operand holds pairs of bf16 along the summed index in
// one 32-bit word, so each copy above is rounded once into that layout; the softmax, lse,
// delta and all sums stay fp32.
#include "layers/fused/attention_op_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/cpu/bf16.h"
#include "autograd/cpu/fast_exp.h"
#include "autograd/cpu/simd.h"

namespace lat::attention_cpu {
namespace {

constexpr int64_t kBr = 64;  // queries per tile
constexpr int64_t kBc = 64;  // keys per tile
// The backward splits a kv head's queries into spans until there are this many tasks (a
// constant, not the thread count, so that the sums' order does not depend on it).
constexpr int64_t kMinBackwardTasks = 16;
static_assert(kBr % 16 == 0 && kBc % 2 == 0, "tiles hold whole vectors of queries and whole pairs of keys");

// exp of the softmax arguments (<= 0 up to rounding): the branch-free Cephes exp, so the
// tile loops vectorize; -inf gives 0.
template <class S>
inline S softmax_exp(S x) {
  return cpu::fast_exp(x);
}

template <class S>
constexpr S neg_inf() {
  return -std::numeric_limits<S>::infinity();
}

using cpu::Simd;

// n rounded up to whole vectors: the width of a product's right operand and output.
template <class S>
int64_t padded(int64_t n) {
  return (n + Simd<S>::L - 1) / Simd<S>::L * Simd<S>::L;
}

enum class Update { overwrite, accumulate };

// ---- fp32 (and f64) products ----

// Left operand: element (r, k) at p[r * rs + k * ks], broadcast one at a time.
template <class S>
struct Lhs {
  const S* p;
  int64_t rs, ks;
  Lhs from_row(int64_t r) const { return {p + r * rs, rs, ks}; }
};

// Right operand: row k at p + k * ld, read as whole vectors (the product's width must be
// readable in every row it sums over).
template <class S>
struct Rhs {
  const S* p;
  int64_t ld;
};

// out[0:R, 0:NV L] (+)= sum_{k < K} a(r, k) b[k, 0:NV L]. R x NV accumulators stay in
// registers, so each loaded vector of b feeds R FMAs and each broadcast of a feeds NV.
template <class S, int NV, int R>
inline void micro_kernel(Lhs<S> a, const S* b, int64_t ldb, int64_t K, S* out, int64_t ldo, Update update) {
  using V = typename Simd<S>::V;
  constexpr int64_t L = Simd<S>::L;
  V acc[R][NV];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NV; ++j) {
      if (update == Update::accumulate)
        std::memcpy(&acc[i][j], out + i * ldo + j * L, sizeof(V));
      else
        acc[i][j] = V{};
    }
  for (int64_t k = 0; k < K; ++k) {
    V bv[NV];
    for (int j = 0; j < NV; ++j) {
      std::memcpy(&bv[j], b + k * ldb + j * L, sizeof(V));
#ifdef __AVX512F__
      // Keeps the vector in a register: GCC would otherwise fold a load of it into each of
      // the R FMAs, and with R = 4 the loads, not the FMAs, bound the loop (measured 160
      // against 215 GFLOP/s on a 64 x 64 x 32 tile).
      asm("" : "+v"(bv[j]));
#endif
    }
    for (int i = 0; i < R; ++i) {
      const S x = a.p[i * a.rs + k * a.ks];
      for (int j = 0; j < NV; ++j) acc[i][j] += x * bv[j];
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NV; ++j) std::memcpy(out + i * ldo + j * L, &acc[i][j], sizeof(V));
}

// Rows in passes of R, the rest in passes of R/2, R/4, ..., 1.
template <class S, int NV, int R>
void gemm_rows(Lhs<S> a, const S* b, int64_t ldb, int64_t K, int64_t rows, S* out, int64_t ldo, Update update) {
  int64_t r = 0;
  for (; r + R <= rows; r += R) micro_kernel<S, NV, R>(a.from_row(r), b, ldb, K, out + r * ldo, ldo, update);
  if constexpr (R > 1)
    if (r < rows) gemm_rows<S, NV, R / 2>(a.from_row(r), b, ldb, K, rows - r, out + r * ldo, ldo, update);
}

// out[r, 0:width] (+)= sum_{k < K} a(r, k) b[k, 0:width] for r < rows; width a multiple of
// the vector length. Columns in passes of 4 vectors x 4 rows (16 accumulators); a narrower
// rest in passes of more rows.
template <class S>
void gemm(Lhs<S> a, Rhs<S> b, int64_t K, int64_t rows, int64_t width, S* out, int64_t ldo, Update update) {
  constexpr int64_t L = Simd<S>::L;
  int64_t c = 0;
  for (; c + 4 * L <= width; c += 4 * L) gemm_rows<S, 4, 4>(a, b.p + c, b.ld, K, rows, out + c, ldo, update);
  switch ((width - c) / L) {
    case 3: gemm_rows<S, 3, 4>(a, b.p + c, b.ld, K, rows, out + c, ldo, update); break;
    case 2: gemm_rows<S, 2, 8>(a, b.p + c, b.ld, K, rows, out + c, ldo, update); break;
    case 1: gemm_rows<S, 1, 8>(a, b.p + c, b.ld, K, rows, out + c, ldo, update); break;
    default: break;
  }
}

// One step of an in-register transpose: lane j of the new x and y, taken from the blocks of
// b lanes of x (lanes 0..L-1) and y (lanes L..2L-1): x gets the even blocks of both, in turn,
// y the odd ones.
template <int64_t L, int64_t b>
constexpr int interleaved_lane(int64_t j, bool odd_blocks) {
  const int64_t base = j / (2 * b) * 2 * b + (odd_blocks ? b : 0), w = j % (2 * b);
  return static_cast<int>(w < b ? base + w : L + base + w - b);
}

template <class V, int64_t L, int64_t b, size_t... J>
inline void interleave_blocks(V& x, V& y, std::index_sequence<J...>) {
  const V even = __builtin_shufflevector(x, y, interleaved_lane<L, b>(J, false)...);
  const V odd = __builtin_shufflevector(x, y, interleaved_lane<L, b>(J, true)...);
  x = even;
  y = odd;
}

// Transposes the L x L block x[0..L-1] in place: log2(L) steps, the step of block size b
// interleaving rows i and i + b (the recursive 2 x 2 block transpose, all blocks at once).
template <class S, int64_t b>
inline void transpose_steps(typename Simd<S>::V* x) {
  constexpr int64_t L = Simd<S>::L;
  for (int64_t i = 0; i < L; ++i)
    if (i / b % 2 == 0) interleave_blocks<typename Simd<S>::V, L, b>(x[i], x[i + b], std::make_index_sequence<L>{});
  if constexpr (b > 1) transpose_steps<S, b / 2>(x);
}

// dst[c * ldd + r] = src[r * ld + c] * factor for r < rows, c < cols; 0 for rows <= r < ldd
// (a transposed tile). Whole L x L blocks through vector shuffles (8x fewer instructions
// than element by element), the edges one element at a time.
template <class S>
void load_transposed(const S* src, int64_t ld, int64_t rows, int64_t cols, S factor, S* dst, int64_t ldd) {
  using V = typename Simd<S>::V;
  constexpr int64_t L = Simd<S>::L;
  const int64_t whole_rows = rows / L * L, whole_cols = cols / L * L;
  for (int64_t r0 = 0; r0 < whole_rows; r0 += L)
    for (int64_t c0 = 0; c0 < whole_cols; c0 += L) {
      V x[L];
      for (int64_t i = 0; i < L; ++i) {
        std::memcpy(&x[i], src + (r0 + i) * ld + c0, sizeof(V));
        x[i] *= factor;
      }
      transpose_steps<S, L / 2>(x);
      for (int64_t i = 0; i < L; ++i) std::memcpy(dst + (c0 + i) * ldd + r0, &x[i], sizeof(V));
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < whole_rows ? whole_cols : 0; c < cols; ++c) dst[c * ldd + r] = src[r * ld + c] * factor;
  for (int64_t c = 0; c < cols; ++c) std::fill(dst + c * ldd + rows, dst + (c + 1) * ldd, S(0));
}

// The rows of src (row r at src + r * ld, cols of them read) as a right operand: in place
// when cols is a whole number of vectors, else copied into buf with zero padding.
template <class S>
Rhs<S> rhs_rows(const S* src, int64_t ld, int64_t rows, int64_t cols, std::vector<S>& buf) {
  const int64_t width = padded<S>(cols);
  if (width == cols) return {src, ld};
  buf.assign(static_cast<size_t>(rows * width), S(0));
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * ld, src + r * ld + cols, buf.data() + r * width);
  return {buf.data(), width};
}

// ---- bf16 products (AVX512-BF16; called only where cpu::has_avx512_bf16()) ----
//
// A bf16 operand holds pairs along the summed index k in one uint32: the left operand's
// pair (r, k') = (a(r, 2k'), a(r, 2k' + 1)) at p[r * rs + k' * ks]; the right operand's pair
// row k' = (b[2k', j], b[2k' + 1, j]) for each column j, at p + k' * ld. An odd count is
// completed by a zero.

// Compiled for AVX512-BF16 whatever the build's -march (so LAT_NATIVE=OFF builds keep it);
// reached only after the runtime check.
#define LAT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

struct Lhs16 {
  const uint32_t* p;
  int64_t rs, ks;
  Lhs16 from_row(int64_t r) const { return {p + r * rs, rs, ks}; }
};

struct Rhs16 {
  const uint32_t* p;
  int64_t ld;
};

// Pairs for a count of k.
inline int64_t pairs(int64_t k) { return (k + 1) / 2; }

// The first n of 16 lanes (n clamped to [0, 16]).
inline __mmask16 lanes(int64_t n) { return static_cast<__mmask16>((1u << std::clamp<int64_t>(n, 0, 16)) - 1u); }

// As micro_kernel, over K2 pairs: vdpbf16ps adds both products of a pair to a float lane.
template <int NV, int R>
LAT_BF16_TARGET inline void micro_kernel_bf16(Lhs16 a, const uint32_t* b, int64_t ldb, int64_t K2, float* out,
                                              int64_t ldo, Update update) {
  __m512 acc[R][NV];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NV; ++j)
      acc[i][j] = update == Update::accumulate ? _mm512_loadu_ps(out + i * ldo + 16 * j) : _mm512_setzero_ps();
  for (int64_t k = 0; k < K2; ++k) {
    __m512bh bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + k * ldb + 16 * j));
    for (int i = 0; i < R; ++i) {
      const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a.p[i * a.rs + k * a.ks])));
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], x, bv[j]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(out + i * ldo + 16 * j, acc[i][j]);
}

template <int NV, int R>
LAT_BF16_TARGET void gemm_rows_bf16(Lhs16 a, const uint32_t* b, int64_t ldb, int64_t K2, int64_t rows, float* out,
                                    int64_t ldo, Update update) {
  int64_t r = 0;
  for (; r + R <= rows; r += R) micro_kernel_bf16<NV, R>(a.from_row(r), b, ldb, K2, out + r * ldo, ldo, update);
  if constexpr (R > 1)
    if (r < rows) gemm_rows_bf16<NV, R / 2>(a.from_row(r), b, ldb, K2, rows - r, out + r * ldo, ldo, update);
}

// As gemm, over K2 pairs of the summed index; width a multiple of 16.
LAT_BF16_TARGET void gemm_bf16(Lhs16 a, Rhs16 b, int64_t K2, int64_t rows, int64_t width, float* out, int64_t ldo,
                               Update update) {
  int64_t c = 0;
  for (; c + 64 <= width; c += 64) gemm_rows_bf16<4, 4>(a, b.p + c, b.ld, K2, rows, out + c, ldo, update);
  switch ((width - c) / 16) {
    case 3: gemm_rows_bf16<3, 4>(a, b.p + c, b.ld, K2, rows, out + c, ldo, update); break;
    case 2: gemm_rows_bf16<2, 8>(a, b.p + c, b.ld, K2, rows, out + c, ldo, update); break;
    case 1: gemm_rows_bf16<1, 8>(a, b.p + c, b.ld, K2, rows, out + c, ldo, update); break;
    default: break;
  }
}

// src[r * ld + c] (r < rows, c < cols) rounded to bf16 (to nearest, ties to even, as
// cpu::float_to_bf16; float32 subnormals become 0), paired along each row:
// dst[r * ldd + k'] = (src[r][2k'], src[r][2k' + 1]) for k' < pairs(cols).
LAT_BF16_TARGET void round_rows(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  const int64_t halves = 2 * pairs(cols), whole = cols / 32 * 32;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * ld;
    uint32_t* out = dst + r * ldd;
    for (int64_t c = 0; c < whole; c += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + c + 16), _mm512_loadu_ps(x + c));
      _mm512_storeu_si512(out + c / 2, reinterpret_cast<__m512i>(v));
    }
    for (int64_t c = whole; c < halves; c += 16) {
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes(cols - c), x + c));
      _mm256_mask_storeu_epi16(out + c / 2, lanes(halves - c), reinterpret_cast<__m256i>(v));
    }
  }
}

// Rows of src paired, rounded to bf16: dst[k' * ldd + c] = (src[2k'][c], src[2k' + 1][c]) for
// k' < pairs(rows) and c < cols rounded up to 16; a missing row or column reads as 0.
LAT_BF16_TARGET void round_row_pairs(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst,
                                     int64_t ldd) {
  // vcvtne2ps2bf16 puts its second operand's 16 values in the low half and its first's in
  // the high half; the permutation interleaves them: (lo0, hi0, lo1, hi1, ...).
  alignas(64) static constexpr uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int64_t k = 0; k < pairs(rows); ++k) {
    const float* r0 = src + 2 * k * ld;
    const bool second = 2 * k + 1 < rows;
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 m = lanes(cols - c);
      const __m512 x0 = _mm512_maskz_loadu_ps(m, r0 + c);
      const __m512 x1 = second ? _mm512_maskz_loadu_ps(m, r0 + ld + c) : _mm512_setzero_ps();
      const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0));
      _mm512_storeu_si512(dst + k * ldd + c, _mm512_permutexvar_epi16(interleave, both));
    }
  }
}

// ---- the tile steps both precisions share ----

// [lo, hi): a range of query or key indices inside a tile.
struct Range {
  int64_t lo, hi;
};

// A tile pair of one call: queries i0 + r (r < nr) and keys j0 + c (c < nc). A query sees an
// interval of keys and a key is seen by an interval of queries, both moving forward with the
// index: near the causal diagonal or the window's edge part of a tile pair is invisible.
template <class S>
struct TilePair {
  const Args<S>& a;
  int64_t i0, nr, j0, nc;

  // Whether every query sees every key.
  bool full() const { return a.key_begin(i0 + nr - 1) <= j0 && j0 + nc <= a.key_end(i0); }

  // The queries (within [0, nr)) that see some key of [c_begin, c_end).
  Range queries_of(int64_t c_begin, int64_t c_end) const {
    const int64_t lo = std::clamp(a.query_begin(j0 + c_begin) - i0, int64_t{0}, nr);
    return {lo, std::clamp(a.query_end(j0 + c_end - 1) - i0, lo, nr)};
  }

  // The keys (within [0, nc)) that some query of [r_begin, r_end) sees.
  Range keys_of(int64_t r_begin, int64_t r_end) const {
    const int64_t lo = std::clamp(a.key_begin(i0 + r_begin) - j0, int64_t{0}, nc);
    return {lo, std::clamp(a.key_end(i0 + r_end - 1) - j0, lo, nc)};
  }

  // Sets the entries of S^T-shaped st (row c = key j0 + c, ld apart) whose query does not see
  // the key to `value`, in columns [0, width).
  void mask(S value, int64_t width, S* st, int64_t ld) const {
    for (int64_t c = 0; c < nc; ++c) {
      const Range q = queries_of(c, c + 1);
      std::fill(st + c * ld, st + c * ld + q.lo, value);
      std::fill(st + c * ld + q.hi, st + c * ld + width, value);
    }
  }
};

// Products over a tile pair run in blocks of this many rows, each over the range of the other
// index that its rows see (the whole range for a full tile pair), so the invisible part of a
// tile pair on the diagonal is mostly not computed. The entries left out are those masked to
// 0 (or -inf before an exp), so the sums are the same.
constexpr int64_t kRowBlock = 16;

// product(r0, n, seen) for each block [r0, r0 + n) of [0, rows) whose range seen(r0, r0 + n)
// of the other index is not empty.
template <class Seen, class Product>
void by_row_blocks(int64_t rows, Seen seen, Product product) {
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t n = std::min(kRowBlock, rows - r0);
    const Range range = seen(r0, r0 + n);
    if (range.lo < range.hi) product(r0, n, range);
  }
}

// The first key tile of query tile i0 (tiles of keys start at multiples of kBc, so bf16 key
// pairs and per-kv-head copies line up with them).
template <class S>
int64_t first_key_tile(const Args<S>& a, int64_t i0) {
  return a.key_begin(i0) / kBc * kBc;
}

// ---- forward ----

template <class S, Precision P>
void forward_tiles(const Args<S>& a, S* o, S* lse) {
  constexpr bool bf16 = P == Precision::bf16;
  constexpr int64_t L = Simd<S>::L;
  const int64_t D = a.D, Dv = a.Dv, DvP = padded<S>(Dv), D2 = pairs(D);
  const int64_t group = a.H / a.Hkv, kv_heads = a.B * a.Hkv;
  const int64_t n_qt = (a.Tq + kBr - 1) / kBr;
  const int64_t tasks = a.B * a.H * n_qt;
  // The keys' side, laid out once per kv head rather than once per query tile, for the keys
  // [kb, kb + nk) that some query sees (a window over a long KV cache sees few): bf16 K rows
  // [kv_heads, nk, D2] and V row pairs [kv_heads, nk2, DvP]; fp32 reads K and V in place
  // unless Dv is not a whole number of vectors (then V padded, [kv_heads, nk, DvP]).
  const int64_t kb = first_key_tile(a, 0), nk = a.key_end(a.Tq - 1) - kb, nk2 = pairs(nk);
  const bool pad_v = !bf16 && DvP != Dv;
  std::vector<uint32_t> k16, v16;
  std::vector<S> v_padded;
  if constexpr (bf16) {
    k16.resize(static_cast<size_t>(kv_heads * nk * D2));
    v16.resize(static_cast<size_t>(kv_heads * nk2 * DvP));
  }
  if (pad_v) v_padded.resize(static_cast<size_t>(kv_heads * nk * DvP));
#pragma omp parallel if (tasks > 1)
  {
    if (bf16 || pad_v) {
#pragma omp for
      for (int64_t bh = 0; bh < kv_heads; ++bh) {
        const int64_t b = bh / a.Hkv, hk = bh % a.Hkv;
        if constexpr (bf16) {
          round_rows(a.k_row(b, kb, hk), a.Hkv * D, nk, D, k16.data() + bh * nk * D2, D2);
          round_row_pairs(a.v_row(b, kb, hk), a.Hkv * Dv, nk, Dv, v16.data() + bh * nk2 * DvP, DvP);
        } else {
          for (int64_t j = 0; j < nk; ++j)
            std::copy_n(a.v_row(b, kb + j, hk), Dv, v_padded.data() + (bh * nk + j) * DvP);
        }
      }
    }
    // qs: (scale Q)^T [D, kBr] (bf16: its row pairs qs16 [D2, kBr]); st: S^T, then P^T [kBc, kBr];
    // p16: P^T's rows paired [kBc / 2, kBr]; acc: unnormalized output [kBr, DvP];
    // m, l: running max and sum per query; mu: the max subtracted (0 while it is -inf).
    std::vector<S> qs(D * kBr), st(kBc * kBr), acc(kBr * DvP), m(kBr), l(kBr), mu(kBr), alpha(kBr), sum(kBr);
    std::vector<uint32_t> qs16(bf16 ? D2 * kBr : 0), p16(bf16 ? kBc / 2 * kBr : 0);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qt = task % n_qt, h = (task / n_qt) % a.H, b = task / (n_qt * a.H), hk = h / group;
      const int64_t bh = b * a.Hkv + hk;
      const int64_t i0 = qt * kBr, nr = std::min(kBr, a.Tq - i0), nrp = padded<S>(nr);
      load_transposed(a.q_row(b, i0, h), a.H * D, nr, D, a.scale, qs.data(), kBr);
      if constexpr (bf16) round_row_pairs(qs.data(), kBr, D, kBr, qs16.data(), kBr);
      std::fill(acc.begin(), acc.end(), S(0));
      std::fill(m.begin(), m.end(), neg_inf<S>());
      std::fill(l.begin(), l.end(), S(0));
      const int64_t ke = a.key_end(i0 + nr - 1);
      for (int64_t j0 = first_key_tile(a, i0); j0 < ke; j0 += kBc) {
        const int64_t nc = std::min(kBc, ke - j0);
        const TilePair<S> tile{a, i0, nr, j0, nc};
        const auto queries_of = [&](int64_t c0, int64_t c1) { return tile.queries_of(c0, c1); };
        const auto keys_of = [&](int64_t r0, int64_t r1) { return tile.keys_of(r0, r1); };
        // S^T = K (scale Q)^T, each block of keys over the whole vectors of its queries.
        by_row_blocks(nc, queries_of, [&](int64_t c0, int64_t n, Range q) {
          const int64_t lo = q.lo / L * L, width = padded<S>(q.hi) - lo;
          if constexpr (bf16)
            gemm_bf16({k16.data() + (bh * nk + j0 - kb + c0) * D2, D2, 1}, {qs16.data() + lo, kBr}, D2, n, width,
                      st.data() + c0 * kBr + lo, kBr, Update::overwrite);
          else
            gemm<S>({a.k_row(b, j0 + c0, hk), a.Hkv * D, 1}, {qs.data() + lo, kBr}, D, n, width,
                    st.data() + c0 * kBr + lo, kBr, Update::overwrite);
        });
        if (!tile.full()) tile.mask(neg_inf<S>(), nrp, st.data(), kBr);
        // Online softmax down the columns: rescale what was accumulated under the old max.
        std::fill(sum.begin(), sum.end(), S(0));
        std::copy(m.begin(), m.end(), alpha.begin());  // the new max, first
        for (int64_t c = 0; c < nc; ++c) {
          const S* sc = st.data() + c * kBr;
          for (int64_t r = 0; r < nrp; ++r) alpha[r] = sc[r] > alpha[r] ? sc[r] : alpha[r];
        }
        for (int64_t r = 0; r < nrp; ++r) {
          const S m_new = alpha[r];
          mu[r] = m_new == neg_inf<S>() ? S(0) : m_new;  // no visible key yet: every p is 0
          alpha[r] = softmax_exp(m[r] - mu[r]);
          m[r] = m_new;
        }
        for (int64_t c = 0; c < nc; ++c) {
          S* sc = st.data() + c * kBr;
          for (int64_t r = 0; r < nrp; ++r) {
            sc[r] = softmax_exp(sc[r] - mu[r]);
            sum[r] += sc[r];
          }
        }
        for (int64_t r = 0; r < nrp; ++r) l[r] = l[r] * alpha[r] + sum[r];
        for (int64_t r = 0; r < nr; ++r)
          for (int64_t d = 0; d < Dv; ++d) acc[r * DvP + d] *= alpha[r];
        // O += P V, each block of queries over the keys it sees.
        if constexpr (bf16) round_row_pairs(st.data(), kBr, nc, nrp, p16.data(), kBr);
        const Rhs<S> vr = pad_v ? Rhs<S>{v_padded.data() + (bh * nk + j0 - kb) * DvP, DvP}
                                : Rhs<S>{a.v_row(b, j0, hk), a.Hkv * Dv};
        by_row_blocks(nr, keys_of, [&](int64_t r0, int64_t n, Range k) {
          if constexpr (bf16) {
            const int64_t p0 = k.lo / 2;
            gemm_bf16({p16.data() + p0 * kBr + r0, 1, kBr}, {v16.data() + (bh * nk2 + (j0 - kb) / 2 + p0) * DvP, DvP},
                      pairs(k.hi) - p0, n, DvP, acc.data() + r0 * DvP, DvP, Update::accumulate);
          } else {
            gemm<S>({st.data() + k.lo * kBr + r0, 1, kBr}, {vr.p + k.lo * vr.ld, vr.ld}, k.hi - k.lo, n, DvP,
                    acc.data() + r0 * DvP, DvP, Update::accumulate);
          }
        });
      }
      for (int64_t r = 0; r < nr; ++r) {
        // Every query sees at least its own position (q_offset <= Tk - Tq), so l > 0.
        const S inv = S(1) / l[r];
        S* out = o + ((b * a.Tq + i0 + r) * a.H + h) * Dv;
        for (int64_t d = 0; d < Dv; ++d) out[d] = acc[r * DvP + d] * inv;
        if (lse != nullptr) lse[(b * a.H + h) * a.Tq + i0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
}

// ---- backward ----

template <class S, Precision P>
void backward_tiles(const Args<S>& a, const S* o, const S* lse, const S* do_, S* dq, S* dk, S* dv) {
  constexpr bool bf16 = P == Precision::bf16;
  constexpr int64_t L = Simd<S>::L;
  const int64_t D = a.D, Dv = a.Dv, DP = padded<S>(D), DvP = padded<S>(Dv), D2 = pairs(D), Dv2 = pairs(Dv);
  const int64_t H = a.H, Tq = a.Tq, Tk = a.Tk, group = a.H / a.Hkv, kv_heads = a.B * a.Hkv;
  auto o_row = [&](const S* base, int64_t b, int64_t i, int64_t h) { return base + ((b * Tq + i) * H + h) * Dv; };

  // delta[b, h, i] = dO_i . O_i, the row term of the softmax backward.
  std::vector<S> delta(static_cast<size_t>(a.B * H * Tq));
#pragma omp parallel for if (a.B * H * Tq * Dv > 32768)
  for (int64_t bi = 0; bi < a.B * Tq; ++bi) {
    const int64_t b = bi / Tq, i = bi % Tq;
    for (int64_t h = 0; h < H; ++h) {
      const S* x = o_row(o, b, i, h);
      const S* g = o_row(do_, b, i, h);
      S s = 0;
      for (int64_t d = 0; d < Dv; ++d) s += x[d] * g[d];
      delta[(b * H + h) * Tq + i] = s;
    }
  }

  // One task per (batch, kv head, span of query tiles).
  const int64_t n_qt = (Tq + kBr - 1) / kBr;
  const int64_t wanted = std::min(n_qt, (kMinBackwardTasks + kv_heads - 1) / kv_heads);
  const int64_t per_span = (n_qt + wanted - 1) / wanted;
  const int64_t spans = (n_qt + per_span - 1) / per_span;
  const int64_t tasks = kv_heads * spans;
  // With several spans per kv head, each task's dK / scale [Tk, DP] and dV [Tk, DvP] sums
  // over its queries, added up after; with one, the task writes dk and dv itself.
  const int64_t slot = Tk * (DP + DvP);
  std::vector<S> partial(spans > 1 ? static_cast<size_t>(tasks * slot) : 0);
#pragma omp parallel if (tasks > 1)
  {
    // Keys' side of a task (keys [kb, ke)): fp32 K as a right operand (k_padded, when D is
    // not a whole number of vectors); bf16 K and V rows (k16, v16) and K row pairs (kp16).
    // Queries' side of a tile: (scale Q)^T and dO^T [D or Dv, kBr] (qs, dos; bf16: their row
    // pairs qs16, dos16), Q and dO as right operands (q_padded, do_padded; bf16 row pairs q16,
    // do16). st: S^T then P^T, dpt: dP^T then dS^T [kBc, kBr]; s16: either rounded, paired
    // along queries [kBc, kBr / 2] or along keys [kBc / 2, kBr]; dqa: dQ / scale [kBr, DP];
    // dka, dva: the task's dK / scale [nk, DP] and dV [nk, DvP]; lse_t, delta_t: the tile's
    // rows of lse and delta_i = dO_i . O_i.
    std::vector<S> k_padded, q_padded, do_padded, qs(D * kBr), dos(Dv * kBr), st(kBc * kBr), dpt(kBc * kBr),
        dqa(kBr * DP), dka, dva, lse_t(kBr), delta_t(kBr);
    std::vector<uint32_t> k16, v16, kp16, qs16(bf16 ? D2 * kBr : 0), dos16(bf16 ? Dv2 * kBr : 0),
        q16(bf16 ? kBr / 2 * DP : 0), do16(bf16 ? kBr / 2 * DvP : 0), s16(bf16 ? kBc * kBr / 2 : 0);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t span = task % spans, bh = task / spans, b = bh / a.Hkv, hk = bh % a.Hkv;
      const int64_t qt_begin = span * per_span, qt_end = std::min(n_qt, qt_begin + per_span);
      const int64_t kb = first_key_tile(a, qt_begin * kBr), ke = a.key_end(std::min(Tq, qt_end * kBr) - 1);
      const int64_t nk = ke - kb;
      dka.assign(static_cast<size_t>(nk * DP), S(0));
      dva.assign(static_cast<size_t>(nk * DvP), S(0));
      Rhs<S> k_rhs{};
      if constexpr (bf16) {
        k16.resize(static_cast<size_t>(nk * D2));
        v16.resize(static_cast<size_t>(nk * Dv2));
        kp16.resize(static_cast<size_t>(pairs(nk) * DP));
        round_rows(a.k_row(b, kb, hk), a.Hkv * D, nk, D, k16.data(), D2);
        round_rows(a.v_row(b, kb, hk), a.Hkv * Dv, nk, Dv, v16.data(), Dv2);
        round_row_pairs(a.k_row(b, kb, hk), a.Hkv * D, nk, D, kp16.data(), DP);
      } else {
        k_rhs = rhs_rows(a.k_row(b, kb, hk), a.Hkv * D, nk, D, k_padded);
      }
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t qt = qt_begin; qt < qt_end; ++qt) {
          const int64_t i0 = qt * kBr, nr = std::min(kBr, Tq - i0), nrp = padded<S>(nr);
          for (int64_t r = 0; r < kBr; ++r) {
            lse_t[r] = r < nr ? lse[(b * H + h) * Tq + i0 + r] : S(0);
            delta_t[r] = r < nr ? delta[(b * H + h) * Tq + i0 + r] : S(0);
          }
          const S* q0 = a.q_row(b, i0, h);
          const S* do0 = o_row(do_, b, i0, h);
          Rhs<S> q_rhs{}, do_rhs{};
          load_transposed(q0, H * D, nr, D, a.scale, qs.data(), kBr);
          load_transposed(do0, H * Dv, nr, Dv, S(1), dos.data(), kBr);
          if constexpr (bf16) {
            round_row_pairs(qs.data(), kBr, D, kBr, qs16.data(), kBr);
            round_row_pairs(dos.data(), kBr, Dv, kBr, dos16.data(), kBr);
            round_row_pairs(q0, H * D, nr, D, q16.data(), DP);
            round_row_pairs(do0, H * Dv, nr, Dv, do16.data(), DvP);
          } else {
            q_rhs = rhs_rows(q0, H * D, nr, D, q_padded);
            do_rhs = rhs_rows(do0, H * Dv, nr, Dv, do_padded);
          }
          std::fill(dqa.begin(), dqa.end(), S(0));
          const int64_t ke_t = a.key_end(i0 + nr - 1);
          for (int64_t j0 = first_key_tile(a, i0); j0 < ke_t; j0 += kBc) {
            const int64_t nc = std::min(kBc, ke_t - j0), jl = j0 - kb;
            const TilePair<S> tile{a, i0, nr, j0, nc};
            const auto queries_of = [&](int64_t c0, int64_t c1) { return tile.queries_of(c0, c1); };
            const auto keys_of = [&](int64_t r0, int64_t r1) { return tile.keys_of(r0, r1); };
            // S^T = K (scale Q)^T and dP^T = V dO^T, each block of keys over its queries.
            by_row_blocks(nc, queries_of, [&](int64_t c0, int64_t n, Range q) {
              const int64_t lo = q.lo / L * L, width = padded<S>(q.hi) - lo;
              S* s_rows = st.data() + c0 * kBr + lo;
              S* dp_rows = dpt.data() + c0 * kBr + lo;
              if constexpr (bf16) {
                gemm_bf16({k16.data() + (jl + c0) * D2, D2, 1}, {qs16.data() + lo, kBr}, D2, n, width, s_rows, kBr,
                          Update::overwrite);
                gemm_bf16({v16.data() + (jl + c0) * Dv2, Dv2, 1}, {dos16.data() + lo, kBr}, Dv2, n, width, dp_rows, kBr,
                          Update::overwrite);
              } else {
                gemm<S>({a.k_row(b, j0 + c0, hk), a.Hkv * D, 1}, {qs.data() + lo, kBr}, D, n, width, s_rows, kBr,
                        Update::overwrite);
                gemm<S>({a.v_row(b, j0 + c0, hk), a.Hkv * Dv, 1}, {dos.data() + lo, kBr}, Dv, n, width, dp_rows, kBr,
                        Update::overwrite);
              }
            });
            for (int64_t c = 0; c < nc; ++c) {
              S* pc = st.data() + c * kBr;
              S* dc = dpt.data() + c * kBr;
              for (int64_t r = 0; r < nrp; ++r) {
                const S p = softmax_exp(pc[r] - lse_t[r]);
                pc[r] = p;
                dc[r] = p * (dc[r] - delta_t[r]);  // dS
              }
            }
            if (!tile.full()) {
              tile.mask(S(0), nrp, st.data(), kBr);
              tile.mask(S(0), nrp, dpt.data(), kBr);
            }
            // dV += P^T dO and dK += dS^T Q, each block of keys over the queries that see it;
            // dQ += dS K, each block of queries over the keys it sees.
            S* dv_rows = dva.data() + jl * DvP;
            S* dk_rows = dka.data() + jl * DP;
            if constexpr (bf16) {
              constexpr int64_t ld16 = kBr / 2;
              round_rows(st.data(), kBr, nc, nr, s16.data(), ld16);
              by_row_blocks(nc, queries_of, [&](int64_t c0, int64_t n, Range q) {
                const int64_t p0 = q.lo / 2;
                gemm_bf16({s16.data() + c0 * ld16 + p0, ld16, 1}, {do16.data() + p0 * DvP, DvP}, pairs(q.hi) - p0, n,
                          DvP, dv_rows + c0 * DvP, DvP, Update::accumulate);
              });
              round_rows(dpt.data(), kBr, nc, nr, s16.data(), ld16);
              by_row_blocks(nc, queries_of, [&](int64_t c0, int64_t n, Range q) {
                const int64_t p0 = q.lo / 2;
                gemm_bf16({s16.data() + c0 * ld16 + p0, ld16, 1}, {q16.data() + p0 * DP, DP}, pairs(q.hi) - p0, n, DP,
                          dk_rows + c0 * DP, DP, Update::accumulate);
              });
              round_row_pairs(dpt.data(), kBr, nc, nrp, s16.data(), kBr);
              by_row_blocks(nr, keys_of, [&](int64_t r0, int64_t n, Range k) {
                const int64_t p0 = k.lo / 2;
                gemm_bf16({s16.data() + p0 * kBr + r0, 1, kBr}, {kp16.data() + (jl / 2 + p0) * DP, DP},
                          pairs(k.hi) - p0, n, DP, dqa.data() + r0 * DP, DP, Update::accumulate);
              });
            } else {
              by_row_blocks(nc, queries_of, [&](int64_t c0, int64_t n, Range q) {
                gemm<S>({st.data() + c0 * kBr + q.lo, kBr, 1}, {do_rhs.p + q.lo * do_rhs.ld, do_rhs.ld}, q.hi - q.lo, n,
                        DvP, dv_rows + c0 * DvP, DvP, Update::accumulate);
                gemm<S>({dpt.data() + c0 * kBr + q.lo, kBr, 1}, {q_rhs.p + q.lo * q_rhs.ld, q_rhs.ld}, q.hi - q.lo, n,
                        DP, dk_rows + c0 * DP, DP, Update::accumulate);
              });
              by_row_blocks(nr, keys_of, [&](int64_t r0, int64_t n, Range k) {
                gemm<S>({dpt.data() + k.lo * kBr + r0, 1, kBr}, {k_rhs.p + (jl + k.lo) * k_rhs.ld, k_rhs.ld},
                        k.hi - k.lo, n, DP, dqa.data() + r0 * DP, DP, Update::accumulate);
              });
            }
          }
          for (int64_t r = 0; r < nr; ++r) {
            S* out = dq + ((b * Tq + i0 + r) * H + h) * D;
            for (int64_t d = 0; d < D; ++d) out[d] = dqa[r * DP + d] * a.scale;
          }
        }
      }
      if (spans == 1) {
        // Keys [kb, ke) are all this kv head's keys that some query sees; the rest get 0.
        for (int64_t j = 0; j < Tk; ++j) {
          S* dk_out = dk + ((b * Tk + j) * a.Hkv + hk) * D;
          S* dv_out = dv + ((b * Tk + j) * a.Hkv + hk) * Dv;
          const bool seen = j >= kb && j < ke;
          for (int64_t d = 0; d < D; ++d) dk_out[d] = seen ? dka[(j - kb) * DP + d] * a.scale : S(0);
          for (int64_t d = 0; d < Dv; ++d) dv_out[d] = seen ? dva[(j - kb) * DvP + d] : S(0);
        }
      } else {
        S* slot_k = partial.data() + task * slot;
        std::copy(dka.begin(), dka.end(), slot_k + kb * DP);
        std::copy(dva.begin(), dva.end(), slot_k + Tk * DP + kb * DvP);
      }
    }
  }
  if (spans == 1) return;

    // dk, dv: the spans' sums added in span order.
#pragma omp parallel for if (kv_heads * Tk * (D + Dv) > 32768)
  for (int64_t row = 0; row < kv_heads * Tk; ++row) {
    const int64_t bh = row / Tk, j = row % Tk, b = bh / a.Hkv, hk = bh % a.Hkv;
    S* dk_out = dk + ((b * Tk + j) * a.Hkv + hk) * D;
    S* dv_out = dv + ((b * Tk + j) * a.Hkv + hk) * Dv;
    const S* first = partial.data() + bh * spans * slot;
    std::copy_n(first + j * DP, D, dk_out);
    std::copy_n(first + Tk * DP + j * DvP, Dv, dv_out);
    for (int64_t s = 1; s < spans; ++s) {
      const S* dka = first + s * slot;
      for (int64_t d = 0; d < D; ++d) dk_out[d] += dka[j * DP + d];
      for (int64_t d = 0; d < Dv; ++d) dv_out[d] += dka[Tk * DP + j * DvP + d];
    }
    for (int64_t d = 0; d < D; ++d) dk_out[d] *= a.scale;
  }
}

// bf16 where asked for and the CPU has it (float only).
template <class S>
bool use_bf16(Precision precision) {
  return std::is_same_v<S, float> && precision == Precision::bf16 && cpu::has_avx512_bf16();
}

#undef LAT_BF16_TARGET

}  // namespace

template <class S>
void forward(const Args<S>& a, Precision precision, S* o, S* lse) {
  if constexpr (std::is_same_v<S, float>)
    if (use_bf16<S>(precision)) return forward_tiles<S, Precision::bf16>(a, o, lse);
  forward_tiles<S, Precision::fp32>(a, o, lse);
}

template <class S>
void backward(const Args<S>& a, Precision precision, const S* o, const S* lse, const S* do_, S* dq, S* dk, S* dv) {
  if constexpr (std::is_same_v<S, float>)
    if (use_bf16<S>(precision)) return backward_tiles<S, Precision::bf16>(a, o, lse, do_, dq, dk, dv);
  backward_tiles<S, Precision::fp32>(a, o, lse, do_, dq, dk, dv);
}

template void forward<float>(const Args<float>&, Precision, float*, float*);
template void forward<double>(const Args<double>&, Precision, double*, double*);
template void backward<float>(const Args<float>&, Precision, const float*, const float*, const float*, float*, float*,
                              float*);
template void backward<double>(const Args<double>&, Precision, const double*, const double*, const double*, double*,
                               double*, double*);

}  // namespace lat::attention_cpu
