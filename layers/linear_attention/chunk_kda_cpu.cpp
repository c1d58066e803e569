// CPU kernel of chunkwise KDA, forward and backward (ALGORITHMS.md 2.7; the gated delta
// rule's chunk form of chunk_gated_delta_rule_cpu.cpp with a decay per key channel).
// Letters as in common.h; BH = B*H, chunk n = bh * NT + c; x_i is row i of a chunk.
//
// Per chunk (rows i, j in [0, C); G [C, K] the chunk-local inclusive cumsum of g per
// channel, E = e^G, Lambda = G_{C-1}; padded rows have g = 0, q = k = v = beta = 0):
//   M_ij = sum_c k_ic k_jc e^{G_ic - G_jc} (i > j),   A = diag(beta) M,   T = (I + A)^-1
//   W = T diag(beta) (K o E),   U = T diag(beta) V,   V_new = U - W S
//   Q_ij = sum_c q_ic k_jc e^{G_ic - G_jc} (i >= j)
//   O = scale [(Q o E) S + Q V_new]       (Q o E: q_i scaled per channel by E_i)
//   S' = Diag(e^Lambda) S + (K o e^{Lambda - G})^T V_new
//
// The pairwise decays e^{G_ic - G_jc} (i >= j) are never formed as e^{G_i} e^{-G_j}: the
// chunk is cut into sub-chunks of kSub rows; a pair in different sub-chunks factorises
// through a reference row r between them, e^{G_i - G_r} e^{G_r - G_j}, both exponents <= 0
// (x_i scaled by the first, y_j by the second, then one tile product per sub-chunk), and a
// pair in the same sub-chunk takes its decay elementwise, j < i only (the upper triangle
// is never formed). Every decay (these, E, e^{Lambda - G}, e^Lambda) is a product of the
// rows' step decays e^{g_t} <= 1, e^{G_i - G_j} = prod_{j < t <= i} e^{g_t}: one
// exponential per row and channel, nothing overflows for any decay, and no factor carries
// the rounding of the cumsum G (G itself is never formed).
//
// Backward (dh = dL/dS' of the chunk; reverse state pass over the chunks):
//   dV_new = scale Q^T dO + (K o e^{Lambda - G}) dh
//   dS = Diag(e^Lambda) dh + scale (Q o E)^T dO - W^T dV_new       (the state entering)
//   dQ_ij = scale dO_i . V_new_j (i >= j);  dQ += scale (dO S^T) o E;  dK += (V_new dh^T) o e^{Lambda - G}
//   dW = -dV_new S^T, dU = dV_new;  [dKb | dVb] = T^T [dW | dU];  dA = -(dKb W^T + dVb U^T) (i > j)
//   dK += diag(beta) dKb o E;  dV = diag(beta) dVb;  dbeta = (dKb o K o E) 1 + dVb . V + (dA o M) 1
//   through the pairs of Q and A (F = dQ strictly lower, or diag(beta) dA):
//     Y_ic = sum_{j<i} F_ij y_jc e^{G_ic - G_jc},  Z_jc = sum_{i>j} F_ij x_ic e^{G_ic - G_jc}
//     dx += Y, dy += Z, dG += x o Y - y o Z     (x, y = q, k for Q; k, k for A)
//   and Q's diagonal adds dQ_ii k_i to dq_i and dQ_ii q_i to dk_i (no decay, no dG).
//   dG further takes every G-dependent factor's gradient times the factor: the readout
//   E_i, the write decays e^{Lambda - G_j} (j < last; the pair last, last has no decay),
//   the key decays E in W, and e^Lambda of the state decay (on Lambda = G_{C-1}).
//   dg = reverse cumsum of dG within the chunk, per channel.
// dG is summed from these terms, each with its own decay factor, never as a difference
// of O(1) products (q . dq - k . dk would lose a dg that strong decay makes tiny;
// ALGORITHMS.md 2.3).
//
// Layout and schedule: one OpenMP loop over the heads (B*H of them: fewer heads than
// threads leave threads idle) runs each head's chunks in order, with one head's
// intermediates per thread (the backward keeps every chunk's, NT (4CK + 3C^2 + 2CV + KV)
// floats). The thread copies its head's rows into the per-head chunked layout of
// chunk_layout.h right before the chunks (q and k L2-normalized there when asked for) and
// its outputs back right after; the arrays not kept past the call (o, d_o, the
// gradients) pass through one head's buffers per thread, reused (in the caches, no fresh
// pages). Every tile product is a single-threaded tile product in
// the call's precision; under bf16 an operand that several products read is rounded and
// packed once. The pair and reference-row decays are computed once per chunk and pass for
// every product that needs them; W and U are one product, [W | U] = T [diag(beta) K o E |
// diag(beta) V], kept for the backward's dA.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "autograd/cpu/aligned_buffer.h"
#include "layers/linear_attention/chunk_layout.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention/kda_kernels.h"
#include "layers/linear_attention/qk_l2norm.h"
#include "layers/linear_attention/tile_gemm_bf16.h"
#include "layers/linear_attention/vec16.h"

namespace lat::linear_attention {
namespace {

using cpu::AlignedBuffer;

// Rows of a sub-chunk: the pairs inside one take their decays elementwise, one dot product
// per pair. 8, not 16: half the elementwise pairs (C (kSub - 1) / 2 per matrix) for a few
// more reference-row rescales and smaller tile products: measured faster in bf16, no slower
// in fp32.
constexpr int64_t kSub = 8;

// Log-decays below this act as this value, as in GDN's kernel: e^-100 is 0 in float, so a
// step decay e^g of a full reset (g = -inf) is 0, never NaN.
constexpr float kMinLogDecay = -100.0f;

// One call in the per-head chunked layout ([BH, NT*C, D], rows t >= T zero).
struct ChunkedParams {
  int64_t BH = 0, T = 0, NT = 0, C = 0, K = 0, V = 0;
  float scale = 1.0f;
  Precision precision = Precision::fp32;
  const float* q = nullptr;     // [BH, NT*C, K] (L2-normalized when asked for)
  const float* k = nullptr;     // [BH, NT*C, K]
  const float* v = nullptr;     // [BH, NT*C, V]
  const float* g = nullptr;     // [BH, NT*C, K]
  const float* beta = nullptr;  // [BH, NT*C]
  const float* h0 = nullptr;    // [BH, K, V], or null
};

// Row 0 of head bh = b*H + h of an API-layout array [B, T, H, D] (its rows H*D apart).
template <class F>
F* head_start(F* api, int64_t bh, int64_t T, int64_t H, int64_t D) {
  return api + ((bh / H) * T * H + bh % H) * D;
}

// One thread's d_o and gradients of one head in the chunked layout ([NT*C, D] each),
// reused for every head the thread works on: arrays no one keeps past the call stay in
// the caches, and a call touches no fresh pages for them.
struct HeadGrads {
  AlignedBuffer d_o, dq, dk, dv, dg, dbeta;
  explicit HeadGrads(const ChunkedParams& p) {
    const int64_t rows = p.NT * p.C;
    d_o = AlignedBuffer(rows * p.V), dq = AlignedBuffer(rows * p.K), dk = AlignedBuffer(rows * p.K);
    dv = AlignedBuffer(rows * p.V), dg = AlignedBuffer(rows * p.K), dbeta = AlignedBuffer(rows);
  }
};

// sum_c a_c b_c e_c over n floats in vector accumulators.
inline float dot3(const float* a, const float* b, const float* e, int64_t n) {
  Vec16 acc[2] = {};
  int64_t c = 0;
  for (; c + 2 * kLanes <= n; c += 2 * kLanes)
    for (int u = 0; u < 2; ++u)
      acc[u] += load16(a + c + u * kLanes) * load16(b + c + u * kLanes) * load16(e + c + u * kLanes);
  for (; c + kLanes <= n; c += kLanes) acc[0] += load16(a + c) * load16(b + c) * load16(e + c);
  float sum = lane_sum(acc[0] + acc[1]);
  for (; c < n; ++c) sum += a[c] * b[c] * e[c];
  return sum;
}

// An operand that several of a chunk's products read: under bf16 rounded and packed once
// (tile_gemm_bf16.h; the words each product would pack, so the same results), under fp32
// the floats themselves.
struct SharedA {
  TileOperand f{nullptr, 0};
  PackedA packed{};
};
struct SharedB {
  TileOperand f{nullptr, 0};
  PackedB packed{};
};

// Room for one shared operand of at most rows x cols (either orientation): empty in fp32.
AlignedBuffer packing_room(const ChunkedParams& p, int64_t rows, int64_t cols) {
  if (p.precision != Precision::bf16) return AlignedBuffer();
  const int64_t n = std::max(rows, cols);
  return AlignedBuffer(std::max(packed_a_words(n, n), packed_b_words(n, n)));
}

uint32_t* words_of(AlignedBuffer& room) { return reinterpret_cast<uint32_t*>(room.data()); }

// op(A), M x K, shared by the products that follow (packed into `room` under bf16).
SharedA share_a(const ChunkedParams& p, int64_t M, int64_t K, TileOperand a, AlignedBuffer& room) {
  SharedA s{a, {}};
  if (p.precision == Precision::bf16) s.packed = pack_a_bf16(M, K, a, words_of(room));
  return s;
}

// op(B), K x N, shared by the products that follow (packed into `room` under bf16).
SharedB share_b(const ChunkedParams& p, int64_t K, int64_t N, TileOperand b, AlignedBuffer& room) {
  SharedB s{b, {}};
  if (p.precision == Precision::bf16) s.packed = pack_b_bf16(K, N, b, words_of(room));
  return s;
}

// tile_product with a shared op(B), op(A), or both.
void product_shared_b(const ChunkedParams& p, int64_t M, int64_t N, int64_t K, TileOperand a, const SharedB& b, float* c,
             int64_t ldc, float alpha = 1.0f, float beta = 0.0f) {
  if (p.precision == Precision::bf16)
    tile_gemm_bf16(M, N, K, a, b.packed, c, ldc, alpha, beta);
  else
    tile_gemm(M, N, K, a, b.f, c, ldc, alpha, beta);
}
void product_shared_a(const ChunkedParams& p, int64_t M, int64_t N, int64_t K, const SharedA& a, TileOperand b, float* c,
             int64_t ldc, float alpha = 1.0f, float beta = 0.0f) {
  if (p.precision == Precision::bf16)
    tile_gemm_bf16(M, N, K, a.packed, b, c, ldc, alpha, beta);
  else
    tile_gemm(M, N, K, a.f, b, c, ldc, alpha, beta);
}
void product_shared(const ChunkedParams& p, int64_t M, int64_t N, int64_t K, const SharedA& a, const SharedB& b, float* c,
             int64_t ldc, float alpha = 1.0f, float beta = 0.0f) {
  if (p.precision == Precision::bf16)
    tile_gemm_bf16(M, N, K, a.packed, b.packed, c, ldc, alpha, beta);
  else
    tile_gemm(M, N, K, a.f, b.f, c, ldc, alpha, beta);
}

// Which pass a chunk's work serves.
enum class Pass { forward, backward };

// One thread's tiles.
struct Scratch {
  AlignedBuffer xs, tmp;                  // [C, max(K, V)] each
  AlignedBuffer kvb;                      // [C, K+V]: [diag(beta) K o E | diag(beta) V]; backward [dKb | dVb]
  AlignedBuffer dwu;                      // backward, [C, K+V]: [dW | dU = dV_new]
  AlignedBuffer kd, dqe, dG, Y, Z;        // backward, [C, max(K, V)] each
  AlignedBuffer dA, F;                    // backward, [C, C]
  AlignedBuffer dS;                       // backward, [K, V]
  AlignedBuffer dlambda;                  // backward, [K]
  AlignedBuffer a_row;                    // [C], see invert_unit_lower
  AlignedBuffer pairs;    // [C, kSub, K]: the chunk's pair decays, see pair_decays
  AlignedBuffer running;  // [K]: a running product of step decays
  // The chunk's reference-row factors, see reference_decays.
  AlignedBuffer k_before;   // [C / kSub, C, K]
  AlignedBuffer from_first; // [C, K]
  AlignedBuffer after_last; // [C / kSub, C, K] (backward)
  AlignedBuffer to_last;    // [C, K] (backward)
  // bf16: k_before of each sub-chunk as op(B) of its products (transposed for the scores,
  // as stored for Y), and the rooms of the other shared operands.
  std::vector<AlignedBuffer> k_before_rooms;
  std::vector<SharedB> k_before_b;
  AlignedBuffer room_a, room_b1, room_b2;
  SharedB state_b, vnew_b;  // the forward's S and V_new as op(B), see state_step
  explicit Scratch(const ChunkedParams& p) {
    const int64_t CD = p.C * std::max(p.K, p.V), CC = p.C * p.C, CKV = p.C * (p.K + p.V);
    const int64_t subs = (p.C + kSub - 1) / kSub;
    for (AlignedBuffer* b : {&xs, &tmp, &kd, &dqe, &dG, &Y, &Z}) *b = AlignedBuffer(CD);
    kvb = AlignedBuffer(CKV), dwu = AlignedBuffer(CKV);
    dA = AlignedBuffer(CC), F = AlignedBuffer(CC), dS = AlignedBuffer(p.K * p.V), dlambda = AlignedBuffer(p.K);
    a_row = AlignedBuffer(p.C);
    pairs = AlignedBuffer(p.C * kSub * p.K), running = AlignedBuffer(p.K);
    k_before = AlignedBuffer(subs * p.C * p.K), from_first = AlignedBuffer(p.C * p.K);
    after_last = AlignedBuffer(subs * p.C * p.K), to_last = AlignedBuffer(p.C * p.K);
    const int64_t n = std::max({p.C, p.K, p.V});
    for (int64_t b = 0; b < subs; ++b) k_before_rooms.push_back(packing_room(p, p.C, p.K));
    k_before_b.resize(subs);
    room_a = packing_room(p, n, n), room_b1 = packing_room(p, n, n), room_b2 = packing_room(p, n, n);
  }
};

// out [i, c] = x[i, c] f[i, c] over rows x K floats (row stride K).
void times_factors(const float* __restrict x, const float* __restrict f, int64_t rows, int64_t K,
                   float* __restrict out) {
  for (int64_t e = 0; e < rows * K; ++e) out[e] = x[e] * f[e];
}

// out = a o b over n floats of factors >= 0, a product below the smallest normal float
// flushed to 0, as the exponential flushes its own (a factor decayed over many rows would
// otherwise run through denormals).
inline void scale_flushed(int64_t n, const float* __restrict a, const float* __restrict b, float* __restrict out) {
  for (int64_t c = 0; c < n; ++c) {
    const float e = a[c] * b[c];
    out[c] = e < std::numeric_limits<float>::min() ? 0.0f : e;
  }
}

// e with the lanes below the smallest normal float flushed to 0, as scale_flushed's.
inline Vec16 flushed(Vec16 e) {
  const Vec16 tiny = Vec16{} + std::numeric_limits<float>::min();
  return e < tiny ? Vec16{} : e;
}

// w = w o d in place, flushed as scale_flushed.
inline void decay_flushed(int64_t n, const float* __restrict d, float* __restrict w) {
  for (int64_t c = 0; c < n; ++c) {
    const float e = w[c] * d[c];
    w[c] = e < std::numeric_limits<float>::min() ? 0.0f : e;
  }
}

// The chunk's decays, every one a product of the rows' step decays d_t = e^{g_t} <= 1 (g
// clamped to kMinLogDecay): e^{G_i - G_j} = prod_{j < t <= i} d_t. One exponential per row
// and channel; a running product's rounding grows with the rows it spans, as the cumsum
// G's would. Into the slot's steps, E = e^G (E_i = E_(i-1) d_i) and e^{Lambda - G}
// (wdec_i = wdec_(i+1) d_(i+1), wdec_(C-1) = 1).
//
// Both running products go 32 channels at a time with the products in registers, E down
// and wdec up the rows in one loop: four independent chains (a product stored and
// reloaded per row would chain every row through the store).
void chunk_decays(const ChunkedParams& p, const float* g, float* d, float* E, float* wdec) {
  const int64_t C = p.C, K = p.K;
  for (int64_t x = 0; x < C * K; ++x) d[x] = exp_nonpositive(std::max(g[x], kMinLogDecay));
  int64_t c = 0;
  for (; c + 2 * kLanes <= K; c += 2 * kLanes) {
    Vec16 e[2], w[2];
    for (int u = 0; u < 2; ++u) {
      e[u] = load16(d + c + u * kLanes), w[u] = Vec16{} + 1.0f;
      store16(E + c + u * kLanes, e[u]);
      store16(wdec + (C - 1) * K + c + u * kLanes, w[u]);
    }
    for (int64_t i = 1; i < C; ++i) {
      const int64_t r = C - 1 - i;  // wdec_r = wdec_(r+1) d_(r+1)
      for (int u = 0; u < 2; ++u) {
        const int64_t x = c + u * kLanes;
        e[u] = flushed(e[u] * load16(d + i * K + x));
        w[u] = flushed(w[u] * load16(d + (r + 1) * K + x));
        store16(E + i * K + x, e[u]);
        store16(wdec + r * K + x, w[u]);
      }
    }
  }
  const int64_t rest = K - c;
  if (rest == 0) return;
  std::copy(d + c, d + K, E + c);
  for (int64_t i = 1; i < C; ++i) scale_flushed(rest, E + (i - 1) * K + c, d + i * K + c, E + i * K + c);
  std::fill(wdec + (C - 1) * K + c, wdec + C * K, 1.0f);
  for (int64_t i = C - 2; i >= 0; --i)
    scale_flushed(rest, wdec + (i + 1) * K + c, d + (i + 1) * K + c, wdec + i * K + c);
}

// The decays of the pairs inside each sub-chunk: e^{G_i - G_j} for r0 <= j < i < r1 at
// pairs + (i * kSub + j - r0) * K (entries j >= i are not written, nor read: a row's pair
// with itself has no decay), as running products of the step decays d [C, K]: the pair
// (i, i-1) is d_i, the pair (i, j) that of (i-1, j) times d_i. Computed once per chunk for
// every product that needs them.
void pair_decays(const ChunkedParams& p, const float* d, float* pairs) {
  const int64_t C = p.C, K = p.K;
  for (int64_t i = 0; i < C; ++i) {
    const int64_t r0 = i / kSub * kSub;
    if (i == r0) continue;
    std::copy(d + i * K, d + (i + 1) * K, pairs + (i * kSub + i - 1 - r0) * K);
    for (int64_t j = r0; j + 1 < i; ++j)
      scale_flushed(K, pairs + ((i - 1) * kSub + j - r0) * K, d + i * K, pairs + (i * kSub + j - r0) * K);
  }
}

inline const float* pair_decay(const float* pairs, int64_t i, int64_t j, int64_t K) {
  return pairs + (i * kSub + j % kSub) * K;
}

// out = x o f over n floats, f decays in [0, 1]: a result below the smallest normal float
// in magnitude flushed to 0, as scale_flushed's.
inline void times_decays_flushed(int64_t n, const float* __restrict x, const float* __restrict f,
                                 float* __restrict out) {
  for (int64_t c = 0; c < n; ++c) {
    const float e = x[c] * f[c];
    out[c] = std::fabs(e) < std::numeric_limits<float>::min() ? 0.0f : e;
  }
}

// The factors of the pairs in different sub-chunks, computed once per chunk for every
// product that needs them (every such product has y = k on its earlier side). Sub-chunk b
// has rows [r0, r1), r0 = b kSub:
//   k_before   + b C K:  k_jc e^{G_r0,c - G_jc}      for j < r0 (reference row r0)
//   from_first:          e^{G_ic - G_r0(i),c}         for every row i (its sub-chunk's r0)
// and in the backward (Z's products, reference row r1 - 1):
//   after_last + b C K:  e^{G_ic - G_r1-1,c}          for i >= r1, at row i - r1
//   to_last:             e^{G_r1-1(j),c - G_jc}       for every row j
// Every one is a product of step decays d [C, K]: from_first and to_last are pair decays
// (s.pairs, from pair_decays); the others step from the neighbouring sub-chunk's block,
// one factor per row and channel (no running product chained through the rows):
//   k_before b = k_before (b-1) e^{G_r0 - G_r0-kSub} for j < r0 - kSub, and k_j times the
//   pair decay (r0 - 1, j) times d_r0 for the previous sub-chunk's rows;
//   after_last b = from_first d_r1 for the next sub-chunk's rows, and after_last (b+1)
//   times e^{G_r1+kSub-1 - G_r1-1} beyond.
// k_before_b[b] shares k_before's block as op(B): transposed in the forward (the scores),
// as stored in the backward (Y).
void reference_decays(const ChunkedParams& p, const float* k, const float* d, Pass pass, Scratch& s) {
  const int64_t C = p.C, K = p.K;
  const float* pairs = s.pairs.data();
  float* ff = s.from_first.data();
  float* f = s.running.data();
  for (int64_t r0 = 0; r0 < C; r0 += kSub) {
    const int64_t r1 = std::min(C, r0 + kSub), b = r0 / kSub;
    std::fill(ff + r0 * K, ff + (r0 + 1) * K, 1.0f);
    for (int64_t i = r0 + 1; i < r1; ++i) std::copy_n(pair_decay(pairs, i, r0, K), K, ff + i * K);
    if (r0 == 0) continue;
    float* kb = s.k_before.data() + b * C * K;
    const float* d_r0 = d + r0 * K;
    const int64_t prev = r0 - kSub;  // the previous sub-chunk's reference row (its sub-chunk is full)
    if (prev > 0) {
      scale_flushed(K, ff + (r0 - 1) * K, d_r0, f);  // e^{G_r0 - G_prev}
      const float* kb_prev = s.k_before.data() + (b - 1) * C * K;
      for (int64_t j = 0; j < prev; ++j) times_decays_flushed(K, kb_prev + j * K, f, kb + j * K);
    }
    for (int64_t j = prev; j + 1 < r0; ++j) {
      scale_flushed(K, pair_decay(pairs, r0 - 1, j, K), d_r0, f);
      times_factors(k + j * K, f, 1, K, kb + j * K);
    }
    times_factors(k + (r0 - 1) * K, d_r0, 1, K, kb + (r0 - 1) * K);
    const TileOperand op = pass == Pass::forward ? TileOperand{kb, K, true} : TileOperand{kb, K};
    s.k_before_b[b] = pass == Pass::forward ? share_b(p, K, r0, op, s.k_before_rooms[b])
                                            : share_b(p, r0, K, op, s.k_before_rooms[b]);
  }
  if (pass == Pass::forward) return;
  for (int64_t r0 = (C - 1) / kSub * kSub; r0 >= 0; r0 -= kSub) {
    const int64_t r1 = std::min(C, r0 + kSub), b = r0 / kSub, last = r1 - 1;
    for (int64_t j = r0; j < last; ++j) std::copy_n(pair_decay(pairs, last, j, K), K, s.to_last.data() + j * K);
    std::fill(s.to_last.data() + last * K, s.to_last.data() + r1 * K, 1.0f);
    if (r1 == C) continue;
    float* al = s.after_last.data() + b * C * K;
    const int64_t next_end = std::min(C, r1 + kSub);
    for (int64_t i = r1; i < next_end; ++i) scale_flushed(K, ff + i * K, d + r1 * K, al + (i - r1) * K);
    if (next_end == C) continue;
    const float* step = al + (kSub - 1) * K;  // e^{G_r1+kSub-1 - G_r1-1}
    const float* al_next = s.after_last.data() + (b + 1) * C * K;
    for (int64_t i = next_end; i < C; ++i) scale_flushed(K, al_next + (i - next_end) * K, step, al + (i - r1) * K);
  }
}

// The sums sum_c x_c y_c e_c and sum_c z_c y_c e_c over n floats, into *xy and *zy: the
// decayed key y o e is formed once for both.
inline void two_decayed_dots(const float* x, const float* z, const float* y, const float* e, int64_t n, float* xy,
                             float* zy) {
  Vec16 ax[2] = {}, az[2] = {};
  int64_t c = 0;
  for (; c + 2 * kLanes <= n; c += 2 * kLanes)
    for (int u = 0; u < 2; ++u) {
      const Vec16 ye = load16(y + c + u * kLanes) * load16(e + c + u * kLanes);
      ax[u] += load16(x + c + u * kLanes) * ye;
      az[u] += load16(z + c + u * kLanes) * ye;
    }
  for (; c + kLanes <= n; c += kLanes) {
    const Vec16 ye = load16(y + c) * load16(e + c);
    ax[0] += load16(x + c) * ye;
    az[0] += load16(z + c) * ye;
  }
  float sx = lane_sum(ax[0] + ax[1]), sz = lane_sum(az[0] + az[1]);
  for (; c < n; ++c) {
    sx += x[c] * y[c] * e[c];
    sz += z[c] * y[c] * e[c];
  }
  *xy = sx, *zy = sz;
}

// The forward's two pair matrices, [C, C] each, 0 above their diagonals:
//   M_ij = sum_c k_ic k_jc e^{G_ic - G_jc} (j < i),  Q_ij = sum_c q_ic k_jc e^{G_ic - G_jc} (j <= i);
// s holds the chunk's pair_decays and reference_decays. Inside a sub-chunk both read the
// decayed key k_j o e^{G_i - G_j} of the same pair, formed once.
void key_query_scores(const ChunkedParams& p, const float* q, const float* k, float* M, float* Q, Scratch& s) {
  const int64_t C = p.C, K = p.K;
  std::fill(M, M + C * C, 0.0f);
  std::fill(Q, Q + C * C, 0.0f);
  for (int64_t r0 = 0; r0 < C; r0 += kSub) {
    const int64_t r1 = std::min(C, r0 + kSub), rows = r1 - r0;
    if (r0 > 0) {  // reference row r0: x_i e^{G_i - G_r0} (i >= r0), k_j e^{G_r0 - G_j} (j < r0)
      const SharedB& kb = s.k_before_b[r0 / kSub];
      times_factors(k + r0 * K, s.from_first.data() + r0 * K, rows, K, s.xs.data());
      product_shared_b(p, rows, r0, K, {s.xs.data(), K}, kb, M + r0 * C, C);
      times_factors(q + r0 * K, s.from_first.data() + r0 * K, rows, K, s.xs.data());
      product_shared_b(p, rows, r0, K, {s.xs.data(), K}, kb, Q + r0 * C, C);
    }
    for (int64_t i = r0; i < r1; ++i) {
      for (int64_t j = r0; j < i; ++j)
        two_decayed_dots(k + i * K, q + i * K, k + j * K, pair_decay(s.pairs.data(), i, j, K), K, M + i * C + j,
                         Q + i * C + j);
      Q[i * C + i] = dot(q + i * K, k + i * K, K);
    }
  }
}

// out += f y o e over K floats (one pair of a diagonal sub-block).
inline void add_decayed(int64_t K, float f, const float* __restrict y, const float* __restrict e,
                        float* __restrict out) {
  for (int64_t c = 0; c < K; ++c) out[c] += f * y[c] * e[c];
}

// out += (f x + h u) o e over K floats (one pair of two pair matrices).
inline void add_two_decayed(int64_t K, float f, const float* __restrict x, float h, const float* __restrict u,
                            const float* __restrict e, float* __restrict out) {
  for (int64_t c = 0; c < K; ++c) out[c] += (f * x[c] + h * u[c]) * e[c];
}

// Y_ic = sum_{j<i} F_ij k_jc e^{G_ic - G_jc} (F [C, C], read strictly below the diagonal)
// into Y [C, K] (overwritten); s holds the chunk's pair_decays and reference_decays.
void decayed_lower_times(const ChunkedParams& p, const float* F, const float* k, float* Y, Scratch& s) {
  const int64_t C = p.C, K = p.K;
  for (int64_t r0 = 0; r0 < C; r0 += kSub) {
    const int64_t r1 = std::min(C, r0 + kSub), rows = r1 - r0;
    float* Yr = Y + r0 * K;
    if (r0 > 0) {
      product_shared_b(p, rows, K, r0, {F + r0 * C, C}, s.k_before_b[r0 / kSub], s.tmp.data(), K);
      times_factors(s.tmp.data(), s.from_first.data() + r0 * K, rows, K, Yr);
    } else {
      std::fill(Yr, Yr + rows * K, 0.0f);
    }
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = r0; j < i; ++j)
        add_decayed(K, F[i * C + j], k + j * K, pair_decay(s.pairs.data(), i, j, K), Y + i * K);
  }
}

// Z_jc = sum_{i>j} (F_ij x_ic + H_ij u_ic) e^{G_ic - G_jc} (F and H read strictly below
// the diagonal) into Z [C, K] (overwritten): the Z of two pair matrices that share their
// decays and their gradients' destination (dk, both with y = k), in one pass. s holds the
// chunk's pair_decays and reference_decays (of the backward); the reference row of
// sub-chunk [r0, r1) is its last, r1 - 1.
void decayed_upper_times(const ChunkedParams& p, const float* F, const float* x, const float* H, const float* u,
                         float* Z, Scratch& s) {
  const int64_t C = p.C, K = p.K;
  float* xs = s.xs.data();
  float* us = s.dqe.data();
  for (int64_t r0 = 0; r0 < C; r0 += kSub) {
    const int64_t r1 = std::min(C, r0 + kSub), rows = r1 - r0;
    float* Zr = Z + r0 * K;
    if (r1 < C) {
      const float* al = s.after_last.data() + r0 / kSub * C * K;
      times_factors(x + r1 * K, al, C - r1, K, xs);
      times_factors(u + r1 * K, al, C - r1, K, us);
      tile_product(p.precision, rows, K, C - r1, {F + r1 * C + r0, C, true}, {xs, K}, s.tmp.data(), K);
      tile_product(p.precision, rows, K, C - r1, {H + r1 * C + r0, C, true}, {us, K}, s.tmp.data(), K, 1.0f, 1.0f);
      times_factors(s.tmp.data(), s.to_last.data() + r0 * K, rows, K, Zr);
    } else {
      std::fill(Zr, Zr + rows * K, 0.0f);
    }
    for (int64_t j = r0; j < r1; ++j)
      for (int64_t i = j + 1; i < r1; ++i)
        add_two_decayed(K, F[i * C + j], x + i * K, H[i * C + j], u + i * K, pair_decay(s.pairs.data(), i, j, K),
                        Z + j * K);
  }
}

// T = (I + A)^-1 for A = diag(beta) M strictly lower, by forward substitution, row by row:
// T_i = e_i - sum_{j<i} A_ij T_j. Row j of T is zero beyond column j, so the 16-column slab
// from x of T_i sums only over x <= j < i, in four independent vector accumulators (a
// running row would chain every update through a store and a reload); a slab that would
// reach past column C - 1 is summed column by column. a_row [C] holds A_ij of row i.
void invert_unit_lower(int64_t C, const float* beta, const float* M, float* T, float* a_row) {
  std::fill(T, T + C * C, 0.0f);
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t j = 0; j < i; ++j) a_row[j] = beta[i] * M[i * C + j];
    float* ti = T + i * C;
    for (int64_t x = 0; x < i; x += kLanes) {
      if (x + kLanes > C) {
        for (int64_t col = x; col < i; ++col) {
          float sum = 0.0f;
          for (int64_t j = col; j < i; ++j) sum += a_row[j] * T[j * C + col];
          ti[col] = -sum;
        }
        break;
      }
      Vec16 acc[4] = {};
      int64_t j = x;
      for (; j + 4 <= i; j += 4)
        for (int64_t u = 0; u < 4; ++u) acc[u] += a_row[j + u] * load16(T + (j + u) * C + x);
      for (; j < i; ++j) acc[0] += a_row[j] * load16(T + j * C + x);
      store16(ti + x, -((acc[0] + acc[1]) + (acc[2] + acc[3])));
    }
    ti[i] = 1.0f;
  }
}

// The intermediates of a head's chunks that do not depend on the state, one slot per
// chunk (the forward keeps one slot, reused; the backward one per chunk), and the states
// entering each chunk.
struct HeadArrays {
  int64_t slots = 0, C = 0, K = 0, V = 0;
  AlignedBuffer D, E, wdec;  // [slots, C, K]: step decays e^g, e^G, e^{Lambda - G}
  AlignedBuffer M, T, Q;     // [slots, C, C]: key pairs, (I + A)^-1, query-key pairs
  AlignedBuffer WU, vnew;    // [slots, C, K+V], [slots, C, V]: [W | U], and V_new
  AlignedBuffer h;           // [NT, K, V]: the state entering each chunk (backward)

  HeadArrays(const ChunkedParams& p, int64_t slot_count, bool keep_states)
      : slots(slot_count), C(p.C), K(p.K), V(p.V) {
    const int64_t CK = slots * C * K, CC = slots * C * C;
    D = AlignedBuffer(CK), E = AlignedBuffer(CK), wdec = AlignedBuffer(CK), WU = AlignedBuffer(slots * C * (K + V));
    M = AlignedBuffer(CC), T = AlignedBuffer(CC), Q = AlignedBuffer(CC);
    vnew = AlignedBuffer(slots * C * V);
    if (keep_states) h = AlignedBuffer(p.NT * K * V);
  }
  float* d_of(int64_t m) { return D.data() + m * C * K; }
  float* e_of(int64_t m) { return E.data() + m * C * K; }
  float* wdec_of(int64_t m) { return wdec.data() + m * C * K; }
  float* m_of(int64_t m) { return M.data() + m * C * C; }
  float* t_of(int64_t m) { return T.data() + m * C * C; }
  float* q_of(int64_t m) { return Q.data() + m * C * C; }
  float* wu_of(int64_t m) { return WU.data() + m * C * (K + V); }  // row stride K + V; U from column K
  float* vnew_of(int64_t m) { return vnew.data() + m * C * V; }
};

// Phase A of chunk n into slot m: the step decays, E, e^{Lambda - G}, M, T, [W | U] and Q.
void phase_a(const ChunkedParams& p, HeadArrays& a, int64_t m, int64_t n, Scratch& s) {
  const int64_t C = p.C, K = p.K, V = p.V, KV = K + V;
  const float* q = p.q + n * C * K;
  const float* k = p.k + n * C * K;
  const float* g = p.g + n * C * K;
  const float* beta = p.beta + n * C;
  float* d = a.d_of(m);
  chunk_decays(p, g, d, a.e_of(m), a.wdec_of(m));
  const float* E = a.e_of(m);
  float* M = a.m_of(m);
  pair_decays(p, d, s.pairs.data());
  reference_decays(p, k, d, Pass::forward, s);
  key_query_scores(p, q, k, M, a.q_of(m), s);
  invert_unit_lower(C, beta, M, a.t_of(m), s.a_row.data());
  float* kvb = s.kvb.data();
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t c = 0; c < K; ++c) kvb[i * KV + c] = beta[i] * k[i * K + c] * E[i * K + c];
    for (int64_t x = 0; x < V; ++x) kvb[i * KV + K + x] = beta[i] * p.v[(n * C + i) * V + x];
  }
  tile_product(p.precision, C, KV, C, {a.t_of(m), C}, {kvb, KV}, a.wu_of(m), KV);
}

// V_new = U - W S into the slot's vnew, then, when next is not null, S' = Diag(e^Lambda) S
// + (K o e^{Lambda - G})^T V_new into next. S and V_new stay shared in s.state_b and
// s.vnew_b for output_chunk.
void state_step(const ChunkedParams& p, HeadArrays& a, int64_t m, int64_t n, const float* S, float* next,
                Scratch& s) {
  const int64_t C = p.C, K = p.K, V = p.V, KV = K + V;
  float* vn = a.vnew_of(m);
  const float* wu = a.wu_of(m);
  for (int64_t i = 0; i < C; ++i) std::memcpy(vn + i * V, wu + i * KV + K, V * sizeof(float));
  s.state_b = share_b(p, K, V, {S, V}, s.room_b1);
  product_shared_b(p, C, V, K, {wu, KV}, s.state_b, vn, V, -1.0f, 1.0f);
  s.vnew_b = share_b(p, C, V, {vn, V}, s.room_b2);
  if (!next) return;
  const float* lambda_e = a.e_of(m) + (C - 1) * K;
  for (int64_t c = 0; c < K; ++c)
    for (int64_t x = 0; x < V; ++x) next[c * V + x] = lambda_e[c] * S[c * V + x];
  const float* k = p.k + n * C * K;
  const float* wdec = a.wdec_of(m);
  float* kd = s.xs.data();
  times_factors(k, wdec, C, K, kd);
  product_shared_b(p, K, V, C, {kd, K, true}, s.vnew_b, next, V, 1.0f, 1.0f);
}

// O = scale [(Q o E) S + Q V_new] of chunk n into out [C, V], after its state_step.
void output_chunk(const ChunkedParams& p, HeadArrays& a, int64_t m, int64_t n, float* out, Scratch& s) {
  const int64_t C = p.C, K = p.K, V = p.V;
  const float* q = p.q + n * C * K;
  const float* E = a.e_of(m);
  float* qe = s.xs.data();
  times_factors(q, E, C, K, qe);
  product_shared_b(p, C, V, C, {a.q_of(m), C}, s.vnew_b, out, V, p.scale);
  product_shared_b(p, C, V, K, {qe, K}, s.state_b, out, V, p.scale, 1.0f);
}

// The state S_0 of head bh: h0's, or zeros.
void initial_state(const ChunkedParams& p, int64_t bh, float* S) {
  copy_or_zero(p.h0 ? p.h0 + bh * p.K * p.V : nullptr, p.K * p.V, S);
}

// The copies between the API layout and one head's rows of the chunked layout, made by the
// thread that works on the head: the inputs right before its first chunk, the outputs
// right after its last, so that the chunks read rows still in the core's caches and the
// copies out read rows just written. The inputs go into the call's chunked buffers (the
// forward keeps them for the backward); o, d_o and the gradients through one head's
// buffers of the thread (HeadGrads, the forward's o_head).
struct HeadCopies {
  std::vector<ToChunked> in;
  int64_t T = 0, H = 0, C = 0, K = 0, V = 0, head_rows = 0;
  // With the in-kernel L2 norm (else all null), forward: the chunked q and k, normalized
  // in place after the copy in, and their rstd [rows] written.
  struct {
    float *q = nullptr, *k = nullptr, *q_rstd = nullptr, *k_rstd = nullptr;
  } norm_in;
  // Backward: the saved normalized q, k and their rstd, for dq and dk through the norm.
  struct {
    const float *q = nullptr, *k = nullptr, *q_rstd = nullptr, *k_rstd = nullptr;
  } norm_out;

  void head_in(int64_t bh) const {
    head_to_chunked(in, bh, T, H, C);
    const int64_t row0 = bh * head_rows;
    if (norm_in.q) {
      l2norm_rows_forward(norm_in.q + row0 * K, head_rows, K, norm_in.q_rstd + row0);
      l2norm_rows_forward(norm_in.k + row0 * K, head_rows, K, norm_in.k_rstd + row0);
    }
  }
  // Head bh's chunked rows of one array [B, T, H, D] of the API layout, in or out.
  void head_in(int64_t bh, const float* api, float* head, int64_t D) const {
    const ToChunked x[] = {{head_start(api, bh, T, H, D), head, D}};
    head_to_chunked(x, 0, T, H, C);
  }
  void head_out(int64_t bh, const float* head, float* api, int64_t D) const {
    const FromChunked x[] = {{head, head_start(api, bh, T, H, D), D}};
    head_from_chunked(x, 0, T, H, C);
  }
  // The backward's gradients of head bh (chunked, in g) into the API layout, dq and dk
  // first taken through the norm when asked for.
  void grads_out(int64_t bh, HeadGrads& g, const KdaGrads& api) const {
    const int64_t row0 = bh * head_rows;
    if (norm_out.q) {
      l2norm_rows_backward(norm_out.q + row0 * K, norm_out.q_rstd + row0, head_rows, K, g.dq.data());
      l2norm_rows_backward(norm_out.k + row0 * K, norm_out.k_rstd + row0, head_rows, K, g.dk.data());
    }
    head_out(bh, g.dq.data(), api.dq, K);
    head_out(bh, g.dk.data(), api.dk, K);
    head_out(bh, g.dv.data(), api.dv, V);
    head_out(bh, g.dg.data(), api.dgk, K);
    head_out(bh, g.dbeta.data(), api.dbeta, 1);
  }
};

// o [B, T, H, V] in the API layout.
void forward_chunked(const ChunkedParams& p, const HeadCopies& copies, float* o, float* ht) {
#pragma omp parallel
  {
    Scratch s(p);
    HeadArrays a(p, 1, false);
    AlignedBuffer S(p.K * p.V), next(p.K * p.V), o_head(p.NT * p.C * p.V);
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < p.BH; ++bh) {
      copies.head_in(bh);
      initial_state(p, bh, S.data());
      for (int64_t c = 0; c < p.NT; ++c) {
        const int64_t n = bh * p.NT + c;
        const bool last = c + 1 == p.NT;
        float* out_state = last ? (ht ? ht + bh * p.K * p.V : nullptr) : next.data();
        phase_a(p, a, 0, n, s);
        state_step(p, a, 0, n, S.data(), out_state, s);
        output_chunk(p, a, 0, n, o_head.data() + c * p.C * p.V, s);
        if (!last) std::swap(S, next);
      }
      copies.head_out(bh, o_head.data(), o, p.V);
    }
  }
}

// The backward's element-wise updates, over n floats of arrays that never overlap
// (__restrict: the loops, which write several arrays, then vectorize).

// Readout through S and the writes into the state, rows [0, n / K) of K floats: dq = dqe
// o E, dG = dq o q; dk = dkd o e^{Lambda - G} (wdec).
inline void readout_terms(int64_t n, const float* __restrict dqe, const float* __restrict E,
                          const float* __restrict q, const float* __restrict dkd, const float* __restrict wdec,
                          float* __restrict dq, float* __restrict dk, float* __restrict dG) {
  for (int64_t x = 0; x < n; ++x) {
    dq[x] = dqe[x] * E[x];
    dG[x] = dq[x] * q[x];
    dk[x] = dkd[x] * wdec[x];
  }
}

// readout_terms of one row whose write decay e^{Lambda - G_i} is a factor (a row before
// the chunk's last): dG further takes -dk o k, and dLambda += dk o k.
inline void readout_write_terms(int64_t K, const float* __restrict dqe, const float* __restrict E,
                                const float* __restrict q, const float* __restrict dkd,
                                const float* __restrict wdec, const float* __restrict k, float* __restrict dq,
                                float* __restrict dk, float* __restrict dG, float* __restrict dlambda) {
  for (int64_t c = 0; c < K; ++c) {
    dq[c] = dqe[c] * E[c];
    dk[c] = dkd[c] * wdec[c];
    const float term = dk[c] * k[c];
    dG[c] = dq[c] * q[c] - term;
    dlambda[c] += term;
  }
}

// dx += f y, dy += f x (one row; a pair without decay).
inline void add_scaled_pair(int64_t n, float f, const float* __restrict x, const float* __restrict y,
                            float* __restrict dx, float* __restrict dy) {
  for (int64_t c = 0; c < n; ++c) {
    dx[c] += f * y[c];
    dy[c] += f * x[c];
  }
}

// The Y of Q's pair matrix (x = q): dq += Y, dG += q o Y.
inline void add_query_terms(int64_t n, const float* __restrict q, const float* __restrict Y, float* __restrict dq,
                            float* __restrict dG) {
  for (int64_t c = 0; c < n; ++c) {
    dq[c] += Y[c];
    dG[c] += q[c] * Y[c];
  }
}

// A's Y and the Z of both pair matrices (y = k in both): dk += Y + Z, dG += k o (Y - Z).
inline void add_key_pair_terms(int64_t n, const float* __restrict k, const float* __restrict Y,
                               const float* __restrict Z, float* __restrict dk, float* __restrict dG) {
  for (int64_t c = 0; c < n; ++c) {
    dk[c] += Y[c] + Z[c];
    dG[c] += k[c] * (Y[c] - Z[c]);
  }
}

// The key decays in W of one row: t = beta dKb o E; dk += t, dG += t o k.
inline void key_decay_terms(int64_t n, float beta, const float* __restrict dkb, const float* __restrict E,
                            const float* __restrict k, float* __restrict dk, float* __restrict dG) {
  for (int64_t c = 0; c < n; ++c) {
    const float t = beta * dkb[c] * E[c];
    dk[c] += t;
    dG[c] += t * k[c];
  }
}

// The gradients of chunk n (slot m, chunk m of the head's rows in grads), given dS =
// dL/dS' in s.dS: writes dq, dk, dv, dbeta and dg of its rows and replaces s.dS by dL/dS
// for the state entering the chunk.
void backward_chunk(const ChunkedParams& p, HeadArrays& a, int64_t m, int64_t n, int64_t last, HeadGrads& grads,
                    Scratch& s) {
  const int64_t C = p.C, K = p.K, V = p.V, KV = K + V;
  const float* q = p.q + n * C * K;
  const float* k = p.k + n * C * K;
  const float* v = p.v + n * C * V;
  const float* beta = p.beta + n * C;
  const float* dO = grads.d_o.data() + m * C * V;
  const float* d = a.d_of(m);
  const float* E = a.e_of(m);
  const float* wdec = a.wdec_of(m);
  const float* M = a.m_of(m);
  const float* T = a.t_of(m);
  const float* Q = a.q_of(m);
  const float* WU = a.wu_of(m);
  const float* vn = a.vnew_of(m);
  const float* S = a.h.data() + (n % p.NT) * K * V;
  const float* lambda_e = E + (C - 1) * K;
  float* dS = s.dS.data();
  float* dq = grads.dq.data() + m * C * K;
  float* dk = grads.dk.data() + m * C * K;
  float* dv = grads.dv.data() + m * C * V;
  float* dbeta = grads.dbeta.data() + m * C;
  float* dG = s.dG.data();
  float* dlambda = s.dlambda.data();
  float* dwu = s.dwu.data();  // [dW | dU]
  float* dvn = dwu + K;       // dU = dV_new, row stride K + V
  float* kd = s.kd.data();    // K o e^{Lambda - G}
  times_factors(k, wdec, C, K, kd);
  pair_decays(p, d, s.pairs.data());
  reference_decays(p, k, d, Pass::backward, s);

  // dO as op(A) and op(B), and S^T as op(B), each read by two products.
  const SharedA dO_a = share_a(p, C, V, {dO, V}, s.room_a);
  const SharedB dO_b = share_b(p, C, V, {dO, V}, s.room_b1);
  const SharedB St_b = share_b(p, V, K, {S, V, true}, s.room_b2);
  // dV_new = scale Q^T dO + (K o e^{Lambda - G}) dh.
  product_shared_b(p, C, V, C, {Q, C, true}, dO_b, dvn, KV, p.scale);
  tile_product(p.precision, C, V, K, {kd, K}, {dS, V}, dvn, KV, 1.0f, 1.0f);
  // Readout through S: dqe = scale dO S^T; dq = dqe o E; dG = dqe o q o E. Writes into
  // the state: d(K o e^{Lambda - G}) = V_new dh^T; the pairs (last, j), j < last.
  float* dqe = s.dqe.data();
  product_shared(p, C, K, V, dO_a, St_b, dqe, K, p.scale);
  float* dkd = s.Y.data();
  tile_product(p.precision, C, K, V, {vn, V}, {dS, V, true}, dkd, K);
  for (int64_t c = 0; c < K; ++c) dlambda[c] = lambda_e[c] * dot(S + c * V, dS + c * V, V);
  for (int64_t i = 0; i < last; ++i) {
    const int64_t x = i * K;
    readout_write_terms(K, dqe + x, E + x, q + x, dkd + x, wdec + x, k + x, dq + x, dk + x, dG + x, dlambda);
  }
  const int64_t x_last = last * K;
  readout_terms(C * K - x_last, dqe + x_last, E + x_last, q + x_last, dkd + x_last, wdec + x_last, dq + x_last,
                dk + x_last, dG + x_last);
  // The state entering: dS <- Diag(e^Lambda) dh + scale (q o E)^T dO - W^T dV_new.
  float* qe = s.xs.data();
  times_factors(q, E, C, K, qe);
  for (int64_t c = 0; c < K; ++c)
    for (int64_t x = 0; x < V; ++x) dS[c * V + x] *= lambda_e[c];
  product_shared_b(p, K, V, C, {qe, K, true}, dO_b, dS, V, p.scale, 1.0f);
  tile_product(p.precision, K, V, C, {WU, KV, true}, {dvn, KV}, dS, V, -1.0f, 1.0f);
  // Through Q: dQ = scale dO V_new^T (i >= j).
  float* dQ = s.F.data();
  product_shared_a(p, C, C, V, dO_a, {vn, V, true}, dQ, C, p.scale);
  for (int64_t i = 0; i < C; ++i) add_scaled_pair(K, dQ[i * C + i], q + i * K, k + i * K, dq + i * K, dk + i * K);
  float* Y = s.Y.data();
  decayed_lower_times(p, dQ, k, Y, s);
  add_query_terms(C * K, q, Y, dq, dG);
  // The WY form: dW = -dV_new S^T, dU = dV_new; [dKb | dVb] = T^T [dW | dU];
  // dA = -[dKb | dVb] [W | U]^T.
  product_shared_b(p, C, K, V, {dvn, KV}, St_b, dwu, KV, -1.0f);
  float* dkvb = s.kvb.data();
  tile_product(p.precision, C, KV, C, {T, C, true}, {dwu, KV}, dkvb, KV);
  float* dA = s.dA.data();
  tile_product(p.precision, C, C, KV, {dkvb, KV}, {WU, KV, true}, dA, C, -1.0f);
  for (int64_t i = 0; i < C; ++i) {
    const float b = beta[i];
    const float* dkb = dkvb + i * KV;
    const float* dbv = dkb + K;
    const float* Ei = E + i * K;
    const float* ki = k + i * K;
    key_decay_terms(K, b, dkb, Ei, ki, dk + i * K, dG + i * K);
    float* dvi = dv + i * V;
    for (int64_t x = 0; x < V; ++x) dvi[x] = b * dbv[x];
    // Through A = diag(beta) M: dbeta_i += sum_j dA_ij M_ij; F = diag(beta) dA, i > j.
    const float* dAi = dA + i * C;
    dbeta[i] = dot3(dkb, Ei, ki, K) + dot(dbv, v + i * V, V) + dot(dAi, M + i * C, i);
    float* Fi = dA + i * C;  // in place: row i of dA is spent
    for (int64_t j = 0; j < i; ++j) Fi[j] = b * dAi[j];
  }
  const float* F = dA;
  float* Z = s.Z.data();
  decayed_lower_times(p, F, k, Y, s);
  decayed_upper_times(p, dQ, q, F, k, Z, s);
  add_key_pair_terms(C * K, k, Y, Z, dk, dG);
  for (int64_t c = 0; c < K; ++c) dG[(C - 1) * K + c] += dlambda[c];
  float* dg = grads.dg.data() + m * C * K;
  std::memcpy(dg + (C - 1) * K, dG + (C - 1) * K, K * sizeof(float));
  for (int64_t i = C - 2; i >= 0; --i)
    for (int64_t c = 0; c < K; ++c) dg[i * K + c] = dg[(i + 1) * K + c] + dG[i * K + c];
}

// d_o [B, T, H, V] and the gradients in the API layout.
void backward_chunked(const ChunkedParams& p, const HeadCopies& copies, const float* d_o, const float* dht,
                      const KdaGrads& grads) {
#pragma omp parallel
  {
    Scratch s(p);
    HeadArrays a(p, p.NT, true);
    HeadGrads g(p);
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < p.BH; ++bh) {
      const int64_t KV = p.K * p.V;
      copies.head_in(bh, d_o, g.d_o.data(), p.V);
      initial_state(p, bh, a.h.data());
      for (int64_t c = 0; c < p.NT; ++c) {
        const int64_t n = bh * p.NT + c;
        phase_a(p, a, c, n, s);
        state_step(p, a, c, n, a.h.data() + c * KV, c + 1 < p.NT ? a.h.data() + (c + 1) * KV : nullptr, s);
      }
      copy_or_zero(dht ? dht + bh * KV : nullptr, KV, s.dS.data());
      for (int64_t c = p.NT - 1; c >= 0; --c) {
        const int64_t last = std::min(p.C, p.T - c * p.C) - 1;
        backward_chunk(p, a, c, bh * p.NT + c, last, g, s);
      }
      if (grads.dh0) std::memcpy(grads.dh0 + bh * KV, s.dS.data(), KV * sizeof(float));
      copies.grads_out(bh, g, grads);
    }
  }
}

// What forward keeps for backward: the inputs in the chunked layout (q and k normalized
// when asked for, with their rstd).
struct ChunkKdaSaved : KdaSaved {
  AlignedBuffer q, k, v, g, beta, q_rstd, k_rstd;
};

int64_t chunked_rows(const KdaParams& p) { return p.B * p.H * p.NT() * p.C; }

// The chunked input buffers of a call, filled by the copies of input_copies.
std::shared_ptr<ChunkKdaSaved> chunked_inputs(const KdaParams& p) {
  const int64_t rows = chunked_rows(p);
  auto in = std::make_shared<ChunkKdaSaved>();
  in->q = AlignedBuffer(rows * p.K), in->k = AlignedBuffer(rows * p.K), in->v = AlignedBuffer(rows * p.V);
  in->g = AlignedBuffer(rows * p.K), in->beta = AlignedBuffer(rows);
  if (p.use_qk_l2norm_in_kernel) in->q_rstd = AlignedBuffer(rows), in->k_rstd = AlignedBuffer(rows);
  return in;
}

// The layout of the copies of a call, none made yet.
HeadCopies layout_of(const KdaParams& p) {
  HeadCopies copies;
  copies.T = p.T, copies.H = p.H, copies.C = p.C, copies.K = p.K, copies.V = p.V, copies.head_rows = p.NT() * p.C;
  return copies;
}

// The forward's copies: the inputs into `in` (q and k then L2-normalized when asked for).
HeadCopies input_copies(const KdaParams& p, ChunkKdaSaved& in) {
  HeadCopies copies = layout_of(p);
  copies.in = {{p.q, in.q.data(), p.K},
               {p.k, in.k.data(), p.K},
               {p.v, in.v.data(), p.V},
               {p.gk, in.g.data(), p.K},
               {p.beta, in.beta.data(), 1}};
  if (p.use_qk_l2norm_in_kernel)
    copies.norm_in = {in.q.data(), in.k.data(), in.q_rstd.data(), in.k_rstd.data()};
  return copies;
}

ChunkedParams chunked_params(const KdaParams& p, const ChunkKdaSaved& in) {
  ChunkedParams c;
  c.BH = p.B * p.H, c.T = p.T, c.NT = p.NT(), c.C = p.C, c.K = p.K, c.V = p.V;
  c.scale = p.scale;
  c.precision = p.precision;
  c.q = in.q.data(), c.k = in.k.data(), c.v = in.v.data(), c.g = in.g.data(), c.beta = in.beta.data();
  c.h0 = p.h0;
  return c;
}

}  // namespace

std::shared_ptr<const KdaSaved> chunk_kda_forward_cpu(const KdaParams& p, float* o, float* ht, bool save) {
  std::shared_ptr<ChunkKdaSaved> in = chunked_inputs(p);
  forward_chunked(chunked_params(p, *in), input_copies(p, *in), o, ht);
  return save ? in : nullptr;
}

void chunk_kda_backward_cpu(const KdaParams& p, const KdaSaved& saved, const float* d_o, const float* dht,
                            const KdaGrads& grads) {
  const auto& in = static_cast<const ChunkKdaSaved&>(saved);
  HeadCopies copies = layout_of(p);
  if (p.use_qk_l2norm_in_kernel) copies.norm_out = {in.q.data(), in.k.data(), in.q_rstd.data(), in.k_rstd.data()};
  backward_chunked(chunked_params(p, in), copies, d_o, dht, grads);
}

}  // namespace lat::linear_attention
