// lat's parameter names and layouts <-> a Hugging Face family's state dict (transformers): the
// generic part. Each family lists its tensors (qwen35_tensor_layout in hf_qwen35.h,
// granite_tensor_layout in hf_granite.h) as HfTensorSpecs; the copies both ways are here.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lat/tensor.h"
#include "train/config/config_types.h"

namespace lat {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// One lat tensor inside a transformers tensor: its rows along dim 0, in order.
struct HfTensorPart {
  std::string lat_name;
  std::vector<int64_t> shape;
};

/// How a tensor's values relate between the two layouts: `same`; or a norm weight that
/// transformers scales by 1 + w (`zero_centred_norm`) or by w (`plain_norm`), stored shifted
/// by 1 where lat's model.norm_zero_centered says otherwise.
enum class HfValues { same, zero_centred_norm, plain_norm };

/// One transformers tensor and the lat tensors it holds.
struct HfTensorSpec {
  std::string hf_name;
  std::vector<int64_t> shape;
  std::vector<HfTensorPart> parts;  // one, or several stacked along dim 0 (a gdn layer's q, k, v)
  HfValues values = HfValues::same;
};

/// A spec whose transformers tensor `hf_name` is the lat tensor `lat_name` of the same shape.
HfTensorSpec hf_renamed(const std::string& hf_name, const std::string& lat_name, std::vector<int64_t> shape,
                        HfValues values = HfValues::same);

/// A spec whose transformers tensor `hf_name` stacks `parts` along dim 0.
HfTensorSpec hf_stacked(const std::string& hf_name, std::vector<HfTensorPart> parts);

/// The four projections of an attention layer, the same in every family:
/// `<hf>self_attn.{q,k,v,o}_proj.weight` <-> `<lat>attn.{q,k,v,o}_proj.weight` for
/// model.attn's heads, q_proj of `q_rows` rows (Qwen3.5's gated output doubles them).
std::vector<HfTensorSpec> hf_attention_projections(const std::string& hf, const std::string& lat,
                                                   const ModelConfig& model, int64_t q_rows);

/// Every tensor of the transformers model of `model` (resolved, expressible by its family,
/// hf_family_of) with `vocab_size` tokens, in state-dict order; no lm_head.weight when tied.
std::vector<HfTensorSpec> hf_tensor_layout(const ModelConfig& model, int64_t vocab_size);

/// How transformers' file names each lat tensor of `model`'s layout, for messages: lat name ->
/// "'<name>'", or "'<name>' rows [a, b)" for one part of a stacked tensor (q, k, v of
/// in_proj_qkv; gate, up of input_linear).
std::map<std::string, std::string> hf_tensor_labels(const ModelConfig& model, int64_t vocab_size);

/// lat's tensors (f32, CPU; `model`'s names and shapes) under transformers' names and layouts,
/// norms shifted by 1 where the family's convention is not model.norm_zero_centered's. Throws lat::Error naming
/// `source` and the lat tensor that is missing or of another shape.
NamedTensors hf_tensors_from_lat(const ModelConfig& model, int64_t vocab_size, const NamedTensors& tensors,
                                 const std::string& source);

/// transformers' tensors (f32, CPU) under lat's names and layouts, for `model` (read from the
/// same directory's config.json, with the family's norm convention, so values are copied bit
/// for bit). An
/// lm_head.weight beside tied embeddings is dropped when it is an exact copy of
/// model.embed_tokens.weight; mtp.* and model.visual.* tensors are skipped, as transformers
/// skips them; a kimi_linear file's tensors are read under save_pretrained's names
/// (kimi_saved_names). Throws lat::Error naming `source` and the tensor (transformers' name) that is
/// missing, unexpected, of another shape, or a tied lm_head.weight that is not a copy.
NamedTensors lat_tensors_from_hf(const ModelConfig& model, int64_t vocab_size, const NamedTensors& tensors,
                                 const std::string& source);

}  // namespace lat
