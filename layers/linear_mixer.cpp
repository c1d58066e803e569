// The pieces the linear mixers share: config checks, registration of the fla-named
// parameters, Mamba-2 decay and its initialization, short convolutions with their
// generation state, the gated output norm, and the forward/step plumbing.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "lat/ops.h"
#include "lat/tape.h"
#include "layers/cu_seqlens.h"
#include "layers/linear_attention/common.h"
#include "layers/linear_attention_layers.h"

namespace lat {
namespace {

// The linear-attention kernels' limit on K and V (ALGORITHMS.md 2.6).
using linear_attention::kMaxHeadDim;

}  // namespace

// Mamba-2's initialization (state-spaces/mamba, mamba_ssm/modules/mamba2.py): A ~ U[1, 16],
// A_log = log A; dt ~ exp(U[log 1e-3, log 1e-1]) clamped to >= 1e-4, and dt_bias the inverse
// softplus of dt, dt + log(-expm1(-dt)), so that softplus(dt_bias) = dt at a zero input.
void init_mamba2_decay(Tensor& A_log, Tensor& dt_bias, Generator& gen) {
  const double dt_min = 1e-3, dt_max = 1e-1, dt_floor = 1e-4;
  for (int64_t h = 0; h < A_log.numel(); ++h) {
    const double A = 1.0 + 15.0 * gen.uniform();
    A_log.set({h}, std::log(A));
  }
  for (int64_t h = 0; h < dt_bias.numel(); ++h) {
    double dt = std::exp(std::log(dt_min) + gen.uniform() * (std::log(dt_max) - std::log(dt_min)));
    dt = std::max(dt, dt_floor);
    dt_bias.set({h}, dt + std::log(-std::expm1(-dt)));
  }
}

namespace {

// A short convolution over x [B, T, D]: without a state the training form (zero history,
// per packed sequence of cu_seqlens when given); with one, it continues from the conv
// state and leaves the last conv_size - 1 inputs in it.
Tensor run_conv(const ShortConvolution& conv, const Tensor& x, Tensor* conv_state, const Tensor& cu_seqlens) {
  if (conv_state == nullptr || conv.conv_size() == 1) return conv.forward(x, cu_seqlens);
  if (x.size(1) == 1) return conv.step(x, *conv_state);
  Tensor y = short_conv(x, conv.weight(), *conv_state);
  *conv_state = short_conv_final_state(x, conv.conv_size(), *conv_state);
  return y;
}

}  // namespace

LinearMixer::LinearMixer(std::string kind, const MixerConfig& config, ValueHeads value_heads)
    : config_(config), kind_(std::move(kind)) {
  MixerConfig& c = config_;
  const std::string op = "LinearMixer(" + kind_ + ")";
  LAT_CHECK(c.d_model > 0 && c.n_heads > 0,
            op << ": expected positive d_model and n_heads, got " << c.d_model << ", " << c.n_heads);
  if (c.head_dim == 0) {
    LAT_CHECK(c.d_model % c.n_heads == 0,
              op << ": d_model: expected a multiple of n_heads " << c.n_heads << ", got " << c.d_model);
    c.head_dim = c.d_model / c.n_heads;
  }
  LAT_CHECK(c.head_dim > 0 && c.head_dim <= kMaxHeadDim,
            op << ": head_dim: expected 1.." << kMaxHeadDim << " (the kernels' limit), got " << c.head_dim);
  const double v = static_cast<double>(c.head_dim) * c.expand_v;
  LAT_CHECK(c.expand_v > 0 && v >= 1 && v == std::round(v) && v <= kMaxHeadDim,
            op << ": expand_v: expected head_dim * expand_v a whole number in 1.." << kMaxHeadDim << ", got "
               << c.head_dim << " * " << c.expand_v << " = " << v);
  value_dim_ = static_cast<int64_t>(v);
  LAT_CHECK(!c.use_short_conv || c.conv_size >= 1,
            op << ": conv_size: expected >= 1, got " << c.conv_size);
  LAT_CHECK(c.chunk_size >= 1, op << ": chunk_size: expected >= 1, got " << c.chunk_size);
  LAT_CHECK(c.norm_eps > 0, op << ": norm_eps: expected > 0, got " << c.norm_eps);
  value_heads_ = c.n_v_heads == 0 ? c.n_heads : c.n_v_heads;
  LAT_CHECK(value_heads_ > 0 && value_heads_ % c.n_heads == 0,
            op << ": n_v_heads: expected a positive multiple of n_heads " << c.n_heads << ", got " << c.n_v_heads);
  LAT_CHECK(value_heads == ValueHeads::grouped || value_heads_ == c.n_heads,
            op << ": n_v_heads: expected n_heads " << c.n_heads
               << " (value heads apart from key heads exist in gdn and delta_net only), got " << c.n_v_heads);
}

void LinearMixer::add_qkv_proj(Generator& gen) {
  const MixerConfig& c = config_;
  const int64_t HK = c.n_heads * c.head_dim, HV = value_heads_ * value_dim_;
  q_proj_ = &register_module("q_proj", std::make_unique<Linear>(c.d_model, HK, gen, c.init_std));
  k_proj_ = &register_module("k_proj", std::make_unique<Linear>(c.d_model, HK, gen, c.init_std));
  v_proj_ = &register_module("v_proj", std::make_unique<Linear>(c.d_model, HV, gen, c.init_std));
}

void LinearMixer::add_mamba2_decay(Generator& gen) {
  const MixerConfig& c = config_;
  a_proj_ = &register_module("a_proj", std::make_unique<Linear>(c.d_model, value_heads_, gen, c.init_std));
  Tensor A_log = Tensor::empty({value_heads_}), dt_bias = Tensor::empty({value_heads_});
  init_mamba2_decay(A_log, dt_bias, gen);
  A_log_ = register_parameter("A_log", A_log);
  dt_bias_ = register_parameter("dt_bias", dt_bias);
}

void LinearMixer::add_beta_proj(Generator& gen) {
  const MixerConfig& c = config_;
  b_proj_ = &register_module("b_proj", std::make_unique<Linear>(c.d_model, value_heads_, gen, c.init_std));
}

void LinearMixer::add_short_convs(Generator& gen) {
  const MixerConfig& c = config_;
  if (!c.use_short_conv) return;
  const int64_t HK = c.n_heads * c.head_dim, HV = value_heads_ * value_dim_;
  q_conv1d_ = &register_module("q_conv1d", std::make_unique<ShortConvolution>(HK, c.conv_size, gen));
  k_conv1d_ = &register_module("k_conv1d", std::make_unique<ShortConvolution>(HK, c.conv_size, gen));
  v_conv1d_ = &register_module("v_conv1d", std::make_unique<ShortConvolution>(HV, c.conv_size, gen));
}

void LinearMixer::add_output_norm(Generator& gen) {
  const MixerConfig& c = config_;
  if (c.use_gate)
    g_proj_ = &register_module("g_proj",
                               std::make_unique<Linear>(c.d_model, value_heads_ * value_dim_, gen, c.init_std));
  o_norm_ = &register_module("o_norm", std::make_unique<RMSNorm>(value_dim_, c.norm_eps));
}

void LinearMixer::add_o_proj(Generator& gen) {
  const MixerConfig& c = config_;
  o_proj_ = &register_module("o_proj",
                             std::make_unique<Linear>(value_heads_ * value_dim_, c.d_model, gen, c.out_init_std));
}

LinearMixer::Projections LinearMixer::project(const Tensor& x) const {
  // b before a: the order in which the layers ran these as separate Linears (beta, then the
  // decay); dx adds the products in the reverse of the list, so this order keeps its bits.
  std::vector<const Linear*> layers{q_proj_, k_proj_, v_proj_};
  for (const Linear* l : {b_proj_, a_proj_, g_proj_})
    if (l != nullptr) layers.push_back(l);
  const std::vector<Tensor> outs = fused_linear_forward(x, layers);
  Projections p{outs[0], outs[1], outs[2], {}, {}, {}};
  size_t next = 3;
  if (b_proj_ != nullptr) p.b = outs[next++];
  if (a_proj_ != nullptr) p.a = outs[next++];
  if (g_proj_ != nullptr) p.g = outs[next++];
  return p;
}

LinearMixer::QKV LinearMixer::conv_qkv(const Projections& p, LinearMixerState* state, WithoutConv without_conv,
                                       const Tensor& cu_seqlens) const {
  const int64_t B = p.q.size(0), T = p.q.size(1), H = config_.n_heads;
  Tensor q = p.q, k = p.k, v = p.v;
  if (q_conv1d_ != nullptr) {
    q = run_conv(*q_conv1d_, q, state ? &state->q_conv : nullptr, cu_seqlens);
    k = run_conv(*k_conv1d_, k, state ? &state->k_conv : nullptr, cu_seqlens);
    v = run_conv(*v_conv1d_, v, state ? &state->v_conv : nullptr, cu_seqlens);
  } else if (without_conv == WithoutConv::silu) {
    q = silu(q);
    k = silu(k);
    v = silu(v);
  }
  q = q.reshape({B, T, H, config_.head_dim});
  k = k.reshape({B, T, H, config_.head_dim});
  // The repeat comes after the convolutions (they act on the H*K channels of q_proj and
  // k_proj); the kernels' in-kernel L2 norm commutes with it.
  if (const int64_t G = value_heads_ / H; G > 1) {
    q = linear_attention::repeat_heads(q, G);
    k = linear_attention::repeat_heads(k, G);
  }
  return {q, k, v.reshape({B, T, value_heads_, value_dim_})};
}

Tensor LinearMixer::mamba2_decay(const Tensor& a) const {
  // softplus >= 0 and exp > 0, so g <= 0 for every input (the kernels reject g > 0).
  return -(exp(A_log_) * softplus(a + dt_bias_));
}

Tensor LinearMixer::mamba2_log_decay(const Tensor& x) const { return mamba2_decay(a_proj_->forward(x)); }

Tensor LinearMixer::beta(const Tensor& b) const { return sigmoid(b); }

Tensor LinearMixer::gated_output(const Tensor& o, const Tensor& g) const {
  const int64_t B = o.size(0), T = o.size(1), H = o.size(2), V = o.size(3);
  Tensor y = o_norm_->forward(o);
  if (g.defined()) y = swiglu(g.reshape({B, T, H, V}), y);
  return output(y);
}

Tensor LinearMixer::output(const Tensor& o) const {
  return o_proj_->forward(o.reshape({o.size(0), o.size(1), o.size(2) * o.size(3)}));
}

bool LinearMixer::use_chunk(int64_t T, const LinearMixerState* state) const {
  return state == nullptr || T > config_.chunk_size;
}

Tensor LinearMixer::token(const Tensor& t) {
  Shape shape = t.shape();
  shape.erase(shape.begin() + 1);
  return t.reshape(shape);
}

float LinearMixer::scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(key_dim()))); }

Tensor LinearMixer::forward(const Tensor& x, const Tensor& cu_seqlens) const {
  const std::string op = kind_ + "::forward";
  LAT_CHECK(x.dim() == 3 && x.size(2) == config_.d_model,
            op << ": x: expected shape [B, T, " << config_.d_model << "], got " << shape_str(x.shape()));
  if (!cu_seqlens.defined()) return run(x, nullptr, Tensor());
  // The ops take packed sequences as one row (B == 1).
  const int64_t B = x.size(0), T = x.size(1), D = config_.d_model;
  const Tensor cu = cu_seqlens_with_row_starts(op.c_str(), cu_seqlens, B, T);
  return run(x.reshape({1, B * T, D}), nullptr, cu).reshape({B, T, D});
}

std::unique_ptr<MixerState> LinearMixer::make_state(int64_t batch) const {
  LAT_CHECK(batch > 0, kind_ << "::make_state: batch: expected a positive size, got " << batch);
  auto state = std::make_unique<LinearMixerState>();
  state->kind = kind_;
  state->batch = batch;
  // The states live where the parameters do, so a layer on the GPU generates there too.
  const Device device = q_proj_->weight().device();
  state->recurrent_state = Tensor::zeros({batch, value_heads_, key_dim(), state_columns()}, DType::f32, device);
  if (q_conv1d_ != nullptr && config_.conv_size > 1) {
    state->q_conv = q_conv1d_->initial_state(batch).to(device);
    state->k_conv = k_conv1d_->initial_state(batch).to(device);
    state->v_conv = v_conv1d_->initial_state(batch).to(device);
  }
  return state;
}

Tensor LinearMixer::step(const Tensor& x, MixerState& state) const {
  auto* s = dynamic_cast<LinearMixerState*>(&state);
  LAT_CHECK(s != nullptr && s->kind == kind_,
            kind_ << "::step: state: expected a state made by a " << kind_ << " mixer's make_state, got "
                  << (s != nullptr ? "one of kind " + s->kind : std::string("another kind of state")));
  LAT_CHECK(x.dim() == 3 && x.size(0) == s->batch && x.size(1) >= 1 && x.size(2) == config_.d_model,
            kind_ << "::step: x: expected shape [" << s->batch << ", T >= 1, " << config_.d_model << "], got "
                  << shape_str(x.shape()));
  NoGradGuard no_grad;
  return run(x, s, Tensor());
}

}  // namespace lat
