// The tokenizer inside model files: a checkpoint's /tokenizer (type, and for char the
// vocabulary) and an export's tokenizer.json, each to and from a Tokenizer, so that ids keep
// the meaning they had in training wherever the model goes.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "train/files/checkpoint.h"

namespace lat {

/// The tokenizer the model of `ckpt` was trained with: char (its vocabulary) or byte; nullopt
/// for any other type ("none": a model trained on token ids). Throws lat::Error for a char
/// vocabulary that is not valid UTF-8 or repeats a character.
std::optional<Tokenizer> checkpoint_tokenizer(const Checkpoint& ckpt);

/// Records `tokenizer` in `ckpt`: its type and, for char, its vocabulary; type "none" when
/// there is no tokenizer (bin/h5 token ids).
void set_checkpoint_tokenizer(Checkpoint& ckpt, const std::optional<Tokenizer>& tokenizer);

/// The tokenizer.json of an export: {"type": "char", "vocab": [characters in id order]} or
/// {"type": "byte", "vocab_size": 256}. `ckpt`'s tokenizer type must be char or byte.
nlohmann::ordered_json tokenizer_json(const Checkpoint& ckpt);

/// Reads the tokenizer.json at `path` (read_json_file: a regular file of bounded size and
/// nesting) into the tokenizer fields of `ckpt`. Throws lat::Error naming the file when it
/// cannot be read, is not JSON, has no string 'type', a type other than char or byte, or a
/// char vocabulary that is empty or has an entry (named by its index, its value cut to an
/// excerpt) that is not a string, not exactly one character, or repeats an earlier entry.
void read_tokenizer_json(const std::string& path, Checkpoint& ckpt);

/// The tokenizer in the file `path` (DESIGN.md, "Tokenizers"): a SentencePiece `.model`, or a
/// tokenizer.json: lat's own form ({"type": ...}), a Hugging Face char or byte form
/// (hf_tokenizer.h) or a Hugging Face byte-level BPE. A directory stands for its
/// tokenizer.json, else its tokenizer.model. `who` starts every error message. Throws
/// lat::Error naming the file when it cannot be read or parsed, or describes a tokenizer lat
/// does not read (the first feature it cannot honour); nullopt for lat's form of a model
/// trained on token ids (type none).
std::optional<Tokenizer> read_tokenizer_file(const std::string& path, const std::string& who);

}  // namespace lat
