// causal_attention: argument checks, the backend and dtype dispatch, and the one tape node
// around the CPU and CUDA kernels.
#include "layers/fused/attention_op.h"

#include <cmath>

#include "lat/tape.h"
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

// One call, resolved: the keys read are rows [0, Tk) of k and v (Tk = d.Tk, or the cache's
// length for the cached form).
struct Call {
  Dims d;
  int64_t Tk;
  double scale;
  int64_t window_size;
  int64_t q_offset;
};

// The kernels' arguments, the same for both backends (attention_args.h).
template <class S>
attention::Args<S> make_args(const Tensor& q, const Tensor& k, const Tensor& v, const Call& c) {
  const Dims& d = c.d;
  attention::Args<S> a;
  a.q = q.data<S>();
  a.k = k.data<S>();
  a.v = v.data<S>();
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
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Call& c, Tensor& o, Tensor* lse) {
#ifdef LAT_WITH_CUDA
  if (q.device().is_cuda()) {
    attention_cuda::forward(make_args<float>(q, k, v, c), o.data<float>(), lse ? lse->data<float>() : nullptr);
    return;
  }
#endif
  if (q.dtype() == DType::f32)
    attention_cpu::forward(make_args<float>(q, k, v, c), o.data<float>(), lse ? lse->data<float>() : nullptr);
  else
    attention_cpu::forward(make_args<double>(q, k, v, c), o.data<double>(), lse ? lse->data<double>() : nullptr);
}

// dq, dk, dv from the forward's o and lse and the upstream grad_o.
template <class S>
void backward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Call& c, const Tensor& o, const Tensor& lse,
                  const Tensor& grad_o, Tensor& dq, Tensor& dk, Tensor& dv) {
  attention_cpu::backward(make_args<S>(q, k, v, c), o.data<S>(), lse.data<S>(), grad_o.data<S>(), dq.data<S>(),
                          dk.data<S>(), dv.data<S>());
}

std::vector<Tensor> backward(const Tensor& q, const Tensor& k, const Tensor& v, const Call& c, const Tensor& o,
                             const Tensor& lse, const Tensor& grad_o) {
  Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor dk = Tensor::empty(k.shape(), k.dtype(), k.device());
  Tensor dv = Tensor::empty(v.shape(), v.dtype(), v.device());
#ifdef LAT_WITH_CUDA
  if (q.device().is_cuda()) {
    attention_cuda::backward(make_args<float>(q, k, v, c), o.data<float>(), lse.data<float>(), grad_o.data<float>(),
                             dq.data<float>(), dk.data<float>(), dv.data<float>());
    return {dq, dk, dv};
  }
#endif
  if (q.dtype() == DType::f32)
    backward_cpu<float>(q, k, v, c, o, lse, grad_o, dq, dk, dv);
  else
    backward_cpu<double>(q, k, v, c, o, lse, grad_o, dq, dk, dv);
  return {dq, dk, dv};
}

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale,
                        int64_t window_size, std::optional<int64_t> q_offset) {
  const Dims d = check_args("causal_attention", q, k, v, window_size);
  const int64_t offset = q_offset.value_or(d.Tk - d.Tq);
  LAT_CHECK(offset >= 0 && offset <= d.Tk - d.Tq,
            "causal_attention: q_offset: expected a value in [0, Tk - Tq] = [0, " << d.Tk - d.Tq << "], got " << offset);
  const Call c{d, d.Tk, scale.value_or(1.0 / std::sqrt(static_cast<double>(d.D))), window_size, offset};

  const bool grad = needs_grad({&q, &k, &v});
  Tensor o = Tensor::empty({d.B, d.Tq, d.H, d.Dv}, q.dtype(), q.device());
  Tensor lse = grad ? Tensor::empty({d.B, d.H, d.Tq}, q.dtype(), q.device()) : Tensor();
  forward(q, k, v, c, o, grad ? &lse : nullptr);
  if (grad) {
    // Saved for backward: q, k, v (the node's inputs), o and the per-row logsumexp; O(T).
    record("causal_attention", {q, k, v}, {o}, [q, k, v, c, o, lse](const std::vector<Tensor>& g) {
      return backward(q, k, v, c, o, lse, g[0]);
    });
  }
  return o;
}

Tensor causal_attention_cached(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                               std::optional<double> scale, int64_t window_size) {
  const Dims d = check_args("causal_attention_cached", q, k_cache, v_cache, window_size);
  LAT_CHECK(q.dtype() == DType::f32, "causal_attention_cached: q: expected f32, got " << dtype_name(q.dtype()));
  LAT_CHECK(length >= d.Tq && length <= d.Tk, "causal_attention_cached: length: expected a value in [Tq, capacity] = ["
                                                  << d.Tq << ", " << d.Tk << "], got " << length);
  const Call c{d, length, scale.value_or(1.0 / std::sqrt(static_cast<double>(d.D))), window_size, length - d.Tq};
  Tensor o = Tensor::empty({d.B, d.Tq, d.H, d.Dv}, q.dtype(), q.device());
  forward(q, k_cache, v_cache, c, o, nullptr);
  return o;
}

}  // namespace lat
