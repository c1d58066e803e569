// The sharded weights of a Hugging Face directory: model.safetensors.index.json, as
// transformers' save_pretrained writes it ({"metadata": {...}, "weight_map": {"<tensor>":
// "<shard file>", ...}}), and the safetensors shards beside it that weight_map names.
#pragma once
#include <string>

#include "train/files/hf_weights.h"

namespace lat {

/// The tensors of every shard the index file `index_path` names (shards in name order, each
/// in data-section order), under the names the shards give them. The index and the shards
/// must agree exactly, so no tensor is dropped or taken from the wrong file. Throws
/// lat::Error "load_model_weights: '<index>': ..." naming the tensor and the shard(s): the
/// index not an object with an object 'weight_map'; a tensor weight_map lists twice; a shard
/// name that is not a plain file name beside the index (not a string, empty, '.', '..', or
/// holding '/', '\' or a control character); a shard that does not exist; a tensor in two
/// shards; a tensor in a shard that weight_map does not list or lists in another shard; a
/// tensor weight_map lists that its shard does not hold. A bad shard file is what
/// load_safetensors throws for it, a NaN or inf weight what check_finite_weights throws
/// (naming the shard).
NamedTensors load_hf_shards(const std::string& index_path);

}  // namespace lat
