// The tokenizer a `--tokenizer` argument names (DESIGN.md, "Tokenizers"): `char` (built from a
// text exactly as the trainer builds it), `byte`, a tokenizer.json (lat's own form or a
// Hugging Face char/byte form, hf_tokenizer.h), or a model file that carries its tokenizer: a
// checkpoint (.h5), a run directory, an export directory or its model.safetensors.
#pragma once
#include <string>

#include "data/tokenizer.h"

namespace lat {

/// The tokenizer `spec` names; `data_path` is the text `char` builds its vocabulary from ("" for
/// none; only `char` takes one). Reads no model weights where the tokenizer sits in its own
/// file (tokenizer.json); of a checkpoint only the root attributes, /config and /tokenizer are read.
/// Throws ConfigError (usage: exit 2) for `char` without `data_path`, `data_path` with another
/// spec, a path that does not exist, or a directory holding no tokenizer.json, tokenizer.model,
/// checkpoint or run. Throws lat::Error naming the file when it cannot be read or parsed, is a
/// GGUF file or no file lat reads tokenizers from (neither JSON nor .model, .h5, .safetensors),
/// holds a tokenizer lat does not read (the first difference from the char/byte forms), or
/// carries no tokenizer (a model trained on token ids).
Tokenizer load_tokenizer_source(const std::string& spec, const std::string& data_path);

/// The bytes of the text file `path` that a `lat tokenizer` argument names; `what` says which
/// ("the text file", "the --data file"). Throws lat::Error "lat tokenizer: cannot open <what>
/// '<path>': <reason>" (or "<what> '<path>' is a directory, expected a regular file") when it
/// is missing, unreadable or no regular file.
std::string read_tokenizer_text_file(const std::string& path, const std::string& what);

}  // namespace lat
