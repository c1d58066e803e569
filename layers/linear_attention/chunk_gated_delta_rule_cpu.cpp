// CPU kernel of the chunkwise gated delta rule, forward and backward (ALGORITHMS.md 2.4;
// Yang et al. 2024 "Parallelizing Linear Transformers with the Delta Rule", sec. 3, and
// Yang et al. 2025 "Gated Delta Networks", sec. 3.3). Letters as in common.h; BH = B*H,
// N = BH*NT chunks in all, chunk n = bh * NT + c.
//
// Per chunk (rows i, j in [0, C); G the chunk-local inclusive cumsum of g, gamma = e^G,
// Gamma_ij = e^{G_i - G_j} for i >= j, Lambda = G_{C-1}; padded rows have g = 0, so
// Lambda is the cumsum at the last valid row and every padded row contributes zero):
//   A = strictly lower part of diag(beta) (K K^T o Gamma),   T = (I + A)^-1
//   W = T diag(beta gamma) K,   U = T diag(beta) V              (the UT / WY transform)
//   V_new = U - W S_c                                            (the effective writes)
//   S_{c+1} = e^Lambda S_c + K^T diag(e^{Lambda - G}) V_new
//   O = scale diag(gamma) Q S_c + (scale Q K^T o Gamma o M) V_new   (M: lower incl. diag)
// Every exponent is a difference G_i - G_j with i >= j, Lambda - G_i, or G_i: all <= 0
// because g <= 0, so nothing overflows for any decay; the upper triangle is never
// exponentiated (it is written as 0).
//
// Backward (dh_c = dL/dS_{c+1}, the state leaving chunk c; S_c = the state entering it):
//   dV_new = (scale Q K^T o Gamma o M)^T dO + diag(e^{Lambda - G}) K dh_c
//   dh_{c-1} = e^Lambda dh_c + (scale diag(gamma) Q)^T dO - W^T dV_new      (reverse pass)
//   P = scale (dO V_new^T) o Gamma o M
//   dQ = scale diag(gamma) dO S_c^T + P K
//   dK = diag(e^{Lambda - G}) V_new dh_c^T + P^T Q        (+ the WY terms below)
//   dG: every G-dependent factor's gradient times the factor: the score pairs i > j, the
//       readout decay gamma_i, the state decay e^Lambda and the write decays e^{Lambda - G_j}
//   dW = -dV_new S_c^T, dU = dV_new
//   [dKbg | dVb] = T^T [dW | dU];  dA = -T^T dT T^T with dT = [dW | dU] [diag(beta gamma) K |
//       diag(beta) V]^T, i.e. dA = -[dKbg | dVb] [W | U]^T (only i > j is read);
//   dk += beta gamma dKbg,  dv = beta dVb,
//       dbeta = gamma (dKbg . k) + dVb . v,  dG += beta gamma (dKbg . k)
//   through A_ij = beta_i (k_i . k_j) Gamma_ij with E = dA o Gamma (i > j):
//       dbeta_i += sum_j E_ij (k_i . k_j),  dK += (diag(beta) E + (diag(beta) E)^T) K,
//       dG_i += sum_j dA_ij A_ij - sum_j dA_ji A_ji
//   dg = reverse cumsum of dG within the chunk.
//
// Layout. The kernel works in the per-head chunked layout of chunk_layout.h ([BH, NT*C, D],
// rows t >= T zero, g and beta included): the API-layout inputs are copied in once (q and
// k L2-normalized there when asked for), the outputs and gradients copied back out, head
// by head around the head's chunks in the per-head schedule (see LayoutCopies).
//
// Schedule. Chunk n = bh * NT + c; every per-chunk input and output array has one stride
// over n, the intermediates (Arrays) one over chunk(n), their own index. Every
// product is a single-threaded tile_gemm on one chunk's tiles, which stay in the core's
// caches; no thread team starts per product. Phase A (before the forward state pass)
// computes G, Gamma, W, U and the decayed keys; phase B (after it) the outputs. The
// backward recomputes phase A and the state pass, then runs B1 (everything that needs no
// dh), the reverse state pass, and B2 (the rest). With at least as many heads as threads,
// one OpenMP loop over heads runs each head's chunks through every phase in order (one
// thread team per pass, one head's intermediates per thread); with fewer, each phase is one OpenMP loop, the per-chunk phases
// over chunks, the state passes over heads, and threads wait for each other at the end of
// each phase (eight thread teams for a forward and backward). See Schedule.
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "autograd/cpu/aligned_buffer.h"
#include "lat/ops.h"
#include "layers/linear_attention/chunk_layout.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention/delta_kernels.h"
#include "layers/linear_attention/qk_l2norm.h"
#include "layers/linear_attention/tile_gemm_bf16.h"
#include "layers/linear_attention/vec16.h"

namespace lat::linear_attention {
namespace {

using cpu::AlignedBuffer;

// One call in the per-head chunked layout ([BH, NT*C, D], rows t >= T zero, including g
// and beta). f32 throughout.
struct ChunkedParams {
  int64_t BH = 0, T = 0, NT = 0, C = 0, K = 0, V = 0;  // T: valid rows per head
  float scale = 1.0f;
  Precision precision = Precision::fp32;  // of the tile products
  const float* q = nullptr;     // [BH, NT*C, K] (already L2-normalized when asked for)
  const float* k = nullptr;     // [BH, NT*C, K]
  const float* v = nullptr;     // [BH, NT*C, V]
  const float* g = nullptr;     // [BH, NT*C] log-decay <= 0, or null for the delta rule (g = 0)
  const float* beta = nullptr;  // [BH, NT*C]
  const float* h0 = nullptr;    // [BH, K, V], or null for a zero initial state
};

// Gradients in the chunked layout (every pointer a full, overwritten buffer; dg and dh0
// may be null when not wanted).
struct ChunkedGrads {
  float* dq = nullptr;     // [BH, NT*C, K]
  float* dk = nullptr;     // [BH, NT*C, K]
  float* dv = nullptr;     // [BH, NT*C, V]
  float* dg = nullptr;     // [BH, NT*C]
  float* dbeta = nullptr;  // [BH, NT*C]
  float* dh0 = nullptr;    // [BH, K, V]
};

// Log-decays below this act as this value: e^-100 is below float's range, so the decay is
// 0 either way, while -inf (a full reset) would make G_i - G_j = -inf - (-inf) = NaN.
constexpr float kMinLogDecay = -100.0f;

// Vec16's mask type.
typedef int32_t Mask16 __attribute__((vector_size(64)));

// Lanes l with j0 + l < i: the strictly lower part of row i in the block of columns from j0.
inline Mask16 lanes_below(int64_t j0, int64_t i) {
  const Mask16 iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  return iota < Mask16{} + static_cast<int32_t>(i - j0);
}

int64_t padded16(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// A C x C tile's floats: C * C plus one vector, so that the last row's last 16-column
// block may be loaded and stored whole (lanes_below masks what lies past the row).
int64_t tile_floats(int64_t C) { return C * C + kLanes; }

// bf16 packings (tile_gemm_bf16.h) of one product operand for every chunk, made by the
// first product that reads a chunk's operand and reused by the later ones; empty in fp32.
template <class Packed>
struct ChunkPackings {
  AlignedBuffer words;  // uint32 words in float-sized slots, per_chunk of them per chunk
  int64_t per_chunk = 0;
  std::vector<Packed> of;  // of[n]: chunk n's packing, once made

  ChunkPackings() = default;
  ChunkPackings(int64_t N, int64_t words_per_chunk) : words(N * words_per_chunk), per_chunk(words_per_chunk), of(N) {}
  uint32_t* words_of(int64_t n) { return reinterpret_cast<uint32_t*>(words.data()) + n * per_chunk; }
  // Chunk n's packing for a product, or null in fp32.
  const Packed* get(int64_t n) const { return of.empty() ? nullptr : &of[n]; }
};

// Which pass the arrays serve: the backward keeps more of phase A (K K^T, scale diag(gamma) Q, T).
enum class Pass { forward, backward };

// The intermediates of a run of chunks (every chunk of the call, or one head's), chunk n
// at index chunk(n) = n - first.
struct Arrays {
  int64_t first = 0;  // the chunk held at index 0

  AlignedBuffer G;       // [N, C]        chunk-local inclusive cumsum of g (Lambda = G_{C-1})
  AlignedBuffer gamma;   // [N, C]        e^G (gamma_{C-1} = e^Lambda)
  AlignedBuffer wdecay;  // [N, C]        the write decays e^{Lambda - G}
  AlignedBuffer decay;   // [N, C, C]     Gamma_ij (i >= j), 0 above the diagonal
  AlignedBuffer wu;      // [N, C, K+V]   [W | U]
  AlignedBuffer vnew;    // [N, C, V]     V_new (U until the state pass)
  AlignedBuffer kdecay;  // [N, C, K]     diag(e^{Lambda - G}) K
  AlignedBuffer h;       // [N, K, V]     the state entering each chunk
  // backward only
  AlignedBuffer kk;    // [N, C, C]     K K^T
  AlignedBuffer qg;    // [N, C, K]     scale diag(gamma) Q
  AlignedBuffer tinv;  // [N, C, C]     T
  AlignedBuffer dwu;   // [N, C, K+V]   [dW | dU = dV_new]
  AlignedBuffer dh;    // [N, K, V]     dL/dS_{c+1}
  AlignedBuffer dG;    // [N, C]        dL/dG
  // bf16 only: operands read by more than one product
  ChunkPackings<PackedB> kt;  // K^T as op(B)   (phase A's K K^T; Q K^T in phase B or B1)
  ChunkPackings<PackedB> hb;  // S_c as op(B)   (the state pass; phase B)
  ChunkPackings<PackedB> vb;  // V_new as op(B) (the state pass; phase B)
  ChunkPackings<PackedB> kb;  // K as op(B)     (backward: B1's P K; B2's E K)
  ChunkPackings<PackedB> ht;  // S_c^T as op(B) (backward: B1's dO S_c^T; B2's dV_new S_c^T)
  ChunkPackings<PackedB> dob; // dO as op(B)    (backward: B1; the reverse state pass)

  // For `chunks` chunks (a whole number of heads: the state passes index heads from chunk(bh * NT)).
  Arrays(const ChunkedParams& p, Pass pass, int64_t chunks) {
    const int64_t N = chunks, C = p.C, K = p.K, V = p.V;
    const bool bf16 = p.precision == Precision::bf16;
    // The C x C arrays end in one vector of padding, like a tile (tile_floats).
    G = AlignedBuffer(N * C), gamma = AlignedBuffer(N * C), wdecay = AlignedBuffer(N * C);
    decay = AlignedBuffer(N * C * C + kLanes), wu = AlignedBuffer(N * C * (K + V));
    vnew = AlignedBuffer(N * C * V), kdecay = AlignedBuffer(N * C * K), h = AlignedBuffer(N * K * V);
    if (bf16) kt = {N, packed_b_words(K, C)}, hb = {N, packed_b_words(K, V)}, vb = {N, packed_b_words(C, V)};
    if (pass == Pass::forward) return;
    kk = AlignedBuffer(N * C * C + kLanes), qg = AlignedBuffer(N * C * K), tinv = AlignedBuffer(N * C * C + kLanes);
    dwu = AlignedBuffer(N * C * (K + V)), dh = AlignedBuffer(N * K * V), dG = AlignedBuffer(N * C);
    if (bf16) kb = {N, packed_b_words(C, K)}, ht = {N, packed_b_words(V, K)}, dob = {N, packed_b_words(C, V)};
  }

  int64_t chunk(int64_t n) const { return n - first; }
};

// A product operand: its floats and, for bf16, its packing when one is shared (else null:
// the product packs the floats itself).
struct OperandA {
  TileOperand f;
  const PackedA* packed = nullptr;
};
struct OperandB {
  TileOperand f;
  const PackedB* packed = nullptr;
};

// One of the kernel's products in p.precision: tile_product, with the shared packings used
// in bf16 (the same words the product would pack, so the same results).
void product(const ChunkedParams& p, int64_t M, int64_t N, int64_t K, const OperandA& a, const OperandB& b, float* c,
             int64_t ldc, float alpha = 1.0f, float beta = 0.0f) {
  if (p.precision == Precision::bf16 && a.packed && b.packed)
    tile_gemm_bf16(M, N, K, *a.packed, *b.packed, c, ldc, alpha, beta);
  else if (p.precision == Precision::bf16 && a.packed)
    tile_gemm_bf16(M, N, K, *a.packed, b.f, c, ldc, alpha, beta);
  else if (p.precision == Precision::bf16 && b.packed)
    tile_gemm_bf16(M, N, K, a.f, *b.packed, c, ldc, alpha, beta);
  else
    tile_product(p.precision, M, N, K, a.f, b.f, c, ldc, alpha, beta);
}

// One thread's tiles for the chunk it is working on.
struct Scratch {
  AlignedBuffer kk;     // [C, C]  K K^T (forward; the backward keeps it in Arrays)
  AlignedBuffer tile;   // [C, C]
  AlignedBuffer tile2;  // [C, C]
  AlignedBuffer kvb;    // [C, K+V]  [diag(beta gamma) K | diag(beta) V]; in B2 [dKbg | dVb]
  AlignedBuffer rows;   // [C, K]
  AlignedBuffer solve;  // the triangular inverse's rows, see invert_unit_lower
  AlignedBuffer below;  // [padded16(C)]  per column j, a sum over the rows i > j
  AlignedBuffer words;  // bf16: a chunk's packing of K or dO as op(A), for two products
  PackedA packed;       // bf16: that packing

  explicit Scratch(const ChunkedParams& p)
      : kk(tile_floats(p.C)),
        tile(tile_floats(p.C)),
        tile2(tile_floats(p.C)),
        kvb(p.C * (p.K + p.V)),
        rows(p.C * p.K),
        solve(p.C * padded16(p.C) + p.C),
        below(padded16(p.C)),
        words(p.precision == Precision::bf16 ? packed_a_words(p.C, std::max(p.K, p.V)) : 0),
        packed{} {}

  uint32_t* packing_words() { return reinterpret_cast<uint32_t*>(words.data()); }
};

// Runs body(i, scratch) for i in [0, count), OpenMP over i, one Scratch per thread.
template <class Body>
void parallel_for(const ChunkedParams& p, int64_t count, const Body& body) {
#pragma omp parallel
  {
    Scratch s(p);
#pragma omp for schedule(dynamic)
    for (int64_t i = 0; i < count; ++i) body(i, s);
  }
}

// Runs body(bh, arrays, scratch) for every head bh, OpenMP over the heads, with one
// Scratch and one head's Arrays per thread: every head a thread works on reuses the same
// intermediates' memory, which stays in the core's caches (arrays for all heads would be
// written cold, the whole call's intermediates being larger than a core's L2).
template <class Body>
void parallel_heads(const ChunkedParams& p, Pass pass, const Body& body) {
#pragma omp parallel
  {
    Scratch s(p);
    Arrays a(p, pass, p.NT);
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < p.BH; ++bh) {
      a.first = bh * p.NT;
      body(bh, a, s);
    }
  }
}

// The chunk-local cumsum G [C], its row decays gamma = e^G and e^{Lambda - G} [C] (in one
// vector loop, for every later use), and the decay matrix Gamma [C, C] of chunk n, in a.
void chunk_decays(const ChunkedParams& p, Arrays& a, int64_t n) {
  const int64_t m = a.chunk(n);
  const int64_t C = p.C;
  float* G = a.G.data() + m * C;
  float* gamma = a.gamma.data() + m * C;
  float* wdecay = a.wdecay.data() + m * C;
  float* D = a.decay.data() + m * C * C;
  float acc = 0.0f;
  for (int64_t i = 0; i < C; ++i) {
    if (p.g) acc += std::max(p.g[n * C + i], kMinLogDecay);
    G[i] = acc;
  }
  const float lambda = G[C - 1];
  for (int64_t i = 0; i < C; ++i) {
    gamma[i] = exp_nonpositive(G[i]);
    wdecay[i] = exp_nonpositive(lambda - G[i]);
  }
  for (int64_t i = 0; i < C; ++i) {
    float* row = D + i * C;
    for (int64_t j = 0; j <= i; ++j) row[j] = exp_nonpositive(G[i] - G[j]);
    std::fill(row + i + 1, row + C, 0.0f);
  }
}

// Row i of x [C, D] scaled by s(i), into out [C, D].
template <class Scale>
void scale_rows(const float* x, int64_t C, int64_t D, const Scale& s, float* out) {
  for (int64_t i = 0; i < C; ++i) {
    const float f = s(i);
    for (int64_t j = 0; j < D; ++j) out[i * D + j] = f * x[i * D + j];
  }
}

// scores *= scale Gamma in place on one C x C tile (select: the upper triangle and
// underflowed decays give exact zeros, whatever the product held there).
void mask_scores(const ChunkedParams& p, const float* D, float* scores) {
  const float scale = p.scale;  // a local: a store through scores could alias p.scale
  for (int64_t x = 0; x < p.C * p.C; ++x) scores[x] = D[x] != 0.0f ? scale * scores[x] * D[x] : 0.0f;
}

// T = (I + A)^-1 of chunk n by forward substitution, row by row: T_i = e_i -
// sum_{j<i} A_ij T_j. I + A is unit lower triangular, so T exists. Row j of T is zero
// beyond column j, so 16-column slab v of T_i sums only over 16 v <= j < i; each slab's
// sum runs in four independent accumulators (a single running row would chain every
// update through a store and a reload). The rows are built with a row stride padded to
// whole vectors: in T itself when C is a whole number of vectors, else in `scratch`
// [C * padded16(C) + C] and copied into T.
void invert_unit_lower(const ChunkedParams& p, int64_t n, const float* kk, const float* D, float* T,
                       float* scratch) {
  const int64_t C = p.C, Cp = padded16(C);
  float* rows = Cp == C ? T : scratch;
  float* a = scratch + C * Cp;  // A_ij of the current row i
  const float* beta = p.beta + n * C;
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t j = 0; j < i; ++j) a[j] = beta[i] * kk[i * C + j] * D[i * C + j];
    float* ti = rows + i * Cp;
    for (int64_t x = 0; x < Cp; x += 16) {
      Vec16 acc[4] = {};
      int64_t j = x;
      for (; j + 4 <= i; j += 4)
        for (int64_t u = 0; u < 4; ++u) acc[u] += a[j + u] * load16(rows + (j + u) * Cp + x);
      for (; j < i; ++j) acc[0] += a[j] * load16(rows + j * Cp + x);
      store16(ti + x, -((acc[0] + acc[1]) + (acc[2] + acc[3])));
    }
    ti[i] = 1.0f;
    if (rows != T) std::memcpy(T + i * C, ti, C * sizeof(float));
  }
}

// Phase A on chunk n: G, Gamma, the decayed keys, K K^T, T, [W | U] and a copy of U (and,
// for the backward, K K^T, scale diag(gamma) Q and T kept in a.kk, a.qg, a.tinv).
void phase_a_chunk(const ChunkedParams& p, Arrays& a, Pass pass, int64_t n, Scratch& s) {
  const int64_t m = a.chunk(n);
  const bool backward = pass == Pass::backward;
  const int64_t C = p.C, K = p.K, V = p.V, KV1 = K + V;
  const float* k = p.k + n * C * K;
  chunk_decays(p, a, n);
  const float* D = a.decay.data() + m * C * C;
  const float* gamma = a.gamma.data() + m * C;
  const float* wdecay = a.wdecay.data() + m * C;
  scale_rows(
      k, C, K, [&](int64_t i) { return wdecay[i]; }, a.kdecay.data() + m * C * K);
  if (backward)
    scale_rows(
        p.q + n * C * K, C, K, [&](int64_t i) { return p.scale * gamma[i]; }, a.qg.data() + m * C * K);
  for (int64_t i = 0; i < C; ++i) {
    const float b = p.beta[n * C + i], bg = b * gamma[i];
    float* row = s.kvb.data() + i * KV1;
    for (int64_t x = 0; x < K; ++x) row[x] = bg * k[i * K + x];
    for (int64_t x = 0; x < V; ++x) row[K + x] = b * p.v[(n * C + i) * V + x];
  }
  float* kk = backward ? a.kk.data() + m * C * C : s.kk.data();
  const PackedA* ka = nullptr;  // bf16: K as op(A), and from its words K^T as op(B)
  if (p.precision == Precision::bf16) {
    s.packed = pack_a_bf16(C, K, {k, K}, s.packing_words());
    ka = &s.packed;
    a.kt.of[m] = pack_b_from_a(C, K, s.packed, a.kt.words_of(m));
  }
  product(p, C, C, K, {{k, K}, ka}, {{k, K, true}, a.kt.get(m)}, kk, C);
  float* T = backward ? a.tinv.data() + m * C * C : s.tile.data();
  invert_unit_lower(p, n, kk, D, T, s.solve.data());
  float* wu = a.wu.data() + m * C * KV1;
  tile_product(p.precision, C, KV1, C, {T, C}, {s.kvb.data(), KV1}, wu, KV1);
  for (int64_t i = 0; i < C; ++i) std::memcpy(a.vnew.data() + (m * C + i) * V, wu + i * KV1 + K, V * sizeof(float));
}

// Chunk c of head bh in the forward state pass: V_new = U - W S_c over the copy of U and
// S_{c+1} = e^Lambda S_c + K^T diag(e^{Lambda - G}) V_new into h (c = 0 first sets S_0
// from h0) or, after the last chunk, into ht when it is not null.
void state_step(const ChunkedParams& p, Arrays& a, int64_t bh, int64_t c, float* ht) {
  const int64_t NT = p.NT, C = p.C, K = p.K, V = p.V, KV1 = K + V, KV = K * V;
  float* h = a.h.data() + a.chunk(bh * NT) * KV;
  if (c == 0) copy_or_zero(p.h0 ? p.h0 + bh * KV : nullptr, KV, h);
  const int64_t n = bh * NT + c, m = a.chunk(n);
  const float* S = h + c * KV;
  float* vn = a.vnew.data() + m * C * V;
  if (p.precision == Precision::bf16) a.hb.of[m] = pack_b_bf16(K, V, {S, V}, a.hb.words_of(m));
  product(p, C, V, K, {{a.wu.data() + m * C * KV1, KV1}}, {{S, V}, a.hb.get(m)}, vn, V, -1.0f, 1.0f);
  if (p.precision == Precision::bf16) a.vb.of[m] = pack_b_bf16(C, V, {vn, V}, a.vb.words_of(m));
  float* next = c + 1 < NT ? h + (c + 1) * KV : (ht ? ht + bh * KV : nullptr);
  if (!next) return;
  const float e = a.gamma.data()[m * C + C - 1];
  for (int64_t x = 0; x < KV; ++x) next[x] = e * S[x];
  product(p, K, V, C, {{a.kdecay.data() + m * C * K, K, true}}, {{vn, V}, a.vb.get(m)}, next, V, 1.0f, 1.0f);
}

// Chunk c of head bh in the reverse state pass: dV_new += diag(e^{Lambda - G}) K dh_c (on
// top of the local part already in dwu) and dh_{c-1} = e^Lambda dh_c + (scale diag(gamma)
// Q)^T dO - W^T dV_new (c = NT - 1 first sets dh_{NT-1} from dht); chunk 0 writes
// d initial_state into dh0.
void reverse_state_step(const ChunkedParams& p, Arrays& a, int64_t bh, int64_t c, const float* d_o,
                        const float* dht, float* dh0) {
  const int64_t NT = p.NT, C = p.C, K = p.K, V = p.V, KV1 = K + V, KV = K * V;
  float* dh = a.dh.data() + a.chunk(bh * NT) * KV;
  if (c == NT - 1) copy_or_zero(dht ? dht + bh * KV : nullptr, KV, dh + (NT - 1) * KV);
  const int64_t n = bh * NT + c, m = a.chunk(n);
  const float* dS = dh + c * KV;
  float* dvn = a.dwu.data() + m * C * KV1 + K;
  tile_product(p.precision, C, V, K, {a.kdecay.data() + m * C * K, K}, {dS, V}, dvn, KV1, 1.0f, 1.0f);
  float* prev = c > 0 ? dh + (c - 1) * KV : dh0 + bh * KV;
  const float e = a.gamma.data()[m * C + C - 1];
  for (int64_t x = 0; x < KV; ++x) prev[x] = e * dS[x];
  product(p, K, V, C, {{a.qg.data() + m * C * K, K, true}}, {{d_o + n * C * V, V}, a.dob.get(m)}, prev, V, 1.0f, 1.0f);
  tile_product(p.precision, K, V, C, {a.wu.data() + m * C * KV1, KV1, true}, {dvn, KV1}, prev, V, -1.0f, 1.0f);
}

// Backward phase B1 on chunk n, everything before the reverse state pass: the local
// dV_new, dq, the score part of dk, and the dG terms of the scores and of the readout decay.
//
// dG is summed from terms that each carry their own decay factor (Gamma_ij for pairs
// i > j, gamma_i, e^{Lambda - G_j}), never as q . dq - k . dk: that difference cancels
// O(1) diagonal terms and loses every digit of a dg that strong decay makes tiny (the
// pairwise form of ALGORITHMS.md 2.3, precision note).
void phase_b1_chunk(const ChunkedParams& p, Arrays& a, const float* d_o,
                    const ChunkedGrads& grads, int64_t n, Scratch& s) {
  const int64_t m = a.chunk(n);
  const int64_t C = p.C, K = p.K, V = p.V, KV1 = K + V, KV = K * V;
  const float* gamma = a.gamma.data() + m * C;
  const float* D = a.decay.data() + m * C * C;
  const float* q = p.q + n * C * K;
  const float* k = p.k + n * C * K;
  const float* dO = d_o + n * C * V;
  const float* vnew = a.vnew.data() + m * C * V;
  float* dq = grads.dq + n * C * K;
  float* dg = a.dG.data() + m * C;
  const float* h = a.h.data() + m * KV;
  const bool bf16 = p.precision == Precision::bf16;
  if (bf16) {
    a.dob.of[m] = pack_b_bf16(C, V, {dO, V}, a.dob.words_of(m));
    a.ht.of[m] = pack_b_bf16(V, K, {h, V, true}, a.ht.words_of(m));
    a.kb.of[m] = pack_b_bf16(C, K, {k, K}, a.kb.words_of(m));
    s.packed = pack_a_bf16(C, V, {dO, V}, s.packing_words());
  }
  const PackedA* doa = bf16 ? &s.packed : nullptr;  // dO as op(A)
  // dV_new, local part: (scale Q K^T o Gamma o M)^T dO.
  float* scores = s.tile.data();
  product(p, C, C, K, {{q, K}}, {{k, K, true}, a.kt.get(m)}, scores, C);
  mask_scores(p, D, scores);
  product(p, C, V, C, {{scores, C, true}}, {{dO, V}, a.dob.get(m)}, a.dwu.data() + m * C * KV1 + K, KV1);
  // Score pairs i > j: scale Gamma_ij (q_i . k_j)(dO_i . V_new_j) adds to dG_i and
  // subtracts from dG_j. Then P = scale (dO V_new^T) o Gamma o M in place.
  float* P = s.tile2.data();
  product(p, C, C, V, {{dO, V}, doa}, {{vnew, V, true}}, P, C);
  float* below = s.below.data();
  std::fill(below, below + padded16(C), 0.0f);
  for (int64_t i = 0; i < C; ++i) {
    Vec16 row = {};
    for (int64_t j0 = 0; j0 < i; j0 += kLanes) {
      const Vec16 term = lanes_below(j0, i) ? load16(scores + i * C + j0) * load16(P + i * C + j0) : Vec16{};
      row += term;
      store16(below + j0, load16(below + j0) + term);
    }
    dg[i] = lane_sum(row);
  }
  for (int64_t j = 0; j < C; ++j) dg[j] -= below[j];
  mask_scores(p, D, P);
  // dQ = scale diag(gamma) dO S_c^T + P K; the first term gives dG_i += q_i . dq_i^inter.
  product(p, C, K, V, {{dO, V}, doa}, {{h, V, true}, a.ht.get(m)}, dq, K);
  for (int64_t i = 0; i < C; ++i) {
    const float f = p.scale * gamma[i];
    for (int64_t x = 0; x < K; ++x) dq[i * K + x] *= f;
    dg[i] += dot(q + i * K, dq + i * K, K);
  }
  product(p, C, K, C, {{P, C}}, {{k, K}, a.kb.get(m)}, dq, K, 1.0f, 1.0f);
  // dK, score part: P^T Q.
  tile_product(p.precision, C, K, C, {P, C, true}, {q, K}, grads.dk + n * C * K, K);
}

// Backward phase B2 on chunk n, after the reverse state pass: the inter-chunk part of dk
// with the dG terms of the state and write decays, then the WY backward (dW, dA) giving the
// rest of dk, dv, dbeta and dG, and finally dg.
void phase_b2_chunk(const ChunkedParams& p, Arrays& a, const ChunkedGrads& grads, int64_t n,
                    Scratch& s) {
  const int64_t m = a.chunk(n);
  const int64_t NT = p.NT, C = p.C, K = p.K, V = p.V, KV1 = K + V, KV = K * V;
  const float* gamma = a.gamma.data() + m * C;
  const float* wdecay = a.wdecay.data() + m * C;
  const float* D = a.decay.data() + m * C * C;
  const float* k = p.k + n * C * K;
  const float* beta = p.beta + n * C;
  const float* h = a.h.data() + m * KV;
  const float* dh = a.dh.data() + m * KV;
  float* dwu = a.dwu.data() + m * C * KV1;
  float* dk = grads.dk + n * C * K;
  float* dg = a.dG.data() + m * C;
  // dK^inter = diag(e^{Lambda - G}) V_new dh_c^T. The state decay e^Lambda and the write
  // decays e^{Lambda - G_j} put e^Lambda <S_c, dh_c> on Lambda = G_last and the pairs
  // (last, j), j < last, with k_j . dk_j^inter (last: the last valid row; the pair
  // (last, last) has no decay and is left out).
  float* dk_inter = s.rows.data();
  tile_product(p.precision, C, K, V, {a.vnew.data() + m * C * V, V}, {dh, V, true}, dk_inter, K);
  const int64_t last = std::min(C, p.T - (n % NT) * C) - 1;
  float acc = gamma[C - 1] * dot(h, dh, KV);
  for (int64_t i = 0; i < C; ++i) {
    const float f = wdecay[i];
    for (int64_t x = 0; x < K; ++x) dk_inter[i * K + x] *= f;
    if (i < last) {
      const float term = dot(k + i * K, dk_inter + i * K, K);
      acc += term;
      dg[i] -= term;
    }
    for (int64_t x = 0; x < K; ++x) dk[i * K + x] += dk_inter[i * K + x];
  }
  dg[last] += acc;
  // dW = -dV_new S_c^T, the left part of [dW | dU].
  product(p, C, K, V, {{dwu + K, KV1}}, {{h, V, true}, a.ht.get(m)}, dwu, KV1, -1.0f);
  // WY backward: [dKbg | dVb] = T^T [dW | dU], dA = -[dKbg | dVb] [W | U]^T.
  const float* T = a.tinv.data() + m * C * C;
  float* dkvb = s.kvb.data();
  tile_product(p.precision, C, KV1, C, {T, C, true}, {dwu, KV1}, dkvb, KV1);
  float* dA = s.tile.data();
  tile_product(p.precision, C, C, KV1, {dkvb, KV1}, {a.wu.data() + m * C * KV1, KV1, true}, dA, C, -1.0f);
  const float* kk = a.kk.data() + m * C * C;
  float* E = s.tile2.data();  // diag(beta) E + (diag(beta) E)^T
  float* dbeta = grads.dbeta + n * C;
  for (int64_t i = 0; i < C; ++i) {
    const int64_t r = n * C + i;
    const float gi = gamma[i], b = beta[i];
    const float* dkbg = dkvb + i * KV1;
    const float sk = dot(dkbg, k + i * K, K);
    for (int64_t x = 0; x < K; ++x) dk[i * K + x] += b * gi * dkbg[x];
    for (int64_t x = 0; x < V; ++x) grads.dv[r * V + x] = b * dkbg[K + x];
    dbeta[i] = gi * sk + dot(dkbg + K, p.v + r * V, V);
    dg[i] += b * gi * sk;
  }
  // Through A_ij = beta_i (k_i . k_j) Gamma_ij, i > j: E's strictly lower part row by row
  // (every 16-column block of each row, zeros from column i on; a block that runs past
  // its row spills zeros into the next row, which is written after it), then E += E^T.
  float* below = s.below.data();
  std::fill(below, below + padded16(C), 0.0f);
  for (int64_t i = 0; i < C; ++i) {
    const float b = beta[i];
    Vec16 db = {};
    for (int64_t j0 = 0; j0 < C; j0 += kLanes) {
      const Mask16 m = lanes_below(j0, i);
      const Vec16 e = m ? load16(dA + i * C + j0) * load16(D + i * C + j0) : Vec16{};
      const Vec16 ekk = m ? e * load16(kk + i * C + j0) : Vec16{};
      db += ekk;
      store16(below + j0, load16(below + j0) + b * ekk);
      store16(E + i * C + j0, b * e);
    }
    const float sum = lane_sum(db);
    dbeta[i] += sum;
    dg[i] += b * sum;
  }
  for (int64_t j = 0; j < C; ++j) dg[j] -= below[j];
  float* Et = s.tile.data();  // dA is spent
  pack_transposed(E, C, C, C, Et, C);
  for (int64_t x = 0; x < C * C; ++x) E[x] += Et[x];
  product(p, C, K, C, {{E, C}}, {{k, K}, a.kb.get(m)}, dk, K, 1.0f, 1.0f);
  if (grads.dg) {
    float sum = 0.0f;
    for (int64_t i = C - 1; i >= 0; --i) {
      sum += dg[i];
      grads.dg[n * C + i] = sum;
    }
  }
}

// Phase B on chunk n: O = (scale Q K^T o Gamma o M) V_new + scale diag(gamma) Q S_c.
void phase_b_chunk(const ChunkedParams& p, Arrays& a, float* o, int64_t n, Scratch& s) {
  const int64_t m = a.chunk(n);
  const int64_t C = p.C, K = p.K, V = p.V;
  const float* q = p.q + n * C * K;
  const float* gamma = a.gamma.data() + m * C;
  float* scores = s.tile.data();
  product(p, C, C, K, {{q, K}}, {{p.k + n * C * K, K, true}, a.kt.get(m)}, scores, C);
  mask_scores(p, a.decay.data() + m * C * C, scores);
  float* out = o + n * C * V;
  product(p, C, V, C, {{scores, C}}, {{a.vnew.data() + m * C * V, V}, a.vb.get(m)}, out, V);
  scale_rows(
      q, C, K, [&](int64_t i) { return p.scale * gamma[i]; }, s.rows.data());
  product(p, C, V, K, {{s.rows.data(), K}}, {{a.h.data() + m * K * V, V}, a.hb.get(m)}, out, V, 1.0f, 1.0f);
}

// How a call's phases are spread over the threads. per_phase: one thread team per phase,
// each phase's chunks (or, in the state passes, heads) shared out, with a barrier between
// phases (a forward is three teams, a backward five). per_head: one team in all, each
// thread running every phase of its heads' chunks in order, which keeps a chunk's tiles in
// its core's caches from one phase to the next (the head's copied rows and its
// intermediates too: see LayoutCopies and parallel_heads) and has no barrier to wait at for a
// descheduled thread (on a loaded machine, each barrier can cost a time slice); it needs
// at least as many heads as threads to keep them all busy. Both compute every chunk
// with the same operations in the same order, so their results are the same bits.
enum class Schedule { per_phase, per_head };

// per_head when there are at least as many heads (B*H of this call) as threads; the
// thread count is read on the calling thread.
Schedule schedule_of(const ChunkedParams& p) {
  return p.BH >= get_num_threads() ? Schedule::per_head : Schedule::per_phase;
}

// The copies between a call's API-layout arrays and the chunked layout, with what runs on
// the copied rows: `in` before the chunks, then after_in on rows [row0, row0 + rows) (the
// forward's L2 norm), and before_out on the rows (the backward through the norm), then
// `out` after the chunks. per_head copies each head right before its first chunk and right
// after its last, on the thread that works on it, so that phase A reads rows still in the
// core's caches and the copies out read rows just written; per_phase copies every head
// before the first phase and after the last (a thread team each). Every row gets the same
// operations either way, so the bits do not depend on the schedule.
struct LayoutCopies {
  std::vector<ToChunked> in;
  std::vector<FromChunked> out;
  int64_t B = 0, T = 0, H = 0, C = 0;
  std::function<void(int64_t row0, int64_t rows)> after_in, before_out;  // either may be empty

  int64_t head_rows() const { return num_chunks(T, C) * C; }
  void all_in() const {
    if (!in.empty()) to_chunked(in, B, T, H, C);
    if (after_in) after_in(0, B * H * head_rows());
  }
  void all_out() const {
    if (before_out) before_out(0, B * H * head_rows());
    if (!out.empty()) from_chunked(out, B, T, H, C);
  }
  void head_in(int64_t bh) const {
    head_to_chunked(in, bh, T, H, C);
    if (after_in) after_in(bh * head_rows(), head_rows());
  }
  void head_out(int64_t bh) const {
    if (before_out) before_out(bh * head_rows(), head_rows());
    head_from_chunked(out, bh, T, H, C);
  }
};

// Phase A and the forward state pass in the per_phase schedule, shared by the forward and
// the backward.
void forward_states(const ChunkedParams& p, Arrays& a, Pass pass, float* ht) {
  parallel_for(p, p.BH * p.NT, [&](int64_t n, Scratch& s) { phase_a_chunk(p, a, pass, n, s); });
  parallel_for(p, p.BH, [&](int64_t bh, Scratch&) {
    for (int64_t c = 0; c < p.NT; ++c) state_step(p, a, bh, c, ht);
  });
}

// Forward: o [BH, NT*C, V] and, when ht is not null, the final state [BH, K, V]; the
// inputs of p copied in and o copied out by `copies`.
void forward_chunked(const ChunkedParams& p, const LayoutCopies& copies, float* o, float* ht) {
  if (schedule_of(p) == Schedule::per_head) {
    parallel_heads(p, Pass::forward, [&](int64_t bh, Arrays& a, Scratch& s) {
      copies.head_in(bh);
      for (int64_t c = 0; c < p.NT; ++c) {
        phase_a_chunk(p, a, Pass::forward, bh * p.NT + c, s);
        state_step(p, a, bh, c, ht);
        phase_b_chunk(p, a, o, bh * p.NT + c, s);
      }
      copies.head_out(bh);
    });
    return;
  }
  Arrays a(p, Pass::forward, p.BH * p.NT);
  copies.all_in();
  forward_states(p, a, Pass::forward, ht);
  parallel_for(p, p.BH * p.NT, [&](int64_t n, Scratch& s) { phase_b_chunk(p, a, o, n, s); });
  copies.all_out();
}

// Backward from d_o [BH, NT*C, V] and dht [BH, K, V] (null: no gradient on the final
// state), d_o copied in and the gradients copied out by `copies`. Recomputes the forward
// intermediates (nothing is kept between the passes).
void backward_chunked(const ChunkedParams& p, const LayoutCopies& copies, const float* d_o, const float* dht,
                      const ChunkedGrads& grads) {
  AlignedBuffer dh0_scratch(grads.dh0 ? 0 : p.BH * p.K * p.V);
  float* dh0 = grads.dh0 ? grads.dh0 : dh0_scratch.data();
  if (schedule_of(p) == Schedule::per_head) {
    parallel_heads(p, Pass::backward, [&](int64_t bh, Arrays& a, Scratch& s) {
      copies.head_in(bh);
      for (int64_t c = 0; c < p.NT; ++c) {
        phase_a_chunk(p, a, Pass::backward, bh * p.NT + c, s);
        state_step(p, a, bh, c, nullptr);
        phase_b1_chunk(p, a, d_o, grads, bh * p.NT + c, s);
      }
      for (int64_t c = p.NT - 1; c >= 0; --c) {
        reverse_state_step(p, a, bh, c, d_o, dht, dh0);
        phase_b2_chunk(p, a, grads, bh * p.NT + c, s);
      }
      copies.head_out(bh);
    });
    return;
  }
  Arrays a(p, Pass::backward, p.BH * p.NT);
  copies.all_in();
  forward_states(p, a, Pass::backward, nullptr);
  parallel_for(p, p.BH * p.NT, [&](int64_t n, Scratch& s) { phase_b1_chunk(p, a, d_o, grads, n, s); });
  parallel_for(p, p.BH, [&](int64_t bh, Scratch&) {
    for (int64_t c = p.NT - 1; c >= 0; --c) reverse_state_step(p, a, bh, c, d_o, dht, dh0);
  });
  parallel_for(p, p.BH * p.NT, [&](int64_t n, Scratch& s) { phase_b2_chunk(p, a, grads, n, s); });
  copies.all_out();
}

// What forward keeps for backward: the inputs in the chunked layout (workspace buffers,
// so repeated calls do not fault in fresh pages), q and k normalized when asked for, with
// their rstd. The intermediates are recomputed.
struct ChunkDeltaSaved : DeltaSaved {
  AlignedBuffer q, k, v, g, beta, q_rstd, k_rstd;
};

int64_t chunked_rows(const DeltaParams& p) { return p.B * p.H * p.NT() * p.C; }

// The chunked input buffers of a call (filled by the copies of chunked_input_copies).
std::shared_ptr<ChunkDeltaSaved> chunked_inputs(const DeltaParams& p) {
  const int64_t rows = chunked_rows(p);
  auto in = std::make_shared<ChunkDeltaSaved>();
  in->q = AlignedBuffer(rows * p.K), in->k = AlignedBuffer(rows * p.K), in->v = AlignedBuffer(rows * p.V);
  in->beta = AlignedBuffer(rows);
  if (p.g) in->g = AlignedBuffer(rows);
  if (p.use_qk_l2norm_in_kernel) in->q_rstd = AlignedBuffer(rows), in->k_rstd = AlignedBuffer(rows);
  return in;
}

// The forward's copies: the inputs into `in` (q and k then L2-normalized when asked for).
LayoutCopies chunked_input_copies(const DeltaParams& p, ChunkDeltaSaved& in) {
  LayoutCopies copies;
  copies.B = p.B, copies.T = p.T, copies.H = p.H, copies.C = p.C;
  copies.in = {{p.q, in.q.data(), p.K}, {p.k, in.k.data(), p.K}, {p.v, in.v.data(), p.V}, {p.beta, in.beta.data(), 1}};
  if (p.g) copies.in.push_back({p.g, in.g.data(), 1});
  if (p.use_qk_l2norm_in_kernel)
    copies.after_in = [&p, &in](int64_t row0, int64_t rows) {
      l2norm_rows_forward(in.q.data() + row0 * p.K, rows, p.K, in.q_rstd.data() + row0);
      l2norm_rows_forward(in.k.data() + row0 * p.K, rows, p.K, in.k_rstd.data() + row0);
    };
  return copies;
}

ChunkedParams chunked_params(const DeltaParams& p, const ChunkDeltaSaved& in) {
  ChunkedParams c;
  c.BH = p.B * p.H, c.T = p.T, c.NT = p.NT(), c.C = p.C, c.K = p.K, c.V = p.V;
  c.scale = p.scale;
  c.precision = p.precision;
  c.q = in.q.data(), c.k = in.k.data(), c.v = in.v.data();
  c.g = p.g ? in.g.data() : nullptr, c.beta = in.beta.data();
  c.h0 = p.h0;
  return c;
}

}  // namespace

std::shared_ptr<const DeltaSaved> chunk_delta_forward_cpu(const DeltaParams& p, float* o, float* ht, bool save) {
  std::shared_ptr<ChunkDeltaSaved> in = chunked_inputs(p);
  AlignedBuffer oc(chunked_rows(p) * p.V);
  LayoutCopies copies = chunked_input_copies(p, *in);
  copies.out = {{oc.data(), o, p.V}};
  forward_chunked(chunked_params(p, *in), copies, oc.data(), ht);
  return save ? in : nullptr;
}

void chunk_delta_backward_cpu(const DeltaParams& p, const DeltaSaved& saved, const float* d_o, const float* dht,
                              const DeltaGrads& grads) {
  const auto& in = static_cast<const ChunkDeltaSaved&>(saved);
  const int64_t rows = chunked_rows(p);
  AlignedBuffer d_oc(rows * p.V);
  const bool with_dg = p.g != nullptr && grads.dg != nullptr;
  AlignedBuffer dq(rows * p.K), dk(rows * p.K), dv(rows * p.V), dbeta(rows);
  AlignedBuffer dg = with_dg ? AlignedBuffer(rows) : AlignedBuffer();
  ChunkedGrads out;
  out.dq = dq.data(), out.dk = dk.data(), out.dv = dv.data(), out.dbeta = dbeta.data();
  out.dg = with_dg ? dg.data() : nullptr;
  out.dh0 = grads.dh0;
  LayoutCopies copies;
  copies.B = p.B, copies.T = p.T, copies.H = p.H, copies.C = p.C;
  copies.in = {{d_o, d_oc.data(), p.V}};
  if (p.use_qk_l2norm_in_kernel)
    copies.before_out = [&](int64_t row0, int64_t n) {
      l2norm_rows_backward(in.q.data() + row0 * p.K, in.q_rstd.data() + row0, n, p.K, dq.data() + row0 * p.K);
      l2norm_rows_backward(in.k.data() + row0 * p.K, in.k_rstd.data() + row0, n, p.K, dk.data() + row0 * p.K);
    };
  copies.out = {{dq.data(), grads.dq, p.K}, {dk.data(), grads.dk, p.K}, {dv.data(), grads.dv, p.V},
                {dbeta.data(), grads.dbeta, 1}};
  if (with_dg) copies.out.push_back({dg.data(), grads.dg, 1});
  backward_chunked(chunked_params(p, in), copies, d_oc.data(), dht, out);
}

}  // namespace lat::linear_attention
