// HybridLM: blocks of (RMSNorm -> mixer -> residual, RMSNorm -> SwiGLU -> residual), each
// residual addition fused with the norm after it.
#include "layers/hybrid_lm.h"

#include <cmath>

#include "lat/ops.h"
#include "lat/tape.h"
#include "layers/cu_seqlens.h"

namespace lat {

namespace {

NormWeight norm_weight(bool zero_centered) { return zero_centered ? NormWeight::zero_centered : NormWeight::plain; }

}  // namespace

HybridBlock::HybridBlock(const std::string& kind, const MixerConfig& mixer, int64_t mlp_hidden, double mlp_out_init_std,
                         Generator& gen) {
  const NormWeight norm = norm_weight(mixer.norm_zero_centered);
  attn_norm_ = &register_module("attn_norm", std::make_unique<RMSNorm>(mixer.d_model, mixer.norm_eps, norm));
  attn_ = &register_module("attn", make_mixer(kind, mixer, gen));
  mlp_norm_ = &register_module("mlp_norm", std::make_unique<RMSNorm>(mixer.d_model, mixer.norm_eps, norm));
  mlp_ = &register_module("mlp",
                          std::make_unique<SwiGLU>(mixer.d_model, mlp_hidden, gen, mixer.init_std, mlp_out_init_std));
}

AddRmsNorm HybridBlock::forward(const AddRmsNorm& in, const RMSNorm& next_norm, const Tensor& cu_seqlens) const {
  const AddRmsNorm mixed = mlp_norm_->forward_sum(in.sum, attn_->forward(in.normed, cu_seqlens));
  return next_norm.forward_sum(mixed.sum, mlp_->forward(mixed.normed));
}

AddRmsNorm HybridBlock::step(const AddRmsNorm& in, const RMSNorm& next_norm, MixerState& state) const {
  const AddRmsNorm mixed = mlp_norm_->forward_sum(in.sum, attn_->step(in.normed, state));
  return next_norm.forward_sum(mixed.sum, mlp_->forward(mixed.normed));
}

HybridLM::HybridLM(const HybridLMConfig& config, Generator& gen) : config_(config) {
  HybridLMConfig& c = config_;
  LAT_CHECK(c.vocab_size >= 1, "HybridLM: vocab_size: expected >= 1, got " << c.vocab_size);
  LAT_CHECK(!c.layers.empty(), "HybridLM: layers: expected at least one mixer kind");
  // GPT-2 (Radford et al. 2019, sec. 2.3): residual-stream output projections are scaled by
  // 1/sqrt(N) for N residual additions, here 2 per block.
  const double out_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.layers.size()));
  c.mixer.norm_eps = c.norm_eps;
  c.mixer.norm_zero_centered = c.norm_zero_centered;
  c.mixer.init_std = c.init_std;
  c.mixer.out_init_std = out_std;
  const int64_t D = c.mixer.d_model;
  embeddings_ = &register_module("embeddings", std::make_unique<Embedding>(c.vocab_size, D, gen, c.init_std));
  const int64_t mlp_hidden = swiglu_hidden_size(D, c.mlp_ratio, c.intermediate_size);
  auto& list = register_module("layers", std::make_unique<ModuleList>());
  for (const std::string& kind : c.layers)
    blocks_.push_back(&list.append(std::make_unique<HybridBlock>(kind, c.mixer, mlp_hidden, out_std, gen)));
  norm_ = &register_module("norm", std::make_unique<RMSNorm>(D, c.norm_eps, norm_weight(c.norm_zero_centered)));
  if (!c.tie_embeddings)
    lm_head_ = &register_module("lm_head", std::make_unique<Linear>(D, c.vocab_size, gen, c.init_std));
}

void HybridLM::check_ids(const Tensor& ids, const char* where) const {
  LAT_CHECK(ids.defined() && ids.dim() == 2 && ids.dtype() == DType::i64,
            "HybridLM::" << where << ": ids: expected [B, T] i64, got "
                         << (ids.defined() ? shape_str(ids.shape()) + " " + dtype_name(ids.dtype())
                                           : std::string("an undefined tensor")));
}

const RMSNorm& HybridLM::norm_after(size_t i) const {
  return i + 1 < blocks_.size() ? blocks_[i + 1]->attn_norm() : *norm_;
}

template <class BlockStep>
Tensor HybridLM::run_blocks(const Tensor& h, const BlockStep& block_step) const {
  AddRmsNorm stream{h, blocks_[0]->attn_norm().forward(h)};
  for (size_t i = 0; i < blocks_.size(); ++i) stream = block_step(i, stream);
  const Tensor& y = stream.normed;  // norm_(last block's output)
  if (lm_head_ != nullptr) return lm_head_->forward(y);
  // Tied to the embeddings E [vocab, D]: logits = y E^T.
  const int64_t B = y.size(0), T = y.size(1), D = y.size(2);
  constexpr bool kTransposeY = false, kTransposeEmbeddings = true;
  return matmul(y.reshape({B * T, D}), embeddings_->weight(), kTransposeY, kTransposeEmbeddings)
      .reshape({B, T, config_.vocab_size});
}

Tensor HybridLM::forward(const Tensor& ids, const Tensor& cu_seqlens) const {
  check_ids(ids, "forward");
  // Merged with the row starts once here, so that errors name the model's argument.
  const Tensor cu = cu_seqlens.defined()
                        ? cu_seqlens_with_row_starts("HybridLM::forward", cu_seqlens, ids.size(0), ids.size(1))
                        : Tensor();
  return run_blocks(embeddings_->forward(ids),
                    [&](size_t i, const AddRmsNorm& in) { return blocks_[i]->forward(in, norm_after(i), cu); });
}

HybridLMState HybridLM::make_states(int64_t batch) const {
  LAT_CHECK(batch >= 1, "HybridLM::make_states: batch: expected >= 1, got " << batch);
  HybridLMState state;
  state.batch = batch;
  for (const HybridBlock* block : blocks_) state.layers.push_back(block->mixer().make_state(batch));
  return state;
}

Tensor HybridLM::step(const Tensor& ids, HybridLMState& state) const {
  check_ids(ids, "step");
  LAT_CHECK(ids.size(0) == state.batch && ids.size(1) >= 1 && state.layers.size() == blocks_.size(),
            "HybridLM::step: ids: expected [" << state.batch << ", T >= 1] for a state of " << state.layers.size()
                                              << " layers (model: " << blocks_.size() << "), got "
                                              << shape_str(ids.shape()));
  NoGradGuard no_grad;
  const Tensor logits = run_blocks(embeddings_->forward(ids), [&](size_t i, const AddRmsNorm& in) {
    return blocks_[i]->step(in, norm_after(i), *state.layers[i]);
  });
  state.tokens += ids.size(1);
  return logits;
}

}  // namespace lat
