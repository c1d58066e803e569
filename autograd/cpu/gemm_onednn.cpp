// oneDNN 2.6 matmul glue. The 2.6 API builds matmul::desc, then a primitive_desc with
// the attributes (output scale alpha, sum post-op beta), then the primitive.
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "autograd/cpu/bf16.h"
#include "autograd/cpu/gemm.h"
#include "lat/error.h"

namespace lat::cpu {
namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t, int64_t, bool,
                       int64_t, int64_t, float, float, Precision>;

struct Cached {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c;
  /// oneDNN picked its sgemm-based implementation (2.6 does for f32 below AVX-512), whose
  /// threading splits the reduction K over the threads when M and N are small.
  bool splits_reduction = false;
};

struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;
  std::map<Key, Cached> cache;
};

Engine& engine() {
  static Engine e;
  return e;
}

using dt = dnnl::memory::data_type;

dnnl::memory::desc strided_desc(int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                                bool transposed, dt type) {
  // Logical dims are always [batch, rows, cols]; a transposed operand is stored cols x rows.
  dnnl::memory::dims dims{batch, rows, cols};
  dnnl::memory::dims strides = transposed ? dnnl::memory::dims{stride, 1, ld} : dnnl::memory::dims{stride, ld, 1};
  return dnnl::memory::desc(dims, type, strides);
}

Cached make_primitive(const GemmBatch& g, dnnl::engine& eng) {
  const dt in = g.precision == Precision::bf16 ? dt::bf16 : dt::f32;
  int64_t b_batch = g.stride_b == 0 ? 1 : g.batch;
  auto a_md = strided_desc(g.batch, g.M, g.K, g.lda, g.stride_a == 0 ? g.M * g.K : g.stride_a, g.trans_a, in);
  auto b_md = strided_desc(b_batch, g.K, g.N, g.ldb, g.stride_b == 0 ? g.K * g.N : g.stride_b, g.trans_b, in);
  // A zero batch stride on C (batch 1) makes oneDNN fall back to a slower kernel.
  auto c_md = strided_desc(g.batch, g.M, g.N, g.ldc, g.stride_c == 0 ? g.M * g.ldc : g.stride_c, false, dt::f32);
  dnnl::primitive_attr attr;
  if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
  if (g.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(g.beta);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::desc desc(a_md, b_md, c_md);
  dnnl::matmul::primitive_desc pd(desc, attr, eng);
  const bool gemm_based = std::string(pd.impl_info_str()).rfind("gemm", 0) == 0;
  return {dnnl::matmul(pd), a_md, b_md, c_md, gemm_based && g.precision == Precision::fp32};
}

void check_gemm(const GemmBatch& g) {
  // The cached primitive splits its work over the whole thread team; run by one thread of
  // a parallel region it would silently compute only that thread's share.
  LAT_CHECK(!omp_in_parallel(),
            "gemm_batched: called inside an OpenMP parallel region (expected a call from serial code; "
            "use tile_gemm or a serial loop inside parallel regions)");
  LAT_CHECK(g.batch >= 1 && g.M >= 1 && g.N >= 1 && g.K >= 0,
            "gemm_batched: sizes must be positive, got batch=" << g.batch << " M=" << g.M << " N=" << g.N
                                                               << " K=" << g.K);
  LAT_CHECK(g.lda >= (g.trans_a ? g.M : g.K), "gemm_batched: lda " << g.lda << " too small");
  LAT_CHECK(g.ldb >= (g.trans_b ? g.K : g.N), "gemm_batched: ldb " << g.ldb << " too small");
  LAT_CHECK(g.ldc >= g.N, "gemm_batched: ldc " << g.ldc << " too small");
  LAT_CHECK(g.batch == 1 || g.stride_c != 0, "gemm_batched: stride_c must be non-zero when batch > 1");
  LAT_CHECK(g.batch == 1 || g.stride_a != 0,
            "gemm_batched: stride_a must be non-zero when batch > 1 (only B may be shared across the batch)");
}

/// One operand of a bf16 product: the float matrices rounded into `copy`, packed (row
/// stride = stored columns, batch stride = one matrix, or 0 when shared).
struct Bf16Operand {
  const uint16_t* data;
  int64_t ld, stride;
};

/// `count` stored rows x cols matrices at p (row stride ld, batch stride `stride`, 0 = one
/// matrix) rounded to bf16 into `copy`.
Bf16Operand round_operand(const float* p, int64_t count, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                          std::vector<uint16_t>& copy) {
  const int64_t items = stride == 0 ? 1 : count;
  if (static_cast<int64_t>(copy.size()) < items * rows * cols) copy.resize(items * rows * cols);
  for (int64_t b = 0; b < items; ++b) float_to_bf16_rows(p + b * stride, rows, cols, ld, copy.data() + b * rows * cols);
  return {copy.data(), cols, stride == 0 ? 0 : rows * cols};
}

// The fixed decomposition of tiled_sgemm: tiles of C of at most kTile x kTile, and, for a
// product with fewer than kMinTiles tiles, the sum over K cut into at most kMaxPieces pieces
// of at least kMinPiece. Shapes alone decide it, never the thread count. 1024-wide tiles keep
// oneDNN's single-thread sgemm at its full speed for transposed A as well (256-wide ones ran
// at 40% of it).
constexpr int64_t kTile = 1024, kMinTiles = 4, kMinPiece = 1024, kMaxPieces = 8;

/// The fp32 product as fixed tiles of C, each one single-threaded sgemm, the tiles (and
/// pieces of K) spread over the threads by this loop: every element of C is the same sum in
/// the same order at every thread count, as with the brgemm implementation. oneDNN's sgemm
/// sizes its team from the calling thread's OpenMP thread count, which is 1 here for the
/// duration (also in a team of one, where omp_in_parallel is false). The pieces of K after
/// the first go to scratch and are added to C in piece order.
void tiled_sgemm(const GemmBatch& g) {
  const int64_t row_tiles = (g.M + kTile - 1) / kTile, col_tiles = (g.N + kTile - 1) / kTile;
  const int64_t tiles = g.batch * row_tiles * col_tiles;
  const int64_t pieces = tiles < kMinTiles ? std::clamp<int64_t>(g.K / kMinPiece, 1, kMaxPieces) : 1;
  const int64_t piece_k = (g.K + pieces - 1) / pieces;
  const int64_t tile_elems = std::min(kTile, g.M) * std::min(kTile, g.N);
  thread_local std::vector<float> scratch;
  if (pieces > 1) scratch.resize(static_cast<size_t>(tiles * (pieces - 1) * tile_elems));
  float* const partials = scratch.data();  // the caller's: every thread of the team writes to it
  const int threads = omp_get_max_threads();
  const int64_t items = tiles * pieces;
  const int team = g.M * g.N * g.K > (1 << 15) ? static_cast<int>(std::min<int64_t>(threads, items)) : 1;
  omp_set_num_threads(1);
  bool failed = false;
#pragma omp parallel num_threads(team)
  {
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t t = item / pieces, piece = item % pieces;
      const int64_t b = t / (row_tiles * col_tiles), i = t / col_tiles % row_tiles * kTile, j = t % col_tiles * kTile;
      const int64_t rows = std::min(kTile, g.M - i), cols = std::min(kTile, g.N - j);
      const int64_t k0 = piece * piece_k, depth = std::min(piece_k, g.K - k0);
      const float* a = g.A + b * g.stride_a + (g.trans_a ? k0 * g.lda + i : i * g.lda + k0);
      const float* bb = g.B + b * g.stride_b + (g.trans_b ? j * g.ldb + k0 : k0 * g.ldb + j);
      float* c = piece == 0 ? g.C + b * g.stride_c + i * g.ldc + j
                            : partials + (t * (pieces - 1) + piece - 1) * tile_elems;
      const int64_t ldc = piece == 0 ? g.ldc : cols;
      const dnnl_status_t status =
          dnnl_sgemm(g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', rows, cols, depth, g.alpha, a, g.lda, bb, g.ldb,
                     piece == 0 ? g.beta : 0.0f, c, ldc);
      if (status != dnnl_success) {
#pragma omp atomic write
        failed = true;
      }
    }
    if (pieces > 1) {
#pragma omp for
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t b = t / (row_tiles * col_tiles), i = t / col_tiles % row_tiles * kTile, j = t % col_tiles * kTile;
        const int64_t rows = std::min(kTile, g.M - i), cols = std::min(kTile, g.N - j);
        for (int64_t piece = 1; piece < pieces; ++piece) {
          const float* part = partials + (t * (pieces - 1) + piece - 1) * tile_elems;
          for (int64_t r = 0; r < rows; ++r) {
            float* c = g.C + b * g.stride_c + (i + r) * g.ldc + j;
            for (int64_t col = 0; col < cols; ++col) c[col] += part[r * cols + col];
          }
        }
      }
    }
  }
  omp_set_num_threads(threads);
  LAT_CHECK(!failed, "gemm_batched: oneDNN sgemm failed for M=" << g.M << " N=" << g.N << " K=" << g.K);
}

void run_primitive(const GemmBatch& g, const void* A, const void* B) {
  Engine& e = engine();
  Key key{g.batch, g.M, g.N, g.K, g.lda, g.stride_a, g.trans_a, g.ldb, g.stride_b, g.trans_b,
          g.ldc, g.stride_c, g.alpha, g.beta, g.precision};
  Cached cached;
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    auto it = e.cache.find(key);
    if (it == e.cache.end()) it = e.cache.emplace(key, make_primitive(g, e.engine)).first;
    cached = it->second;
  }
  if (cached.splits_reduction) {
    tiled_sgemm(g);
    return;
  }
  dnnl::memory a_mem(cached.a, e.engine, const_cast<void*>(A));
  dnnl::memory b_mem(cached.b, e.engine, const_cast<void*>(B));
  dnnl::memory c_mem(cached.c, e.engine, g.C);
  // One stream per thread keeps concurrent callers independent.
  thread_local dnnl::stream stream(e.engine);
  cached.primitive.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  stream.wait();
}

/// beta * C in place: the product of an empty sum (K == 0).
void scale_c(const GemmBatch& g) {
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) {
        float& c = g.C[b * g.stride_c + i * g.ldc + j];
        c = g.beta == 0.0f ? 0.0f : g.beta * c;
      }
}

}  // namespace

void gemm_batched(const GemmBatch& g) {
  check_gemm(g);
  if (g.K == 0) {
    scale_c(g);
    return;
  }
  if (g.precision == Precision::fp32) {
    run_primitive(g, g.A, g.B);
    return;
  }
  // The rounded copies are packed, so the product runs with their strides.
  thread_local std::vector<uint16_t> a_copy, b_copy;
  const Bf16Operand a = round_operand(g.A, g.batch, g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.lda, g.stride_a,
                                      a_copy);
  const Bf16Operand b = round_operand(g.B, g.batch, g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, g.ldb, g.stride_b,
                                      b_copy);
  GemmBatch packed = g;
  packed.lda = a.ld;
  packed.stride_a = a.stride;
  packed.ldb = b.ld;
  packed.stride_b = b.stride;
  gemm_batched_bf16(packed, a.data, b.data);
}

void gemm_batched_bf16(const GemmBatch& g, const uint16_t* A, const uint16_t* B) {
  check_gemm(g);
  if (g.K == 0) {
    scale_c(g);
    return;
  }
  GemmBatch bf16 = g;
  bf16.precision = Precision::bf16;
  run_primitive(bf16, A, B);
}

void gemm_batched_f64(int64_t batch, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
                      int64_t stride_a, bool trans_a, const double* B, int64_t ldb, int64_t stride_b,
                      bool trans_b, double* C, int64_t ldc, int64_t stride_c, double alpha, double beta) {
#pragma omp parallel for collapse(2) if (batch * M * N * K > (1 << 16))
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < M; ++i) {
      const double* a = A + b * stride_a;
      const double* bb = B + b * stride_b;
      double* c = C + b * stride_c + i * ldc;
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          double av = trans_a ? a[k * lda + i] : a[i * lda + k];
          double bv = trans_b ? bb[j * ldb + k] : bb[k * ldb + j];
          acc += av * bv;
        }
        c[j] = alpha * acc + (beta == 0.0 ? 0.0 : beta * c[j]);
      }
    }
}

int64_t gemm_cache_size() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int64_t>(e.cache.size());
}

}  // namespace lat::cpu
