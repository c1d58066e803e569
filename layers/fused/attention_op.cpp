// causal_attention: argument checks, dtype dispatch and the tape node around the CPU kernels.
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

template <class S>
attention_cpu::Args<S> make_args(const Tensor& q, const Tensor& k, const Tensor& v, const Dims& d, int64_t tk,
                                 double scale, int64_t window_size, int64_t q_offset) {
  attention_cpu::Args<S> a;
  a.q = q.data<S>();
  a.k = k.data<S>();
  a.v = v.data<S>();
  a.B = d.B, a.Tq = d.Tq, a.Tk = tk, a.H = d.H, a.Hkv = d.Hkv, a.D = d.D, a.Dv = d.Dv;
  a.q_batch_stride = d.Tq * d.H * d.D;
  a.k_batch_stride = k.size(1) * d.Hkv * d.D;
  a.v_batch_stride = v.size(1) * d.Hkv * d.Dv;
  a.q_offset = q_offset;
  a.window = window_size;
  a.scale = static_cast<S>(scale);
  return a;
}

#ifdef LAT_WITH_CUDA
attention_cuda::Args make_cuda_args(const Tensor& q, const Tensor& k, const Tensor& v, const Dims& d, int64_t tk,
                                    double scale, int64_t window_size, int64_t q_offset) {
  attention_cuda::Args a;
  a.q = q.data<float>();
  a.k = k.data<float>();
  a.v = v.data<float>();
  a.B = d.B, a.Tq = d.Tq, a.Tk = tk, a.H = d.H, a.Hkv = d.Hkv, a.D = d.D, a.Dv = d.Dv;
  a.q_batch_stride = d.Tq * d.H * d.D;
  a.k_batch_stride = k.size(1) * d.Hkv * d.D;
  a.v_batch_stride = v.size(1) * d.Hkv * d.Dv;
  a.q_offset = q_offset;
  a.window = window_size;
  a.scale = static_cast<float>(scale);
  a.device = q.device().index;
  return a;
}
#endif

template <class S>
void run_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Dims& d, int64_t tk, double scale,
                 int64_t window_size, int64_t q_offset, Tensor& o, Tensor* lse) {
  attention_cpu::forward(make_args<S>(q, k, v, d, tk, scale, window_size, q_offset), o.data<S>(),
                         lse != nullptr ? lse->data<S>() : nullptr);
}

template <class S>
std::vector<Tensor> run_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Dims& d, double scale,
                                 int64_t window_size, int64_t q_offset, const Tensor& o, const Tensor& lse,
                                 const Tensor& grad_o) {
  Tensor dq = Tensor::empty(q.shape(), q.dtype());
  Tensor dk = Tensor::empty(k.shape(), k.dtype());
  Tensor dv = Tensor::empty(v.shape(), v.dtype());
  attention_cpu::backward(make_args<S>(q, k, v, d, d.Tk, scale, window_size, q_offset), o.data<S>(), lse.data<S>(),
                          grad_o.data<S>(), dq.data<S>(), dk.data<S>(), dv.data<S>());
  return {dq, dk, dv};
}

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale,
                        int64_t window_size, std::optional<int64_t> q_offset) {
  const Dims d = check_args("causal_attention", q, k, v, window_size);
  const int64_t offset = q_offset.value_or(d.Tk - d.Tq);
  LAT_CHECK(offset >= 0 && offset <= d.Tk - d.Tq,
            "causal_attention: q_offset: expected a value in [0, Tk - Tq] = [0, " << d.Tk - d.Tq << "], got " << offset);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(d.D)));

  const bool grad = needs_grad({&q, &k, &v});
  Tensor o = Tensor::empty({d.B, d.Tq, d.H, d.Dv}, q.dtype(), q.device());
  Tensor lse = grad ? Tensor::empty({d.B, d.H, d.Tq}, q.dtype(), q.device()) : Tensor();
#ifdef LAT_WITH_CUDA
  if (q.device().is_cuda()) {
    attention_cuda::forward(make_cuda_args(q, k, v, d, d.Tk, s, window_size, offset), o.data<float>(),
                            grad ? lse.data<float>() : nullptr);
    if (grad) {
      auto backward_fn = [q, k, v, d, s, window_size, offset, o, lse](const std::vector<Tensor>& g) {
        Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
        Tensor dk = Tensor::empty(k.shape(), k.dtype(), k.device());
        Tensor dv = Tensor::empty(v.shape(), v.dtype(), v.device());
        attention_cuda::backward(make_cuda_args(q, k, v, d, d.Tk, s, window_size, offset), o.data<float>(),
                                 lse.data<float>(), g[0].data<float>(), dq.data<float>(), dk.data<float>(),
                                 dv.data<float>());
        return std::vector<Tensor>{dq, dk, dv};
      };
      record("causal_attention", {q, k, v}, {o}, backward_fn);
    }
    return o;
  }
#endif
  if (q.dtype() == DType::f32)
    run_forward<float>(q, k, v, d, d.Tk, s, window_size, offset, o, grad ? &lse : nullptr);
  else
    run_forward<double>(q, k, v, d, d.Tk, s, window_size, offset, o, grad ? &lse : nullptr);

  if (grad) {
    // Saved for backward: q, k, v (the node's inputs), o and the per-row logsumexp; O(T).
    record("causal_attention", {q, k, v}, {o}, [q, k, v, d, s, window_size, offset, o, lse](const std::vector<Tensor>& g) {
      return q.dtype() == DType::f32 ? run_backward<float>(q, k, v, d, s, window_size, offset, o, lse, g[0])
                                     : run_backward<double>(q, k, v, d, s, window_size, offset, o, lse, g[0]);
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
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(d.D)));
  Tensor o = Tensor::empty({d.B, d.Tq, d.H, d.Dv}, q.dtype(), q.device());
#ifdef LAT_WITH_CUDA
  if (q.device().is_cuda()) {
    attention_cuda::forward(make_cuda_args(q, k_cache, v_cache, d, length, s, window_size, length - d.Tq),
                            o.data<float>(), nullptr);
    return o;
  }
#endif
  run_forward<float>(q, k_cache, v_cache, d, length, s, window_size, length - d.Tq, o, nullptr);
  return o;
}

}  // namespace lat
