// Argument checks and small helpers shared by the linear-attention ops (see common.h).
#include "layers/linear_attention/common.h"

#include <cmath>
#include <sstream>
#include <string>

#include "lat/ops.h"
#include "layers/cu_seqlens.h"

namespace lat::linear_attention {
namespace {

void check_float(const char* op, const char* arg, const Tensor& t, Dtypes dtypes) {
  const bool allow_f64 = dtypes == Dtypes::f32_or_f64;
  bool ok = t.dtype() == DType::f32 || (allow_f64 && t.dtype() == DType::f64);
  LAT_CHECK(ok, op << ": " << arg << ": expected dtype " << (allow_f64 ? "f32 or f64" : "f32") << ", got "
                   << dtype_name(t.dtype()));
}

void check_like(const char* op, const char* arg, const Tensor& t, const Tensor& q) {
  LAT_CHECK(t.dtype() == q.dtype(), op << ": " << arg << ": expected dtype " << dtype_name(q.dtype())
                                       << " (as q), got " << dtype_name(t.dtype()));
  LAT_CHECK(t.device() == q.device(), op << ": " << arg << ": expected device " << q.device().str()
                                         << " (as q), got " << t.device().str());
}

void check_shape(const char* op, const char* arg, const Tensor& t, const Shape& expected, const char* layout) {
  check_defined(op, arg, t, layout);
  LAT_CHECK(t.shape() == expected, op << ": " << arg << ": expected shape " << shape_str(expected) << " "
                                      << layout << ", got " << shape_str(t.shape()));
}

void check_head_dims(const char* op, const Dims& d) {
  LAT_CHECK(d.B >= 1 && d.H >= 1, op << ": q: expected B >= 1 and H >= 1, got B=" << d.B << " H=" << d.H);
  LAT_CHECK(d.K >= 1 && d.K <= kMaxHeadDim,
            op << ": q: expected head dim K in 1.." << kMaxHeadDim << ", got K=" << d.K);
  LAT_CHECK(d.V >= 1 && d.V <= kMaxHeadDim,
            op << ": v: expected head dim V in 1.." << kMaxHeadDim << ", got V=" << d.V);
}

// v's heads when they fit q's Hk heads: H = Hk, or with grouped q/k heads any multiple
// of Hk (then v's error says so).
int64_t value_heads(int64_t v_heads, int64_t Hk, QkHeads qk_heads) {
  return qk_heads == QkHeads::grouped && Hk >= 1 && v_heads % Hk == 0 ? v_heads : Hk;
}

const char* grouped_hint(QkHeads qk_heads) {
  return qk_heads == QkHeads::grouped ? "; or H a multiple of q's heads Hk: grouped q/k heads" : "";
}

// Values of a gate tensor in [lo, hi] (CPU tensors only; device tensors are checked by
// their backend). Reports the first offender with its index in `layout` order.
template <class T>
void check_range_typed(const char* op, const char* arg, const T* p, int64_t n, double lo, double hi,
                       const Shape& shape, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    double x = static_cast<double>(p[i]);
    if (x >= lo && x <= hi) continue;
    std::ostringstream index;
    int64_t rest = i;
    Shape idx(shape.size());
    for (size_t a = shape.size(); a-- > 0;) {
      idx[a] = rest % shape[a];
      rest /= shape[a];
    }
    LAT_CHECK(false, op << ": " << arg << ": expected " << what << ", got " << x << " at "
                        << shape_str(idx));
  }
}

void check_range(const char* op, const char* arg, const Tensor& t, double lo, double hi, const char* what) {
  if (!t.device().is_cpu()) return;
  if (t.dtype() == DType::f32)
    check_range_typed(op, arg, t.data<float>(), t.numel(), lo, hi, t.shape(), what);
  else
    check_range_typed(op, arg, t.data<double>(), t.numel(), lo, hi, t.shape(), what);
}

}  // namespace

Dims check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, Dtypes dtypes,
               QkHeads qk_heads) {
  LAT_CHECK(q.defined(), op << ": q: expected a tensor [B, T, H, K], got an undefined tensor");
  LAT_CHECK(k.defined(), op << ": k: expected a tensor [B, T, H, K], got an undefined tensor");
  LAT_CHECK(v.defined(), op << ": v: expected a tensor [B, T, H, V], got an undefined tensor");
  LAT_CHECK(q.dim() == 4, op << ": q: expected rank 4 [B, T, H, K], got shape " << shape_str(q.shape()));
  LAT_CHECK(k.dim() == 4, op << ": k: expected rank 4 [B, T, H, K], got shape " << shape_str(k.shape()));
  LAT_CHECK(v.dim() == 4, op << ": v: expected rank 4 [B, T, H, V], got shape " << shape_str(v.shape()));
  check_float(op, "q", q, dtypes);
  check_like(op, "k", k, q);
  check_like(op, "v", v, q);
  LAT_CHECK(k.shape() == q.shape(), op << ": k: expected shape " << shape_str(q.shape())
                                       << " [B, T, H, K] (as q), got " << shape_str(k.shape()));
  Dims d{q.size(0), q.size(1), value_heads(v.size(2), q.size(2), qk_heads), q.size(3), v.size(3), q.size(2)};
  Shape v_expected{d.B, d.T, d.H, d.V};
  LAT_CHECK(v.shape() == v_expected, op << ": v: expected shape " << shape_str(v_expected)
                                        << " [B, T, H, V] (B, T, H as q" << grouped_hint(qk_heads) << "), got "
                                        << shape_str(v.shape()));
  LAT_CHECK(d.T >= 1, op << ": q: expected T >= 1 tokens, got T=" << d.T);
  check_head_dims(op, d);
  return d;
}

void check_defined(const char* op, const char* arg, const Tensor& t, const char* layout) {
  LAT_CHECK(t.defined(), op << ": " << arg << ": expected a tensor " << layout << ", got an undefined tensor");
}

void check_g(const char* op, const Tensor& g, const Tensor& q, const Dims& d) {
  check_shape(op, "g", g, {d.B, d.T, d.H}, "[B, T, H]");
  check_like(op, "g", g, q);
  check_range(op, "g", g, -INFINITY, 0.0, "log-decay values <= 0");
}

void check_g_per_key(const char* op, const Tensor& g, const Tensor& q, const Dims& d) {
  check_shape(op, "g", g, {d.B, d.T, d.H, d.K}, "[B, T, H, K]");
  check_like(op, "g", g, q);
  check_range(op, "g", g, -INFINITY, 0.0, "log-decay values <= 0");
}

void check_beta(const char* op, const Tensor& beta, const Tensor& q, const Dims& d) {
  check_shape(op, "beta", beta, {d.B, d.T, d.H}, "[B, T, H]");
  check_like(op, "beta", beta, q);
  check_range(op, "beta", beta, 0.0, 1.0, "values in [0, 1]");
}

Spans call_spans(const char* op, const Tensor& cu_seqlens, const Dims& d) {
  if (!cu_seqlens.defined()) return {{Span{0, 0, d.T}}, d.B, false};
  const std::vector<int64_t> offsets = read_cu_seqlens(op, cu_seqlens, d.B, d.T);
  Spans s{{}, static_cast<int64_t>(offsets.size()) - 1, true};
  for (int64_t n = 0; n < s.states; ++n) s.spans.push_back({n, offsets[n], offsets[n + 1]});
  return s;
}

void check_initial_state(const char* op, const Tensor& initial_state, const Tensor& q, const Dims& d, int64_t state_v,
                         const Spans& spans) {
  if (!initial_state.defined()) return;
  const char* layout = spans.packed ? (state_v == d.V ? "[N, H, K, V] (one state per sequence of cu_seqlens)"
                                                      : "[N, H, K, V + 1] (one state per sequence of cu_seqlens)")
                                    : (state_v == d.V ? "[B, H, K, V]" : "[B, H, K, V + 1]");
  check_shape(op, "initial_state", initial_state, {spans.states, d.H, d.K, state_v}, layout);
  check_like(op, "initial_state", initial_state, q);
}

void check_cpu(const char* op, const Tensor& q) {
  LAT_CHECK(q.device().is_cpu(), op << ": q: expected a CPU tensor (no device kernel for this op yet), got "
                                    << q.device().str());
}

void check_chunk_size(const char* op, int chunk_size, const Tensor& q) {
  LAT_CHECK(chunk_size > 0, op << ": chunk_size: expected > 0, got " << chunk_size);
  LAT_CHECK(!q.device().is_cuda() || chunk_size <= kMaxCudaChunkSize,
            op << ": chunk_size: expected 1.." << kMaxCudaChunkSize << " on " << q.device().str() << ", got "
               << chunk_size);
}

Dims check_step(const char* op, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& state,
                int64_t state_v_extra, QkHeads qk_heads) {
  LAT_CHECK(q_t.defined() && q_t.dim() == 3,
            op << ": q_t: expected rank 3 [B, H, K], got "
               << (q_t.defined() ? "shape " + shape_str(q_t.shape()) : std::string("an undefined tensor")));
  check_float(op, "q_t", q_t, Dtypes::f32);
  Dims d{q_t.size(0), 1, q_t.size(1), q_t.size(2), 0, q_t.size(1)};
  check_shape(op, "k_t", k_t, q_t.shape(), "[B, H, K] (as q_t)");
  check_like(op, "k_t", k_t, q_t);
  if (v_t.defined() && v_t.dim() == 3) d.H = value_heads(v_t.size(1), d.Hk, qk_heads);
  LAT_CHECK(v_t.defined() && v_t.dim() == 3 && v_t.size(0) == d.B && v_t.size(1) == d.H,
            op << ": v_t: expected shape [" << d.B << ", " << d.H << ", V] [B, H, V]"
               << (qk_heads == QkHeads::grouped ? " (or H a multiple of q_t's heads Hk: grouped q/k heads)" : "")
               << ", got " << (v_t.defined() ? shape_str(v_t.shape()) : std::string("an undefined tensor")));
  check_like(op, "v_t", v_t, q_t);
  d.V = v_t.size(2);
  check_head_dims(op, d);
  check_shape(op, "state", state, {d.B, d.H, d.K, d.V + state_v_extra},
              state_v_extra == 0 ? "[B, H, K, V]" : "[B, H, K, V + 1]");
  check_like(op, "state", state, q_t);
  return d;
}

void check_step_g(const char* op, const Tensor& g_t, const Dims& d) {
  check_shape(op, "g_t", g_t, {d.B, d.H}, "[B, H]");
  check_float(op, "g_t", g_t, Dtypes::f32);
  check_range(op, "g_t", g_t, -INFINITY, 0.0, "log-decay values <= 0");
}

void check_step_beta(const char* op, const Tensor& beta_t, const Dims& d) {
  check_shape(op, "beta_t", beta_t, {d.B, d.H}, "[B, H]");
  check_float(op, "beta_t", beta_t, Dtypes::f32);
  check_range(op, "beta_t", beta_t, 0.0, 1.0, "values in [0, 1]");
}

void check_step_g_per_key(const char* op, const Tensor& g_t, const Dims& d) {
  check_shape(op, "g_t", g_t, {d.B, d.H, d.K}, "[B, H, K]");
  check_float(op, "g_t", g_t, Dtypes::f32);
  check_range(op, "g_t", g_t, -INFINITY, 0.0, "log-decay values <= 0");
}

const float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* data_or_null(Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

float resolve_scale(std::optional<float> scale, int64_t K) {
  return scale ? *scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(K)));
}

double resolve_scale(std::optional<double> scale, int64_t K) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(K));
}

// A broadcast add of zeros [G, 1] over [B, T, H, 1, K]: one elementwise pass forward, and its
// backward (sum_to) sums each group's gradients into its key head, on CPU and CUDA alike.
Tensor repeat_heads(const Tensor& t, int64_t G) {
  const int64_t B = t.size(0), T = t.size(1), H = t.size(2), K = t.size(3);
  const Tensor zeros = Tensor::zeros({G, 1}, t.dtype(), t.device());
  return (t.reshape({B, T, H, 1, K}) + zeros).reshape({B, T, H * G, K});
}

}  // namespace lat::linear_attention
