// CPU kernels of the fused causal attention: FlashAttention's tiling (Dao et al. 2022,
// alg. 1 forward with the online softmax; FlashAttention-2's backward, Dao 2023, split
// into a dq pass and a dk/dv pass so that every thread owns the rows it writes).
//
// Notation per (batch, head): S = scale * Q K^T (masked), P = softmax_rows(S),
// O = P V, lse_i = log sum_j exp(S_ij). Backward with dO:
//   delta_i = dO_i . O_i,  P_ij = exp(S_ij - lse_i),  dP = dO V^T,
//   dS_ij = P_ij (dP_ij - delta_i),  dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dO.
// Tiles are kBr queries x kBc keys, copied into small row-major buffers; every product is
// the same register-blocked micro-kernel (out[r, :] += sum_k a[r, k] b[k, :]) over them.
#include "layers/fused/attention_op_cpu.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "autograd/cpu/fast_exp.h"

namespace lat::attention_cpu {
namespace {

constexpr int64_t kBr = 64;  // queries per tile
constexpr int64_t kBc = 64;  // keys per tile
// The dk/dv pass reuses the tile helpers with keys as rows and queries as columns.
static_assert(kBr == kBc, "tile helpers assume square tiles");

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

// 64-byte SIMD vectors through the compiler's vector extension: AVX-512 registers with
// -march=native on this machine, split into narrower ones elsewhere.
template <class S>
struct Simd;
template <>
struct Simd<float> {
  typedef float V __attribute__((vector_size(64)));
};
template <>
struct Simd<double> {
  typedef double V __attribute__((vector_size(64)));
};

constexpr int64_t kCW = 32;  // output columns per micro-kernel pass (one or more vectors)

// Widths of the tile buffers that serve as the right-hand side of a product are padded to
// a multiple of kCW (the padding stays zero).
inline int64_t padded(int64_t n) { return (n + kCW - 1) / kCW * kCW; }

// out[r, 0:kCW] = (accumulate ? out[r, 0:kCW] : 0) + sum_{k < K} a[r, k] * b[k, 0:kCW] for
// r < rows; a, b and out row-major with leading dimensions lda, ldb, ldo. Four rows at a
// time keep 4 x kCW accumulators in registers, so each loaded row of b feeds four FMAs.
template <class S>
inline void micro_kernel(const S* a, int64_t lda, const S* b, int64_t ldb, int64_t K, int64_t rows, S* out,
                         int64_t ldo, bool accumulate) {
  using V = typename Simd<S>::V;
  constexpr int64_t L = sizeof(V) / sizeof(S), NV = kCW / L, R = 4;
  int64_t r = 0;
  for (; r + R <= rows; r += R) {
    V acc[R][NV];
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < NV; ++j) {
        if (accumulate)
          std::memcpy(&acc[i][j], out + (r + i) * ldo + j * L, sizeof(V));
        else
          acc[i][j] = V{};
      }
    for (int64_t k = 0; k < K; ++k) {
      V bv[NV];
      for (int64_t j = 0; j < NV; ++j) std::memcpy(&bv[j], b + k * ldb + j * L, sizeof(V));
      for (int64_t i = 0; i < R; ++i) {
        const S x = a[(r + i) * lda + k];
        for (int64_t j = 0; j < NV; ++j) acc[i][j] += x * bv[j];
      }
    }
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < NV; ++j) std::memcpy(out + (r + i) * ldo + j * L, &acc[i][j], sizeof(V));
  }
  for (; r < rows; ++r) {
    V acc[NV];
    for (int64_t j = 0; j < NV; ++j) {
      if (accumulate)
        std::memcpy(&acc[j], out + r * ldo + j * L, sizeof(V));
      else
        acc[j] = V{};
    }
    for (int64_t k = 0; k < K; ++k) {
      const S x = a[r * lda + k];
      for (int64_t j = 0; j < NV; ++j) {
        V bv;
        std::memcpy(&bv, b + k * ldb + j * L, sizeof(V));
        acc[j] += x * bv;
      }
    }
    for (int64_t j = 0; j < NV; ++j) std::memcpy(out + r * ldo + j * L, &acc[j], sizeof(V));
  }
}

// out[r, 0:width] (+)= sum_{k < K} a[r, k] * b[k, 0:width] for r < rows; width a multiple
// of kCW. The one product shape of every tile step (scores, P V, dS K, ...).
template <class S>
void tile_gemm(const S* a, int64_t lda, const S* b, int64_t ldb, int64_t K, int64_t rows, int64_t width, S* out,
               int64_t ldo, bool accumulate) {
  for (int64_t c0 = 0; c0 < width; c0 += kCW)
    micro_kernel(a, lda, b + c0, ldb, K, rows, out + c0, ldo, accumulate);
}

// op (max or +) over a full score row x[0:kBc], lane-parallel (a plain loop stays scalar:
// without -ffast-math the compiler may not reorder float max and +). op takes and returns
// both vectors and scalars.
template <class S, class Op>
S row_reduce(const S* x, Op op) {
  using V = typename Simd<S>::V;
  constexpr int64_t L = sizeof(V) / sizeof(S);
  V acc;
  std::memcpy(&acc, x, sizeof(V));
  for (int64_t j = L; j < kBc; j += L) {
    V v;
    std::memcpy(&v, x + j, sizeof(V));
    acc = op(acc, v);
  }
  S out = acc[0];
  for (int64_t i = 1; i < L; ++i) out = op(out, acc[i]);
  return out;
}

// m < v ? v : m, as std::max(m, v) (the order decides which of two equal zeros is kept).
template <class S>
S row_max(const S* x) {
  return row_reduce(x, [](auto m, auto v) { return v > m ? v : m; });
}

template <class S>
S row_sum(const S* x) {
  return row_reduce(x, [](auto acc, auto v) { return acc + v; });
}

// dst[d * kBc + c] = rows[c][d] for c < count, zero for count <= c < kBc (a transposed tile).
template <class S, class RowFn>
void load_transposed(RowFn row, int64_t count, int64_t n, S* dst) {
  for (int64_t c = 0; c < kBc; ++c) {
    if (c < count) {
      const S* src = row(c);
      for (int64_t d = 0; d < n; ++d) dst[d * kBc + c] = src[d];
    } else {
      for (int64_t d = 0; d < n; ++d) dst[d * kBc + c] = 0;
    }
  }
}

// dst[c * ld + :n] = row(c)[:n] * factor for c < count (a row-major tile, leading dim ld).
template <class S, class RowFn>
void load_rows(RowFn row, int64_t count, int64_t n, int64_t ld, S factor, S* dst) {
  for (int64_t c = 0; c < count; ++c) {
    const S* src = row(c);
    for (int64_t d = 0; d < n; ++d) dst[c * ld + d] = src[d] * factor;
  }
}


}  // namespace

template <class S>
void forward(const Args<S>& a, S* o, S* lse) {
  const int64_t D = a.D, Dv = a.Dv, DvP = padded(Dv), group = a.H / a.Hkv;
  const int64_t n_qt = (a.Tq + kBr - 1) / kBr;
  const int64_t tasks = a.B * a.H * n_qt;
#pragma omp parallel if (tasks > 1)
  {
    // qs: scale * Q tile [kBr, D]; kt: K^T tile [D, kBc]; vs: V tile [kBc, DvP];
    // s: scores, then probabilities [kBr, kBc]; acc: unnormalized output [kBr, DvP].
    std::vector<S> qs(kBr * D), kt(D * kBc), vs(kBc * DvP), s(kBr * kBc), acc(kBr * DvP), m(kBr), l(kBr);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qt = task % n_qt, h = (task / n_qt) % a.H, b = task / (n_qt * a.H), hk = h / group;
      const int64_t i0 = qt * kBr, nr = std::min(kBr, a.Tq - i0);
      load_rows<S>([&](int64_t r) { return a.q_row(b, i0 + r, h); }, nr, D, D, a.scale, qs.data());
      std::fill(acc.begin(), acc.end(), S(0));
      std::fill(m.begin(), m.end(), neg_inf<S>());
      std::fill(l.begin(), l.end(), S(0));
      const int64_t kb = a.key_begin(i0), ke = a.key_end(i0 + nr - 1);
      for (int64_t j0 = kb; j0 < ke; j0 += kBc) {
        const int64_t nc = std::min(kBc, ke - j0);
        load_transposed<S>([&](int64_t c) { return a.k_row(b, j0 + c, hk); }, nc, D, kt.data());
        load_rows<S>([&](int64_t c) { return a.v_row(b, j0 + c, hk); }, nc, Dv, DvP, S(1), vs.data());
        tile_gemm(qs.data(), D, kt.data(), kBc, D, nr, kBc, s.data(), kBc, false);
        for (int64_t r = 0; r < nr; ++r) {
          S* sr = s.data() + r * kBc;
          // Whole rows of kBc scores: the columns outside the visible keys [lo, hi) of this
          // query (masked, or past nc) become -inf, hence probability 0, so every loop
          // below has a fixed length and vectorizes.
          const int64_t lo = std::clamp(a.key_begin(i0 + r) - j0, int64_t{0}, nc);
          const int64_t hi = std::clamp(a.key_end(i0 + r) - j0, lo, nc);
          if (lo == hi) {  // no visible key for this query in this tile
            std::fill(sr, sr + kBc, S(0));
            continue;
          }
          std::fill(sr, sr + lo, neg_inf<S>());
          std::fill(sr + hi, sr + kBc, neg_inf<S>());
          const S mx = row_max(sr);
          // Online softmax: rescale what was accumulated under the old running max.
          const S m_new = std::max(m[r], mx);
          const S alpha = softmax_exp(m[r] - m_new);
          for (int64_t c = 0; c < kBc; ++c) sr[c] = softmax_exp(sr[c] - m_new);
          l[r] = l[r] * alpha + row_sum(sr);
          m[r] = m_new;
          S* ar = acc.data() + r * DvP;
          for (int64_t d = 0; d < Dv; ++d) ar[d] *= alpha;
        }
        tile_gemm(s.data(), kBc, vs.data(), DvP, nc, nr, DvP, acc.data(), DvP, true);
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

template <class S>
void backward(const Args<S>& a, const S* o, const S* lse, const S* do_, S* dq, S* dk, S* dv) {
  const int64_t D = a.D, Dv = a.Dv, DP = padded(D), DvP = padded(Dv), H = a.H, Tq = a.Tq, group = a.H / a.Hkv;
  auto o_row = [&](const S* base, int64_t b, int64_t i, int64_t h) { return base + ((b * Tq + i) * H + h) * Dv; };

  // delta[b, h, i] = dO_i . O_i, the row term of the softmax backward.
  std::vector<S> delta(static_cast<size_t>(a.B * H * Tq));
#pragma omp parallel for if (a.B * H * Tq * Dv > 32768)
  for (int64_t bi = 0; bi < a.B * Tq; ++bi) {
    const int64_t b = bi / Tq, i = bi % Tq;
    for (int64_t h = 0; h < H; ++h) {
      const S* x = o_row(o, b, i, h);
      const S* g = o_row(do_, b, i, h);
      S sum = 0;
      for (int64_t d = 0; d < Dv; ++d) sum += x[d] * g[d];
      delta[(b * H + h) * Tq + i] = sum;
    }
  }

  // ---- dq: one task per (batch, head, query tile) ----
  const int64_t n_qt = (Tq + kBr - 1) / kBr;
  const int64_t q_tasks = a.B * H * n_qt;
#pragma omp parallel if (q_tasks > 1)
  {
    // qs: scale * Q [kBr, D]; dos: dO [kBr, Dv]; kt: K^T [D, kBc]; vt: V^T [Dv, kBc];
    // ks: K [kBc, DP]; s: scores, then dS [kBr, kBc]; dp: dP [kBr, kBc]; dqa: dQ / scale [kBr, DP].
    std::vector<S> qs(kBr * D), dos(kBr * Dv), kt(D * kBc), vt(Dv * kBc), ks(kBc * DP), s(kBr * kBc),
        dp(kBr * kBc), dqa(kBr * DP);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < q_tasks; ++task) {
      const int64_t qt = task % n_qt, h = (task / n_qt) % H, b = task / (n_qt * H), hk = h / group;
      const int64_t i0 = qt * kBr, nr = std::min(kBr, Tq - i0);
      const S* lse_r = lse + (b * H + h) * Tq + i0;
      const S* delta_r = delta.data() + (b * H + h) * Tq + i0;
      load_rows<S>([&](int64_t r) { return a.q_row(b, i0 + r, h); }, nr, D, D, a.scale, qs.data());
      load_rows<S>([&](int64_t r) { return o_row(do_, b, i0 + r, h); }, nr, Dv, Dv, S(1), dos.data());
      std::fill(dqa.begin(), dqa.end(), S(0));
      const int64_t kb = a.key_begin(i0), ke = a.key_end(i0 + nr - 1);
      for (int64_t j0 = kb; j0 < ke; j0 += kBc) {
        const int64_t nc = std::min(kBc, ke - j0);
        load_transposed<S>([&](int64_t c) { return a.k_row(b, j0 + c, hk); }, nc, D, kt.data());
        load_rows<S>([&](int64_t c) { return a.k_row(b, j0 + c, hk); }, nc, D, DP, S(1), ks.data());
        load_transposed<S>([&](int64_t c) { return a.v_row(b, j0 + c, hk); }, nc, Dv, vt.data());
        tile_gemm(qs.data(), D, kt.data(), kBc, D, nr, kBc, s.data(), kBc, false);
        tile_gemm(dos.data(), Dv, vt.data(), kBc, Dv, nr, kBc, dp.data(), kBc, false);
        for (int64_t r = 0; r < nr; ++r) {
          S* sr = s.data() + r * kBc;
          const S* dpr = dp.data() + r * kBc;
          const S lr = lse_r[r], dr = delta_r[r];
          // Columns past nc hold finite values that the product below does not read.
          for (int64_t c = 0; c < kBc; ++c) {
            const S p = softmax_exp(sr[c] - lr);
            sr[c] = p * (dpr[c] - dr);  // dS
          }
          const int64_t lo = std::clamp(a.key_begin(i0 + r) - j0, int64_t{0}, nc);
          const int64_t hi = std::clamp(a.key_end(i0 + r) - j0, lo, nc);
          std::fill(sr, sr + lo, S(0));
          std::fill(sr + hi, sr + nc, S(0));
        }
        tile_gemm(s.data(), kBc, ks.data(), DP, nc, nr, DP, dqa.data(), DP, true);
      }
      for (int64_t r = 0; r < nr; ++r) {
        S* out = dq + ((b * Tq + i0 + r) * H + h) * D;
        for (int64_t d = 0; d < D; ++d) out[d] = dqa[r * DP + d] * a.scale;
      }
    }
  }

  // ---- dk, dv: one task per (batch, kv head, key tile), summing the group's query heads ----
  const int64_t n_kt = (a.Tk + kBc - 1) / kBc;
  const int64_t k_tasks = a.B * a.Hkv * n_kt;
#pragma omp parallel if (k_tasks > 1)
  {
    // The same steps transposed: keys are the rows, queries the columns.
    // ks: scale * K [kBc, D]; vs: V [kBc, Dv]; qt: Q^T [D, kBr]; dot: dO^T [Dv, kBr];
    // qs: Q [kBr, DP]; dos: dO [kBr, DvP]; st: P^T [kBc, kBr]; dpt: dP^T, then dS^T;
    // dka: dK / scale [kBc, DP]; dva: dV [kBc, DvP].
    std::vector<S> ks(kBc * D), vs(kBc * Dv), qt(D * kBr), dot(Dv * kBr), qs(kBr * DP), dos(kBr * DvP),
        st(kBc * kBr), dpt(kBc * kBr), dka(kBc * DP), dva(kBc * DvP);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < k_tasks; ++task) {
      const int64_t kt_i = task % n_kt, hk = (task / n_kt) % a.Hkv, b = task / (n_kt * a.Hkv);
      const int64_t j0 = kt_i * kBc, nc = std::min(kBc, a.Tk - j0);
      load_rows<S>([&](int64_t c) { return a.k_row(b, j0 + c, hk); }, nc, D, D, a.scale, ks.data());
      load_rows<S>([&](int64_t c) { return a.v_row(b, j0 + c, hk); }, nc, Dv, Dv, S(1), vs.data());
      std::fill(dka.begin(), dka.end(), S(0));
      std::fill(dva.begin(), dva.end(), S(0));
      const int64_t qb = a.query_begin(j0), qe = a.query_end(j0 + nc - 1);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const S* lse_h = lse + (b * H + h) * Tq;
        const S* delta_h = delta.data() + (b * H + h) * Tq;
        for (int64_t i0 = qb; i0 < qe; i0 += kBr) {
          const int64_t nr = std::min(kBr, qe - i0);
          load_transposed<S>([&](int64_t r) { return a.q_row(b, i0 + r, h); }, nr, D, qt.data());
          load_rows<S>([&](int64_t r) { return a.q_row(b, i0 + r, h); }, nr, D, DP, S(1), qs.data());
          load_transposed<S>([&](int64_t r) { return o_row(do_, b, i0 + r, h); }, nr, Dv, dot.data());
          load_rows<S>([&](int64_t r) { return o_row(do_, b, i0 + r, h); }, nr, Dv, DvP, S(1), dos.data());
          tile_gemm(ks.data(), D, qt.data(), kBr, D, nc, kBr, st.data(), kBr, false);
          tile_gemm(vs.data(), Dv, dot.data(), kBr, Dv, nc, kBr, dpt.data(), kBr, false);
            for (int64_t c = 0; c < nc; ++c) {
            S* pr = st.data() + c * kBr;
            S* dsr = dpt.data() + c * kBr;
#pragma omp simd
            for (int64_t r = 0; r < nr; ++r) {
              const S p = softmax_exp(pr[r] - lse_h[i0 + r]);
              pr[r] = p;
              dsr[r] = p * (dsr[r] - delta_h[i0 + r]);
            }
            // Queries outside [lo, hi) do not see key j0 + c.
            const int64_t lo = std::clamp(a.query_begin(j0 + c) - i0, int64_t{0}, nr);
            const int64_t hi = std::clamp(a.query_end(j0 + c) - i0, lo, nr);
            std::fill(pr, pr + lo, S(0));
            std::fill(pr + hi, pr + nr, S(0));
            std::fill(dsr, dsr + lo, S(0));
            std::fill(dsr + hi, dsr + nr, S(0));
          }
          tile_gemm(st.data(), kBr, dos.data(), DvP, nr, nc, DvP, dva.data(), DvP, true);
          tile_gemm(dpt.data(), kBr, qs.data(), DP, nr, nc, DP, dka.data(), DP, true);
        }
      }
      for (int64_t c = 0; c < nc; ++c) {
        S* dk_out = dk + ((b * a.Tk + j0 + c) * a.Hkv + hk) * D;
        S* dv_out = dv + ((b * a.Tk + j0 + c) * a.Hkv + hk) * Dv;
        for (int64_t d = 0; d < D; ++d) dk_out[d] = dka[c * DP + d] * a.scale;
        for (int64_t d = 0; d < Dv; ++d) dv_out[d] = dva[c * DvP + d];
      }
    }
  }
}

template void forward<float>(const Args<float>&, float*, float*);
template void forward<double>(const Args<double>&, double*, double*);
template void backward<float>(const Args<float>&, const float*, const float*, const float*, float*, float*,
                              float*);
template void backward<double>(const Args<double>&, const double*, const double*, const double*, double*,
                               double*, double*);

}  // namespace lat::attention_cpu
