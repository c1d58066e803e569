// The Mamba-2 mixer (mamba2_layer.h): its checks, initialization, and the block as a chain of
// lat ops: one projection, the short convolution (with bias), the SSD through the scalar-decay
// linear-attention ops, the D skip, the grouped gated RMSNorm, the output projection.
#include "layers/mamba2_layer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "lat/linear_attention.h"
#include "lat/ops.h"
#include "lat/tape.h"
#include "layers/cu_seqlens.h"
#include "layers/fused/shared_input_linear.h"
#include "layers/linear_attention/common.h"

namespace lat {
namespace {

using linear_attention::kMaxHeadDim;

// mamba_ssm's dt initialization (mamba_ssm/modules/mamba2.py; transformers' Mamba2 uses the
// same): dt = exp(U[log dt_min, log dt_max]) clamped to >= 1e-4, dt_bias = softplus^-1(dt) =
// dt + log(-expm1(-dt)), so that softplus(dt_bias) = dt at a zero input.
void init_dt_bias(Tensor& dt_bias, double dt_min, double dt_max, Generator& gen) {
  const double dt_floor = 1e-4;
  for (int64_t h = 0; h < dt_bias.numel(); ++h) {
    double dt = std::exp(std::log(dt_min) + gen.uniform() * (std::log(dt_max) - std::log(dt_min)));
    dt = std::max(dt, dt_floor);
    dt_bias.set({h}, dt + std::log(-std::expm1(-dt)));
  }
}

}  // namespace

Mamba2::Mamba2(const MixerConfig& config, Generator& gen) : config_(config) {
  const Mamba2Options& o = config_.mamba;
  const std::string op = "Mamba2";
  LAT_CHECK(config_.d_model > 0 && o.expand > 0 && o.n_groups > 0,
            op << ": expected positive d_model, expand and n_groups, got " << config_.d_model << ", " << o.expand
               << ", " << o.n_groups);
  LAT_CHECK(o.head_dim >= 1 && o.head_dim <= kMaxHeadDim,
            op << ": head_dim: expected 1.." << kMaxHeadDim << " (the kernels' limit), got " << o.head_dim);
  LAT_CHECK(o.d_state >= 1 && o.d_state <= kMaxHeadDim,
            op << ": d_state: expected 1.." << kMaxHeadDim << " (the kernels' limit), got " << o.d_state);
  inner_dim_ = o.expand * config_.d_model;
  LAT_CHECK(inner_dim_ % o.head_dim == 0, op << ": head_dim: expected a divisor of expand * d_model = " << inner_dim_
                                             << ", got " << o.head_dim);
  heads_ = inner_dim_ / o.head_dim;
  LAT_CHECK(heads_ % o.n_groups == 0,
            op << ": n_groups: expected a divisor of the head count " << heads_ << ", got " << o.n_groups);
  LAT_CHECK(o.conv_size >= 1, op << ": conv_size: expected >= 1, got " << o.conv_size);
  LAT_CHECK(o.chunk_size >= 1, op << ": chunk_size: expected >= 1, got " << o.chunk_size);
  LAT_CHECK(o.dt_min > 0 && o.dt_min <= o.dt_max,
            op << ": dt_min, dt_max: expected 0 < dt_min <= dt_max, got " << o.dt_min << ", " << o.dt_max);
  LAT_CHECK(o.time_step_limit[0] >= 0 && o.time_step_limit[0] < o.time_step_limit[1],
            op << ": time_step_limit: expected [lo, hi] with 0 <= lo < hi, got [" << o.time_step_limit[0] << ", "
               << o.time_step_limit[1] << "]");
  LAT_CHECK(config_.norm_eps > 0, op << ": norm_eps: expected > 0, got " << config_.norm_eps);

  // Registered in Mamba2Mixer's order.
  const int64_t H = heads_;
  const ConvBias conv_bias = o.conv_bias ? ConvBias::with : ConvBias::without;
  conv1d_ = &register_module("conv1d", std::make_unique<ShortConvolution>(conv_dim(), o.conv_size, gen, conv_bias));
  in_proj_ = &register_module("in_proj", std::make_unique<Linear>(config_.d_model, inner_dim_ + conv_dim() + H, gen,
                                                                  config_.init_std, o.proj_bias));
  Tensor dt_bias = Tensor::empty({H});
  init_dt_bias(dt_bias, o.dt_min, o.dt_max, gen);
  dt_bias_ = register_parameter("dt_bias", dt_bias);
  Tensor A_log = Tensor::empty({H});
  for (int64_t h = 0; h < H; ++h) A_log.set({h}, std::log(static_cast<double>(h + 1)));
  A_log_ = register_parameter("A_log", A_log);
  norm_ = &register_module("norm", std::make_unique<RMSNorm>(inner_dim_, config_.norm_eps));
  D_ = register_parameter("D", Tensor::ones({H}));
  out_proj_ = &register_module("out_proj", std::make_unique<Linear>(inner_dim_, config_.d_model, gen,
                                                                    config_.out_init_std, o.proj_bias));
}

Tensor Mamba2::time_step(const Tensor& dt) const {
  Tensor t = softplus(dt + dt_bias_);
  // clamp(t, lo, hi) as lo + relu(t - lo) and hi - relu(hi - t): the gradient passes inside
  // the limits and stops outside, as torch.clamp's. softplus >= 0 makes lo = 0 a no-op.
  const auto [lo, hi] = options().time_step_limit;
  if (lo > 0) t = relu(t - lo) + lo;
  if (std::isfinite(hi)) t = hi - relu(hi - t);
  return t;
}

Tensor Mamba2::gated_norm(const Tensor& y, const Tensor& z) const {
  const Tensor gated = swiglu(z, y);  // y * silu(z)
  const int64_t G = options().n_groups;
  if (G == 1) return norm_->forward(gated);
  const int64_t B = y.size(0), T = y.size(1), I = inner_dim_;
  const Tensor unit = Tensor::ones({I / G}, gated.dtype(), gated.device());
  return rms_norm(gated.reshape({B, T, G, I / G}), unit, config_.norm_eps).reshape({B, T, I}) * norm_->weight();
}

Mamba2::Parts Mamba2::project(const Tensor& x) const {
  const Mamba2Options& o = options();
  const int64_t B = x.size(0), T = x.size(1), D = config_.d_model;
  const int64_t GN = o.n_groups * o.d_state;
  const std::vector<int64_t> widths{inner_dim_, inner_dim_, GN, GN, heads_};
  // Rows of in_proj.weight (and in_proj.bias) part by part: the slices are small copies of
  // the weight, where splitting the [B, T, 2 I + 2 G N + H] output would copy every activation.
  std::vector<Tensor> weights, biases;
  int64_t row = 0;
  for (int64_t width : widths) {
    weights.push_back(slice(in_proj_->weight(), 0, row, row + width));
    if (in_proj_->bias().defined()) biases.push_back(slice(in_proj_->bias(), 0, row, row + width));
    row += width;
  }
  std::vector<Tensor> outs = shared_input_linear(x.reshape({B * T, D}), weights);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!biases.empty()) outs[i] = outs[i] + biases[i];
    outs[i] = outs[i].reshape({B, T, widths[i]});
  }
  return {outs[0], outs[1], outs[2], outs[3], outs[4]};
}

std::vector<Tensor> Mamba2::convolve(const Parts& parts, const Tensor& cu_seqlens) const {
  std::vector<Tensor> out;
  int64_t channel = 0;
  for (const Tensor* part : {&parts.x, &parts.B, &parts.C}) {
    const int64_t width = part->size(2);
    const Tensor bias =
        conv1d_->bias().defined() ? slice(conv1d_->bias(), 0, channel, channel + width) : Tensor();
    out.push_back(short_conv(*part, slice(conv1d_->weight(), 0, channel, channel + width), {}, cu_seqlens, bias));
    channel += width;
  }
  return out;
}

Tensor Mamba2::run(const Tensor& x, Mamba2State* state, const Tensor& cu_seqlens) const {
  const Mamba2Options& o = options();
  const int64_t B = x.size(0), T = x.size(1), H = heads_, P = o.head_dim, G = o.n_groups, N = o.d_state;
  const Parts parts = project(x);

  // The convolution: zeros before each sequence in forward(), channel group by channel group
  // (it is depthwise); in step() continued from the conv state, which keeps the last W - 1
  // inputs of all its channels.
  std::vector<Tensor> xbc;
  if (state == nullptr || o.conv_size == 1) {
    xbc = convolve(parts, cu_seqlens);
  } else {
    const Tensor xBC = concat({parts.x, parts.B, parts.C}, 2);
    Tensor y;
    if (T == 1) {
      y = conv1d_->step(xBC, state->conv_state);
    } else {
      y = short_conv(xBC, conv1d_->weight(), state->conv_state, {}, conv1d_->bias());
      state->conv_state = short_conv_final_state(xBC, o.conv_size, state->conv_state);
    }
    xbc = split(y, {inner_dim_, G * N, G * N}, 2);
  }
  const Tensor& z = parts.z;
  const Tensor xh = xbc[0].reshape({B, T, H, P});
  // B and C with G heads: the ops read grouped q/k heads (v head h reads group h / (H / G)).
  const Tensor k = xbc[1].reshape({B, T, G, N}), q = xbc[2].reshape({B, T, G, N});
  const Tensor dt = time_step(parts.dt);    // [B, T, H]
  const Tensor g = -(exp(A_log_) * dt);      // log-decay A dt <= 0
  const Tensor v = xh * dt.reshape({B, T, H, 1});

  // SSD as linear attention: q = C, k = B, v = dt x, scale 1.
  const float scale = 1.0f;
  Tensor ssd;
  if (state != nullptr && T == 1) {
    auto token = [](const Tensor& t) {
      Shape shape = t.shape();
      shape.erase(shape.begin() + 1);
      return t.reshape(shape);
    };
    ssd = recurrent_step_simple_gla(token(q), token(k), token(v), token(g), scale, state->ssm_state)
              .reshape({B, 1, H, P});
  } else {
    const Tensor h0 = state != nullptr ? state->ssm_state : Tensor();
    const bool keep_state = state != nullptr;
    LinearAttentionOutput r =
        state == nullptr || T > o.chunk_size
            ? chunk_simple_gla(q, k, v, g, scale, h0, keep_state, static_cast<int>(o.chunk_size), cu_seqlens)
            : fused_recurrent_simple_gla(q, k, v, g, scale, h0, keep_state, cu_seqlens);
    if (state != nullptr) state->ssm_state = r.final_state;
    ssd = r.o;
  }
  const Tensor y = ssd + xh * D_.reshape({H, 1});  // the D skip
  return out_proj_->forward(gated_norm(y.reshape({B, T, inner_dim_}), z));
}

Tensor Mamba2::forward(const Tensor& x, const Tensor& cu_seqlens) const {
  const char* op = "mamba2::forward";
  LAT_CHECK(x.dim() == 3 && x.size(2) == config_.d_model,
            op << ": x: expected shape [B, T, " << config_.d_model << "], got " << shape_str(x.shape()));
  if (!cu_seqlens.defined()) return run(x, nullptr, Tensor());
  // The ops take packed sequences as one row (B == 1).
  const int64_t B = x.size(0), T = x.size(1), D = config_.d_model;
  const Tensor cu = cu_seqlens_with_row_starts(op, cu_seqlens, B, T);
  return run(x.reshape({1, B * T, D}), nullptr, cu).reshape({B, T, D});
}

std::unique_ptr<MixerState> Mamba2::make_state(int64_t batch) const {
  LAT_CHECK(batch > 0, "mamba2::make_state: batch: expected a positive size, got " << batch);
  auto state = std::make_unique<Mamba2State>();
  state->batch = batch;
  const Device device = in_proj_->weight().device();
  state->ssm_state = Tensor::zeros({batch, heads_, options().d_state, options().head_dim}, DType::f32, device);
  if (options().conv_size > 1) state->conv_state = conv1d_->initial_state(batch).to(device);
  return state;
}

Tensor Mamba2::step(const Tensor& x, MixerState& state) const {
  auto* s = dynamic_cast<Mamba2State*>(&state);
  LAT_CHECK(s != nullptr, "mamba2::step: state: expected a state made by a mamba2 mixer's make_state, got another "
                          "kind of state");
  LAT_CHECK(x.dim() == 3 && x.size(0) == s->batch && x.size(1) >= 1 && x.size(2) == config_.d_model,
            "mamba2::step: x: expected shape [" << s->batch << ", T >= 1, " << config_.d_model << "], got "
                                                << shape_str(x.shape()));
  NoGradGuard no_grad;
  return run(x, s, Tensor());
}

}  // namespace lat
