// Float64 token-by-token references of the linear-attention family, built from the core
// tape ops so that backward() gives float64 gradients of every input. They are the test
// oracle of the chunk and fused-recurrent kernels, so they stay plain recurrences with no
// tricks: a wrong kernel cannot share a wrong derivation with them. Letters as in
// common.h. All (b, h) pairs advance together, one token at a time, on a state
// S [B, H, K, V].
#include <vector>

#include "layers/linear_attention/common.h"
#include "lat/linear_attention.h"
#include "lat/ops.h"

namespace lat {
namespace {

using linear_attention::Dims;

// x [B, T, H, D] (or [B, T, H]) -> T tensors of x[:, t] reshaped to `per_token` (one
// split node, so backward stays O(T)).
std::vector<Tensor> tokens(const Tensor& x, const Shape& per_token) {
  std::vector<Tensor> parts = split(x, std::vector<int64_t>(x.size(1), 1), 1);
  for (Tensor& p : parts) p = p.reshape(per_token);
  return parts;
}

Tensor initial_or_zeros(const Tensor& initial_state, const Dims& d, int64_t state_v) {
  if (initial_state.defined()) return initial_state.to(DType::f64);
  return Tensor::zeros({d.B, d.H, d.K, state_v}, DType::f64);
}

// o_t [B, H, 1, V] for t = 0..T-1 -> o [B, T, H, V].
Tensor stack_outputs(std::vector<Tensor>& o_t, const Dims& d, int64_t v) {
  for (Tensor& o : o_t) o = o.reshape({d.B, 1, d.H, v});
  return concat(o_t, 1);
}

// L2 normalization over the last axis, x / sqrt(sum x^2 + 1e-6) (fla's
// use_qk_l2norm_in_kernel, ALGORITHMS.md 2.4).
Tensor l2norm(const Tensor& x) { return x * rsqrt(sum(x * x, -1, true) + 1e-6); }

}  // namespace

LinearAttentionOutput naive_linear_attn(const Tensor& q, const Tensor& k, const Tensor& v,
                                        std::optional<double> scale, bool normalize,
                                        const Tensor& initial_state, bool output_final_state) {
  const char* op = "naive_linear_attn";
  Dims d = linear_attention::check_qkv(op, q, k, v, linear_attention::Dtypes::f32_or_f64);
  int64_t state_v = normalize ? d.V + 1 : d.V;
  linear_attention::check_initial_state(op, initial_state, q, d, state_v, linear_attention::call_spans(op, {}, d));
  double s = linear_attention::resolve_scale(scale, d.K);

  Tensor v64 = v.to(DType::f64);
  // The normalizer rides along as a constant-1 value column: its state column is z and its
  // readout is scale q . z (ALGORITHMS.md 2.2).
  if (normalize) v64 = concat({v64, Tensor::ones({d.B, d.T, d.H, 1}, DType::f64)}, 3);
  std::vector<Tensor> q_t = tokens(q.to(DType::f64), {d.B, d.H, 1, d.K});
  std::vector<Tensor> k_t = tokens(k.to(DType::f64), {d.B, d.H, d.K, 1});
  std::vector<Tensor> v_t = tokens(v64, {d.B, d.H, 1, state_v});

  Tensor S = initial_or_zeros(initial_state, d, state_v);
  std::vector<Tensor> o_t(d.T);
  for (int64_t t = 0; t < d.T; ++t) {
    S = S + k_t[t] * v_t[t];                   // S_t = S_{t-1} + k_t v_t^T
    Tensor read = matmul(q_t[t], S) * s;       // scale S_t^T q_t, [B, H, 1, state_v]
    if (normalize) {
      std::vector<Tensor> parts = split(read, {d.V, 1}, 3);
      o_t[t] = parts[0] / (parts[1] + 1e-6);  // / (scale q_t . z_t + 1e-6)
    } else {
      o_t[t] = read;
    }
  }
  return {stack_outputs(o_t, d, d.V), output_final_state ? S : Tensor()};
}

LinearAttentionOutput naive_simple_gla(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                       std::optional<double> scale, const Tensor& initial_state,
                                       bool output_final_state) {
  const char* op = "naive_simple_gla";
  Dims d = linear_attention::check_qkv(op, q, k, v, linear_attention::Dtypes::f32_or_f64);
  linear_attention::check_g(op, g, q, d);
  linear_attention::check_initial_state(op, initial_state, q, d, d.V, linear_attention::call_spans(op, {}, d));
  double s = linear_attention::resolve_scale(scale, d.K);

  std::vector<Tensor> q_t = tokens(q.to(DType::f64), {d.B, d.H, 1, d.K});
  std::vector<Tensor> k_t = tokens(k.to(DType::f64), {d.B, d.H, d.K, 1});
  std::vector<Tensor> v_t = tokens(v.to(DType::f64), {d.B, d.H, 1, d.V});
  std::vector<Tensor> decay_t = tokens(exp(g.to(DType::f64)), {d.B, d.H, 1, 1});

  Tensor S = initial_or_zeros(initial_state, d, d.V);
  std::vector<Tensor> o_t(d.T);
  for (int64_t t = 0; t < d.T; ++t) {
    S = S * decay_t[t] + k_t[t] * v_t[t];  // S_t = exp(g_t) S_{t-1} + k_t v_t^T
    o_t[t] = matmul(q_t[t], S) * s;        // o_t = scale S_t^T q_t
  }
  return {stack_outputs(o_t, d, d.V), output_final_state ? S : Tensor()};
}

LinearAttentionOutput naive_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& g, const Tensor& beta, std::optional<double> scale,
                                             const Tensor& initial_state, bool output_final_state,
                                             bool use_qk_l2norm_in_kernel) {
  const char* op = "naive_gated_delta_rule";
  Dims d = linear_attention::check_qkv(op, q, k, v, linear_attention::Dtypes::f32_or_f64);
  if (g.defined()) linear_attention::check_g(op, g, q, d);
  linear_attention::check_beta(op, beta, q, d);
  linear_attention::check_initial_state(op, initial_state, q, d, d.V, linear_attention::call_spans(op, {}, d));
  double s = linear_attention::resolve_scale(scale, d.K);

  Tensor q64 = q.to(DType::f64), k64 = k.to(DType::f64);
  if (use_qk_l2norm_in_kernel) {
    q64 = l2norm(q64);
    k64 = l2norm(k64);
  }
  std::vector<Tensor> q_t = tokens(q64, {d.B, d.H, 1, d.K});
  std::vector<Tensor> k_row = tokens(k64, {d.B, d.H, 1, d.K});
  std::vector<Tensor> v_t = tokens(v.to(DType::f64), {d.B, d.H, 1, d.V});
  std::vector<Tensor> beta_t = tokens(beta.to(DType::f64), {d.B, d.H, 1, 1});
  std::vector<Tensor> decay_t;
  if (g.defined()) decay_t = tokens(exp(g.to(DType::f64)), {d.B, d.H, 1, 1});

  Tensor S = initial_or_zeros(initial_state, d, d.V);
  std::vector<Tensor> o_t(d.T);
  for (int64_t t = 0; t < d.T; ++t) {
    // S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, as three steps
    // (ALGORITHMS.md 2.4): S <- a S; u = beta (v - S^T k); S <- S + k u^T.
    if (g.defined()) S = S * decay_t[t];
    Tensor u = beta_t[t] * (v_t[t] - matmul(k_row[t], S));            // [B, H, 1, V]
    S = S + k_row[t].reshape({d.B, d.H, d.K, 1}) * u;                  // k_t u_t^T
    o_t[t] = matmul(q_t[t], S) * s;
  }
  return {stack_outputs(o_t, d, d.V), output_final_state ? S : Tensor()};
}

LinearAttentionOutput naive_kda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                                std::optional<double> scale, const Tensor& initial_state, bool output_final_state,
                                bool use_qk_l2norm_in_kernel) {
  const char* op = "naive_kda";
  Dims d = linear_attention::check_qkv(op, q, k, v, linear_attention::Dtypes::f32_or_f64);
  linear_attention::check_g_per_key(op, g, q, d);
  linear_attention::check_beta(op, beta, q, d);
  linear_attention::check_initial_state(op, initial_state, q, d, d.V, linear_attention::call_spans(op, {}, d));
  double s = linear_attention::resolve_scale(scale, d.K);

  Tensor q64 = q.to(DType::f64), k64 = k.to(DType::f64);
  if (use_qk_l2norm_in_kernel) {
    q64 = l2norm(q64);
    k64 = l2norm(k64);
  }
  std::vector<Tensor> q_t = tokens(q64, {d.B, d.H, 1, d.K});
  std::vector<Tensor> k_row = tokens(k64, {d.B, d.H, 1, d.K});
  std::vector<Tensor> v_t = tokens(v.to(DType::f64), {d.B, d.H, 1, d.V});
  std::vector<Tensor> beta_t = tokens(beta.to(DType::f64), {d.B, d.H, 1, 1});
  std::vector<Tensor> decay_t = tokens(exp(g.to(DType::f64)), {d.B, d.H, d.K, 1});

  Tensor S = initial_or_zeros(initial_state, d, d.V);
  std::vector<Tensor> o_t(d.T);
  for (int64_t t = 0; t < d.T; ++t) {
    // S_t = (I - beta_t k_t k_t^T) Diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T, as three steps:
    // S <- Diag(a) S; u = beta (v - S^T k); S <- S + k u^T.
    S = S * decay_t[t];
    Tensor u = beta_t[t] * (v_t[t] - matmul(k_row[t], S));  // [B, H, 1, V]
    S = S + k_row[t].reshape({d.B, d.H, d.K, 1}) * u;        // k_t u_t^T
    o_t[t] = matmul(q_t[t], S) * s;
  }
  return {stack_outputs(o_t, d, d.V), output_final_state ? S : Tensor()};
}

}  // namespace lat
