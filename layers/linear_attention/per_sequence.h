// The span loops of both linear-attention families (decay.cpp, delta.cpp): the one switch
// over forms and backends, and the forward and backward of every span of a call (the whole
// call, or one packed sequence of cu_seqlens; common.h), each a kernel call with pointers
// offset to the span's first token and its state.
//
// A family F names its kernel structs and kernels (decay_kernels.h, delta_kernels.h):
//   F::Params, F::Saved, F::Grads;
//   F::chunk_cpu, F::fused_recurrent_cpu and, in a lat built with CUDA, F::chunk_cuda
//     (constexpr Kernels<F::Params, F::Saved, F::Grads>);
//   F::state_v(p): the state's last dim;
//   F::offset_rows(params or grads, row): offsets the family's own [B, T, H] inputs or
//     gradients (beyond g and dg, which every family has) by `row` floats.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "layers/linear_attention/common.h"

namespace lat::linear_attention {

/// One form's forward and backward kernel on one backend (see decay_kernels.h).
template <class Params, class Saved, class Grads>
struct Kernels {
  std::shared_ptr<const Saved> (*forward)(const Params& p, float* o, float* ht, bool save);
  void (*backward)(const Params& p, const Saved& saved, const float* d_o, const float* dht, const Grads& grads);
};

/// The heads of q and k: p.Hk for a family whose params carry grouped q/k heads (the
/// decayed family, decay_kernels.h), else p.H.
template <class Params>
int64_t qk_heads(const Params& p) {
  if constexpr (requires { p.Hk; })
    return p.Hk;
  else
    return p.H;
}

/// Where span s starts in each layout, in floats: [B, T, Hk, K] (q, k and their gradients),
/// [B, T, H, V] (v, o), [B, T, H] (g, and the family's own per-token inputs) and the
/// states [states, H, K, state_v]. All 0 for the whole call.
struct SpanOffsets {
  int64_t k, v, row, state;
  template <class F, class Params>
  static SpanOffsets of(const Params& p, const Span& s) {
    return {s.t0 * qk_heads(p) * p.K, s.t0 * p.H * p.V, s.t0 * p.H, s.n * p.H * p.K * F::state_v(p)};
  }
};

/// The kernels of `form` on `device`. fused_recurrent has CPU kernels only (its ops accept
/// CPU tensors only) unless the family names F::fused_recurrent_cuda; a CUDA tensor exists
/// only in a lat built with CUDA.
template <class F>
const Kernels<typename F::Params, typename F::Saved, typename F::Grads>& kernels_of(
    Form form, [[maybe_unused]] const Device& device) {
#ifdef LAT_WITH_CUDA
  if constexpr (requires { F::fused_recurrent_cuda; })
    if (form == Form::fused_recurrent && device.is_cuda()) return F::fused_recurrent_cuda;
#endif
  if (form == Form::fused_recurrent) return F::fused_recurrent_cpu;
#ifdef LAT_WITH_CUDA
  if (device.is_cuda()) return F::chunk_cuda;
#endif
  return F::chunk_cpu;
}

/// The params of span s: its T and pointers to its first token and its initial state.
template <class F>
typename F::Params span_params(const typename F::Params& p, const Span& s) {
  const SpanOffsets at = SpanOffsets::of<F>(p, s);
  typename F::Params r = p;
  r.q = p.q + at.k, r.k = p.k + at.k, r.v = p.v + at.v;
  r.g = offset_or_null(p.g, at.row), r.h0 = offset_or_null(p.h0, at.state);
  F::offset_rows(r, at.row);
  r.T = s.t1 - s.t0;
  return r;
}

/// Forward of every span of a call with params p: writes o [B, T, H, V] and, when ht is
/// not null, the final states [states, H, K, state_v]. Returns each span's saved state for
/// its backward (null entries unless `save`).
template <class F>
std::vector<std::shared_ptr<const typename F::Saved>> forward_spans(Form form, const Device& device,
                                                                    const typename F::Params& p,
                                                                    const std::vector<Span>& spans, float* o, float* ht,
                                                                    bool save) {
  const auto& kernels = kernels_of<F>(form, device);
  std::vector<std::shared_ptr<const typename F::Saved>> saved;
  for (const Span& s : spans) {
    const SpanOffsets at = SpanOffsets::of<F>(p, s);
    saved.push_back(kernels.forward(span_params<F>(p, s), o + at.v, offset_or_null(ht, at.state), save));
  }
  return saved;
}

/// Backward of every span from forward_spans' `saved`, d_o [B, T, H, V] and dht (null:
/// zero): writes the whole call's `grads` (pointers to the first token and state; a null
/// one is not wanted).
template <class F>
void backward_spans(Form form, const Device& device, const typename F::Params& p, const std::vector<Span>& spans,
                    const std::vector<std::shared_ptr<const typename F::Saved>>& saved, const float* d_o,
                    const float* dht, const typename F::Grads& grads) {
  const auto& kernels = kernels_of<F>(form, device);
  for (size_t i = 0; i < spans.size(); ++i) {
    const SpanOffsets at = SpanOffsets::of<F>(p, spans[i]);
    typename F::Grads g = grads;
    g.dq = grads.dq + at.k, g.dk = grads.dk + at.k, g.dv = grads.dv + at.v;
    g.dg = offset_or_null(grads.dg, at.row), g.dh0 = offset_or_null(grads.dh0, at.state);
    F::offset_rows(g, at.row);
    kernels.backward(span_params<F>(p, spans[i]), *saved[i], d_o + at.v, offset_or_null(dht, at.state), g);
  }
}

}  // namespace lat::linear_attention
