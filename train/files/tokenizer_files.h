// The tokenizer inside model files: a checkpoint's /tokenizer (type; for char the vocabulary,
// for bpe and sentencepiece the tokenizer file's bytes) and an export's tokenizer.json or
// tokenizer.model, each to and from a Tokenizer, so that ids keep the meaning they had in
// training wherever the model goes.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "train/files/checkpoint.h"

namespace lat {

/// Whether `type` is a tokenizer read from a file ("bpe" or "sentencepiece"), whose bytes a
/// checkpoint carries in /tokenizer/file.
bool is_subword_type(const std::string& type);

/// The largest tokenizer file of subword `type` lat reads: kMaxJsonFileBytes for a bpe
/// tokenizer.json, kMaxSentencePieceModelBytes for a .model.
uint64_t max_tokenizer_file_bytes(const std::string& type);

/// The subword tokenizer of `type` ("bpe" or "sentencepiece") whose file holds `contents`;
/// `origin` names the file in errors. Throws lat::Error naming `origin` when the file's own
/// reader refuses it.
Tokenizer subword_tokenizer(const std::string& type, const std::string& contents, const std::string& origin);

/// The tokenizer the model of `ckpt` was trained with: char (its vocabulary), byte, or bpe or
/// sentencepiece (rebuilt from its file); nullopt for type "none" (a model trained on token
/// ids). Throws lat::Error for a char vocabulary that is not valid UTF-8 or repeats a
/// character, or a tokenizer file its reader refuses.
std::optional<Tokenizer> checkpoint_tokenizer(const Checkpoint& ckpt);

/// Records `tokenizer` in `ckpt`: its type and, for char, its vocabulary, for bpe and
/// sentencepiece its file's bytes; type "none" when there is no tokenizer (bin/h5 token ids).
void set_checkpoint_tokenizer(Checkpoint& ckpt, const std::optional<Tokenizer>& tokenizer);

/// The tokenizer.json of an export for a char or byte tokenizer: {"type": "char", "vocab":
/// [characters in id order]} or {"type": "byte", "vocab_size": 256}. `ckpt`'s tokenizer type
/// must be char or byte (a subword tokenizer's export file is its own file, byte for byte).
nlohmann::ordered_json tokenizer_json(const Checkpoint& ckpt);

/// Writes the file `model` was read from, byte for byte, into the directory `dir` under its
/// file_name() (atomically), and removes a tokenizer file of the other name a stale export may
/// have left there (AutoTokenizer and lat would read tokenizer.json first). Returns the path
/// written; `who` starts error messages.
std::string write_subword_tokenizer_file(const SubwordModel& model, const std::string& dir, const std::string& who);

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
