// lat's char and byte tokenizers as Hugging Face tokenizers' tokenizer.json (the file
// `AutoTokenizer.from_pretrained(DIR)` loads with tokenizer_config.json beside it), and back.
//
//   char: a BPE model whose vocab is the characters in id order, no merges (so every character
//         is its own token), no normalizer, no pre-tokenizer, a Fuse decoder.
//   byte: a ByteLevel pre-tokenizer (no prefix space, no regex split) and a BPE model whose
//         vocab maps GPT-2's byte-level character of byte b to id b, no merges; a ByteLevel
//         decoder.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"

namespace lat {

/// The tokenizer.json of `tokenizer` (char or byte).
nlohmann::ordered_json hf_tokenizer_json(const Tokenizer& tokenizer);

/// tokenizer_config.json: tokenizer_class PreTrainedTokenizerFast, no special tokens, no
/// clean-up of spaces on decoding (ids and text stay one to one).
nlohmann::ordered_json hf_tokenizer_config_json();

/// The lat tokenizer a tokenizer.json of one of the two forms above describes; nullopt for any
/// other tokenizer, with the first difference in `why_not` (e.g. "model.merges is not empty").
std::optional<Tokenizer> tokenizer_from_hf_json(const nlohmann::json& tokenizer_json, std::string& why_not);

}  // namespace lat
