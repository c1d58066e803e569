// causal_attention: argument checks, the backend and dtype dispatch, and the one tape node
// around the CPU and CUDA kernels.
#include "layers/fused/attention_op.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "lat/precision.h"
#include "lat/tape.h"
#include "layers/cu_seqlens.h"
#include "layers/fused/attention_op_cpu.h"
#ifdef LAT_WITH_CUDA
#include "layers/fused/attention_op_cuda.h"
#endif

namespace lat {
namespace {

struct Dims {
  int64_t B, Tq, Tk, H, Hkv, D, Dv;
};

// Checks q [B, Tq, H, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] (for the cached form Tk
// is the cache capacity), dtypes, devices and the window.
Dims check_args(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int64_t window_size) {
  LAT_CHECK(q.defined() && k.defined() && v.defined(), op << ": q, k and v must be defined");
  LAT_CHECK(q.dim() == 4, op << ": q: expected shape [B, T, H, D], got " << shape_str(q.shape()));
  LAT_CHECK(k.dim() == 4, op << ": k: expected shape [B, T, Hkv, D], got " << shape_str(k.shape()));
  LAT_CHECK(v.dim() == 4, op << ": v: expected shape [B, T, Hkv, Dv], got " << shape_str(v.shape()));
  Dims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  LAT_CHECK(d.B >= 1 && d.Tq >= 1 && d.H >= 1 && d.D >= 1 && d.Dv >= 1,
            op << ": q: expected non-empty sizes, got " << shape_str(q.shape()));
  LAT_CHECK(k.size(0) == d.B && k.size(3) == d.D && d.Hkv >= 1,
            op << ": k: expected shape [" << d.B << ", Tk, Hkv, " << d.D << "], got " << shape_str(k.shape()));
  LAT_CHECK(v.size(0) == d.B && v.size(1) == d.Tk && v.size(2) == d.Hkv,
            op << ": v: expected shape [" << d.B << ", " << d.Tk << ", " << d.Hkv << ", Dv], got "
               << shape_str(v.shape()));
  LAT_CHECK(d.H % d.Hkv == 0,
            op << ": k: expected a kv head count dividing the " << d.H << " query heads, got " << d.Hkv);
  LAT_CHECK(q.dtype() == DType::f32 || q.dtype() == DType::f64,
            op << ": q: expected f32 or f64, got " << dtype_name(q.dtype()));
  LAT_CHECK(k.dtype() == q.dtype(), op << ": k: expected " << dtype_name(q.dtype()) << ", got " << dtype_name(k.dtype()));
  LAT_CHECK(v.dtype() == q.dtype(), op << ": v: expected " << dtype_name(q.dtype()) << ", got " << dtype_name(v.dtype()));
  LAT_CHECK(k.device() == q.device() && v.device() == q.device(),
            op << ": expected q, k and v on one device, got q on " << q.device().str() << ", k on " << k.device().str()
               << ", v on " << v.device().str());
#ifdef LAT_WITH_CUDA
  LAT_CHECK(q.device().is_cpu() || q.dtype() == DType::f32,
            op << ": q: expected f32 on " << q.device().str() << ", got " << dtype_name(q.dtype()));
#else
  LAT_CHECK(q.device().is_cpu(), op << ": expected CPU tensors, got q on " << q.device().str());
#endif
  LAT_CHECK(window_size >= 0, op << ": window_size: expected >= 0 (0 = full), got " << window_size);
  return d;
}

// One kernel call, resolved: the keys read are rows [0, Tk) of k and v (Tk = d.Tk, or the
// cache's length for the cached form), counted from token t0 of every tensor (a packed
// sequence's first token, whose d.Tq = d.Tk is its length; 0 for a whole call). precision:
// the products' (CPU; the CUDA kernels compute in fp32), read once on the calling thread
// and kept for the backward.
struct Call {
  Dims d;
  int64_t Tk;
  double scale;
  int64_t window_size;
  int64_t q_offset;
  Precision precision;
  int64_t t0 = 0;
};

// bf16 for f32 products where this thread computes in bf16 on q's device (lat/precision.h).
Precision products_precision(const Tensor& q) {
  return q.dtype() == DType::f32 && bf16_compute(q.device()) ? Precision::bf16 : Precision::fp32;
}

// Where call c's rows start in q, o, dq [B, T, H, D or Dv], k, v [B, T, Hkv, D or Dv] and
// lse [B, H, Tq], in elements.
struct RowOffsets {
  int64_t q, o, k, v, lse;
  explicit RowOffsets(const Call& c)
      : q(c.t0 * c.d.H * c.d.D),
        o(c.t0 * c.d.H * c.d.Dv),
        k(c.t0 * c.d.Hkv * c.d.D),
        v(c.t0 * c.d.Hkv * c.d.Dv),
        lse(c.t0 * c.d.H) {}
};

// The kernels' arguments, the same for both backends (attention_args.h).
template <class S>
attention::Args<S> make_args(const Tensor& q, const Tensor& k, const Tensor& v, const Call& c) {
  const Dims& d = c.d;
  const RowOffsets at(c);
  attention::Args<S> a;
  a.q = q.data<S>() + at.q;
  a.k = k.data<S>() + at.k;
  a.v = v.data<S>() + at.v;
  a.B = d.B, a.Tq = d.Tq, a.Tk = c.Tk, a.H = d.H, a.Hkv = d.Hkv, a.D = d.D, a.Dv = d.Dv;
  a.q_batch_stride = d.Tq * d.H * d.D;
  a.k_batch_stride = k.size(1) * d.Hkv * d.D;
  a.v_batch_stride = v.size(1) * d.Hkv * d.Dv;
  a.q_offset = c.q_offset;
  a.window = c.window_size;
  a.scale = static_cast<S>(c.scale);
  a.device = q.device().index;
  return a;
}

// The one switch over backends and dtypes (CUDA runs f32 only, checked in check_args).
// forward writes o and, when lse is not null, the per-row logsumexp [B, H, Tq].
template <class S>
void forward_typed(const Tensor& q, const Tensor& k, const Tensor& v, const Call& c, Tensor& o, Tensor* lse) {
  const RowOffsets at(c);
  S* lse_rows = lse ? lse->data<S>() + at.lse : nullptr;
#ifdef LAT_WITH_CUDA
  if (q.device().is_cuda()) {
    if constexpr (std::is_same_v<S, float>)
      attention_cuda::forward(make_args<float>(q, k, v, c), o.data<float>() + at.o, lse_rows);
    return;
  }
#endif
  attention_cpu::forward(make_args<S>(q, k, v, c), c.precision, o.data<S>() + at.o, lse_rows);
}

void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Call& c, Tensor& o, Tensor* lse) {
  if (q.dtype() == DType::f32)
    forward_typed<float>(q, k, v, c, o, lse);
  else
    forward_typed<double>(q, k, v, c, o, lse);
}

// dq, dk, dv of call c's rows from the forward's o and lse and the upstream grad_o.
template <class S>
void backward_typed(const Tensor& q, const Tensor& k, const Tensor& v, const Call& c, const Tensor& o,
                    const Tensor& lse, const Tensor& grad_o, Tensor& dq, Tensor& dk, Tensor& dv) {
  const RowOffsets at(c);
#ifdef LAT_WITH_CUDA
  if (q.device().is_cuda()) {
    if constexpr (std::is_same_v<S, float>)
      attention_cuda::backward(make_args<float>(q, k, v, c), o.data<float>() + at.o, lse.data<float>() + at.lse,
                               grad_o.data<float>() + at.o, dq.data<float>() + at.q, dk.data<float>() + at.k,
                               dv.data<float>() + at.v);
    return;
  }
#endif
  attention_cpu::backward(make_args<S>(q, k, v, c), c.precision, o.data<S>() + at.o, lse.data<S>() + at.lse,
                          grad_o.data<S>() + at.o, dq.data<S>() + at.q, dk.data<S>() + at.k, dv.data<S>() + at.v);
}

std::vector<Tensor> backward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<Call>& calls,
                             const Tensor& o, const Tensor& lse, const Tensor& grad_o) {
  Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor dk = Tensor::empty(k.shape(), k.dtype(), k.device());
  Tensor dv = Tensor::empty(v.shape(), v.dtype(), v.device());
  for (const Call& c : calls) {
    if (q.dtype() == DType::f32)
      backward_typed<float>(q, k, v, c, o, lse, grad_o, dq, dk, dv);
    else
      backward_typed<double>(q, k, v, c, o, lse, grad_o, dq, dk, dv);
  }
  return {dq, dk, dv};
}

// The kernel calls of causal_attention: the whole call, or one per packed sequence of
// cu_seqlens (B == 1, Tq = Tk, each sequence attending to itself only, q_offset 0).
std::vector<Call> calls_of(const Call& whole, const Tensor& cu_seqlens) {
  if (!cu_seqlens.defined()) return {whole};
  const char* op = "causal_attention";
  const std::vector<int64_t> offsets = read_cu_seqlens(op, cu_seqlens, whole.d.B, whole.d.Tq);
  LAT_CHECK(whole.d.Tk == whole.d.Tq && whole.q_offset == 0,
            op << ": cu_seqlens: expected queries and keys of the same tokens (Tq = Tk, q_offset 0), got Tq="
               << whole.d.Tq << " Tk=" << whole.d.Tk << " q_offset=" << whole.q_offset);
  std::vector<Call> calls;
  for (size_t n = 0; n + 1 < offsets.size(); ++n) {
    Call c = whole;
    c.d.Tq = c.d.Tk = c.Tk = offsets[n + 1] - offsets[n];
    c.t0 = offsets[n];
    calls.push_back(c);
  }
  return calls;
}

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale,
                        int64_t window_size, std::optional<int64_t> q_offset, const Tensor& cu_seqlens) {
  const Dims d = check_args("causal_attention", q, k, v, window_size);
  const int64_t offset = q_offset.value_or(d.Tk - d.Tq);
  LAT_CHECK(offset >= 0 && offset <= d.Tk - d.Tq,
            "causal_attention: q_offset: expected a value in [0, Tk - Tq] = [0, " << d.Tk - d.Tq << "], got " << offset);
  const std::vector<Call> calls = calls_of(
      {d, d.Tk, scale.value_or(1.0 / std::sqrt(static_cast<double>(d.D))), window_size, offset, products_precision(q)},
      cu_seqlens);

  const bool grad = needs_grad({&q, &k, &v});
  Tensor o = Tensor::empty({d.B, d.Tq, d.H, d.Dv}, q.dtype(), q.device());
  // With packed sequences, sequence n's rows of lse are [H, L_n] from H * c_n on.
  Tensor lse = grad ? Tensor::empty({d.B, d.H, d.Tq}, q.dtype(), q.device()) : Tensor();
  for (const Call& c : calls) forward(q, k, v, c, o, grad ? &lse : nullptr);
  if (grad) {
    // Saved for backward: q, k, v (the node's inputs), o and the per-row logsumexp; O(T).
    record("causal_attention", {q, k, v}, {o},
           [q, k, v, calls, o, lse](const std::vector<Tensor>& g) { return backward(q, k, v, calls, o, lse, g[0]); });
  }
  return o;
}

Tensor causal_attention_cached(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                               std::optional<double> scale, int64_t window_size) {
  const Dims d = check_args("causal_attention_cached", q, k_cache, v_cache, window_size);
  LAT_CHECK(q.dtype() == DType::f32, "causal_attention_cached: q: expected f32, got " << dtype_name(q.dtype()));
  LAT_CHECK(length >= d.Tq && length <= d.Tk, "causal_attention_cached: length: expected a value in [Tq, capacity] = ["
                                                  << d.Tq << ", " << d.Tk << "], got " << length);
  const double scale_value = scale.value_or(1.0 / std::sqrt(static_cast<double>(d.D)));
  const Call c{d, length, scale_value, window_size, length - d.Tq, products_precision(q)};
  Tensor o = Tensor::empty({d.B, d.Tq, d.H, d.Dv}, q.dtype(), q.device());
  forward(q, k_cache, v_cache, c, o, nullptr);
  return o;
}

}  // namespace lat
