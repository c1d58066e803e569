// The token-mixer interface shared by softmax attention and the linear-attention layers, so a
// model can stack any pattern of them ("gdn,gdn,gdn,attn") and generate with each layer's
// own state.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"

namespace lat {

/// Per-layer generation state of a mixer: a KV cache for attention; recurrent states plus
/// short-convolution states for the linear mixers. Created by Mixer::make_state.
struct MixerState {
  virtual ~MixerState() = default;
};

/// A token mixer: [B, T, d_model] -> [B, T, d_model], causal.
class Mixer : public Module {
 public:
  /// Training / full-sequence form; recorded on the tape. With cu_seqlens, x holds packed
  /// sequences: i64 [N + 1] offsets 0 = c_0 < ... < c_N = B*T over the B*T tokens of x
  /// read row after row (layers/cu_seqlens.h); every row start b*T is a boundary as well,
  /// listed or not. Then no token mixes with a token of another sequence (each sequence is
  /// mixed as if alone). Throws lat::Error for invalid offsets, naming cu_seqlens.
  virtual Tensor forward(const Tensor& x, const Tensor& cu_seqlens = {}) const = 0;
  /// An empty state (no tokens seen) for `batch` sequences.
  virtual std::unique_ptr<MixerState> make_state(int64_t batch) const = 0;
  /// Generation form: continues the sequences held in `state` by the T >= 1 tokens of
  /// x [B, T, d_model] (a prompt, then T = 1 per decoded token), updates the state and
  /// returns the outputs for these tokens. Feeding a sequence in pieces reproduces
  /// forward() on the whole sequence. Not recorded on the tape. Throws lat::Error when
  /// `state` was not made by this kind of mixer or its batch size differs from x's.
  virtual Tensor step(const Tensor& x, MixerState& state) const = 0;
};

/// The mixer kinds of model.layers, in the documented order (DESIGN.md): attn, linear_attn,
/// simple_gla, retention, delta_net, gdn, mamba2, mla. make_mixer builds each; the config accepts these.
const std::vector<std::string>& mixer_kinds();

}  // namespace lat
