// The llama.cpp architectures `lat export --format gguf` writes, and what their writers share.
// gguf_export.cpp picks one by model.layers (gguf_architecture_for); each architecture's
// mapping of lat's tensors lives in its own file: gguf_qwen35.cpp (gdn and attn layers),
// gguf_granite.cpp (mamba2 and attn layers), gguf_kimi.cpp (kda and mla layers).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/config/config_types.h"
#include "train/files/gguf_writer.h"
#include "train/files/model_reader.h"

namespace lat {

/// The context length the files declare: the Hugging Face export's max_position_embeddings.
inline constexpr uint32_t kGgufContextLength = 32768;

/// One llama.cpp architecture: its name (general.architecture), the check of what it cannot
/// express (throws ConfigError "export --format gguf: ..." naming the layer and key), its
/// metadata (keys "<name>.*", added after general.*) and its tensors, written after the
/// vocabulary. `n_tokens` >= vocab_size: embedding rows the vocabulary holds (the appended
/// tokens' rows are zeros).
struct GgufArchitecture {
  const char* name;
  void (*check)(const ModelConfig& model);
  void (*add_metadata)(GgufWriter& out, const ModelConfig& model);
  void (*add_tensors)(GgufWriter& out, const ModelWeights& w, int64_t vocab_size, int64_t n_tokens, GgmlType dtype);
};

/// qwen35 (gguf_qwen35.cpp).
const GgufArchitecture& gguf_qwen35();
/// granitehybrid (gguf_granite.cpp).
const GgufArchitecture& gguf_granite_hybrid();
/// kimi-linear (gguf_kimi.cpp).
const GgufArchitecture& gguf_kimi_linear();

/// kimi-linear for a model with a kda or mla layer, granitehybrid for one with a mamba2 layer,
/// qwen35 otherwise (each check names what its architecture cannot express).
const GgufArchitecture& gguf_architecture_for(const ModelConfig& model);

/// The first "<arch>.*" keys of every architecture: context_length, embedding_length,
/// block_count, feed_forward_length (the SwiGLU width) and attention.head_count, in that order.
void add_gguf_model_shape(GgufWriter& out, const std::string& arch, const ModelConfig& model);

/// How a tensor is stored: a weight matrix in the export's dtype (f16 for q8_0 rows that are
/// not a multiple of kQ8BlockSize), or f32 whatever the dtype (1-D tensors, norms and
/// convolutions, as llama.cpp's converter keeps them).
enum class GgufStorage { weight, f32 };

/// Adds `data` (row-major `shape`) as the tensor `name`, stored as `storage` says.
void add_gguf_tensor(GgufWriter& out, const std::string& name, const std::vector<int64_t>& shape,
                     const std::vector<float>& data, GgmlType dtype, GgufStorage storage);

/// An embedding or LM head [rows, cols] grown to n_tokens rows (>= rows) by rows of zeros,
/// for the tokens the vocabulary appends.
std::vector<float> with_token_rows(std::vector<float> data, int64_t cols, int64_t n_tokens);

/// The scale llama.cpp's RMSNorm weight must hold for lat's norm weight `w`: w, or 1 + w where
/// model.norm_zero_centered (lat computes 1 + w in f32 too, so the product is the same).
std::vector<float> gguf_norm_scale(const Tensor& w, const ModelConfig& model);

/// The tensor `name` of w's checkpoint; throws lat::Error naming it and the file when absent.
const Tensor& lat_tensor(const ModelWeights& w, const std::string& name);

/// Copies a checkpoint's tensors into the file under llama.cpp's names, one call per tensor:
/// the writers of architectures whose tensors are lat's one for one (granitehybrid,
/// kimi-linear). Each method throws lat::Error naming a lat tensor the checkpoint lacks.
class GgufTensorCopier {
 public:
  /// n_tokens: the rows of the token embedding and LM head (with_token_rows).
  GgufTensorCopier(GgufWriter& out, const ModelWeights& w, GgmlType dtype, int64_t n_tokens)
      : out_(out), w_(w), dtype_(dtype), n_tokens_(n_tokens) {}
  /// lat's `lat_name` as `gguf_name`, a weight matrix stored in the export's dtype.
  void weight(const std::string& gguf_name, const std::string& lat_name) const;
  /// The same, stored f32 whatever the dtype (convolutions, gated-norm weights).
  void f32(const std::string& gguf_name, const std::string& lat_name) const;
  /// An RMSNorm weight as llama.cpp's scale (gguf_norm_scale), f32.
  void norm(const std::string& gguf_name, const std::string& lat_name) const;
  /// An embedding or LM head [rows, d_model] grown to n_tokens rows, in the export's dtype.
  void token_rows(const std::string& gguf_name, const std::string& lat_name) const;

 private:
  GgufWriter& out_;
  const ModelWeights& w_;
  GgmlType dtype_;
  int64_t n_tokens_;
};

}  // namespace lat
