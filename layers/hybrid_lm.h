// HybridLM: the language model lat trains. Token embedding -> n_layers pre-norm
// blocks, each a token mixer of the kind its model.layers entry names (softmax attention or
// one of the linear-attention family) and a SwiGLU MLP, both with residuals -> final RMSNorm
// -> LM head. Parameter names follow flash-linear-attention's models (DESIGN.md,
// Checkpoint): embeddings.weight, layers.{i}.attn_norm.weight, layers.{i}.attn.<...>,
// layers.{i}.mlp_norm.weight, layers.{i}.mlp.{gate_proj,up_proj,down_proj}.weight,
// norm.weight, lm_head.weight (absent when the embeddings are tied).
//
// Letters: B batch, T tokens, D d_model.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/embedding.h"
#include "layers/linear.h"
#include "layers/linear_attention_layers.h"
#include "layers/mixer.h"
#include "layers/module.h"
#include "layers/rms_norm.h"
#include "layers/swiglu.h"

namespace lat {

/// Sizes and options of a HybridLM (DESIGN.md model.*).
struct HybridLMConfig {
  int64_t vocab_size = 0;           // > 0
  std::vector<std::string> layers;  // one mixer kind per layer (n_layers = layers.size())
  MixerConfig mixer;                // d_model, heads and the mixer options; init stds are set by HybridLM
  double mlp_ratio = 4.0;
  int64_t intermediate_size = 0;    // SwiGLU hidden width; 0 = swiglu_hidden_size(d_model, mlp_ratio)
  double norm_eps = 1e-6;           // attn_norm, mlp_norm, norm and the mixers' o_norm
  bool norm_zero_centered = false;  // attn_norm, mlp_norm, norm (and q_norm, k_norm) scale by 1 + weight
  bool tie_embeddings = false;      // logits use embeddings.weight; no lm_head
  double init_std = 0.02;           // GPT-2: every weight N(0, init_std^2) ...
                                    // ... but o_proj and mlp.down_proj: init_std / sqrt(2 n_layers)
};

/// One pre-norm block: h = x + mixer(attn_norm(x)), then h + mlp(mlp_norm(h)).
/// Children attn_norm, attn (the mixer), mlp_norm, mlp (SwiGLU of width mlp_hidden). The
/// norms take mixer.norm_eps and, with mixer.norm_zero_centered, scale by 1 + weight.
/// Each residual addition is fused with the norm that reads its sum (RMSNorm::forward_sum):
/// the block's second addition with the norm after it (the next block's attn_norm, or the
/// model's final norm), so a block takes its input with attn_norm already applied.
class HybridBlock : public Module {
 public:
  HybridBlock(const std::string& kind, const MixerConfig& mixer, int64_t mlp_hidden, double mlp_out_init_std,
              Generator& gen);

  /// in: the residual stream x [B, T, D] (sum) and attn_norm(x) (normed) -> the block's output
  /// h [B, T, D] (sum) and next_norm(h) (normed); recorded on the tape. cu_seqlens: packed
  /// sequences of x, passed to the mixer (Mixer::forward); the norms and the MLP act per token.
  AddRmsNorm forward(const AddRmsNorm& in, const RMSNorm& next_norm, const Tensor& cu_seqlens = {}) const;
  /// Generation form of forward: continues the sequences of `state` (made by mixer().make_state).
  AddRmsNorm step(const AddRmsNorm& in, const RMSNorm& next_norm, MixerState& state) const;

  const Mixer& mixer() const { return *attn_; }
  /// The norm of the block's input.
  const RMSNorm& attn_norm() const { return *attn_norm_; }

 private:
  RMSNorm* attn_norm_;
  Mixer* attn_;
  RMSNorm* mlp_norm_;
  SwiGLU* mlp_;
};

/// Per-layer generation states of a HybridLM: a KV cache for each attention layer, the
/// recurrent (and short-convolution) state for each linear layer.
struct HybridLMState {
  int64_t batch = 0;
  int64_t tokens = 0;  // tokens fed so far
  std::vector<std::unique_ptr<MixerState>> layers;
};

/// The model. Children embeddings, layers (layers.0 ... layers.{n-1}), norm, [lm_head].
class HybridLM : public Module {
 public:
  /// Throws lat::Error for vocab_size < 1, no layers, an unknown mixer kind (listing the
  /// valid ones), a negative intermediate_size or sizes a mixer rejects.
  HybridLM(const HybridLMConfig& config, Generator& gen);

  /// ids: [B, T] i64 -> logits [B, T, vocab_size] f32; recorded on the tape.
  /// cu_seqlens (optional, i64 [N + 1]): documents packed into the batch, as offsets
  /// 0 = c_0 < ... < c_N = B*T over the B*T tokens read row after row; every row start b*T
  /// is a boundary too, listed or not (so offsets relative to one row's tokens need only
  /// that row's boundaries, shifted by b*T). Each sequence is then modelled as if alone:
  /// every mixer starts fresh at its first token (linear-attention states, short
  /// convolutions, softmax attention) and RoPE positions restart there; a padding tail
  /// given as a sequence of its own leaves the tokens before it unchanged.
  /// Throws lat::Error on a wrong shape or dtype, an id outside [0, vocab_size), or invalid
  /// cu_seqlens (naming it, expected versus found).
  Tensor forward(const Tensor& ids, const Tensor& cu_seqlens = {}) const;

  /// Empty generation states (no tokens seen) for `batch` sequences.
  HybridLMState make_states(int64_t batch) const;
  /// Continues the sequences of `state` by ids [B, T] (T >= 1: a prompt, then one token at
  /// a time) and returns their logits [B, T, vocab_size]. Feeding a sequence in pieces gives
  /// the logits of forward() on the whole sequence. Not recorded on the tape. Throws
  /// lat::Error when the batch size differs from the state's.
  Tensor step(const Tensor& ids, HybridLMState& state) const;

  const HybridLMConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  int64_t n_layers() const { return static_cast<int64_t>(blocks_.size()); }
  const HybridBlock& block(int64_t i) const { return *blocks_.at(static_cast<size_t>(i)); }

 private:
  void check_ids(const Tensor& ids, const char* where) const;
  /// The norm after block i: the next block's attn_norm, the final norm after the last.
  const RMSNorm& norm_after(size_t i) const;
  /// Runs the blocks on the embeddings h [B, T, D] (`block_step` runs block i on the stream)
  /// and returns the logits [B, T, vocab]: lm_head, or the tied embeddings, of the final
  /// norm of the last block's output.
  template <class BlockStep>
  Tensor run_blocks(const Tensor& h, const BlockStep& block_step) const;

  HybridLMConfig config_;
  Embedding* embeddings_;
  std::vector<HybridBlock*> blocks_;
  RMSNorm* norm_;
  Linear* lm_head_ = nullptr;
};

}  // namespace lat
