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

/// tokenizer_config.json beside a subword tokenizer's own file, so that AutoTokenizer gives
/// lat's ids: for bpe (tokenizer.json) PreTrainedTokenizerFast with no BOS/EOS added, no
/// clean-up of spaces, and the tokens the file's added_tokens mark special named in
/// extra_special_tokens; for sentencepiece (tokenizer.model)
/// sentencepiece_llama_tokenizer_config() where LlamaTokenizer reproduces the model
/// (llama_tokenizer_reproduces: what `lat tokenizer train` writes), else SentencePieceBackend,
/// which runs libsentencepiece itself (a converted fast tokenizer rewrites the model's
/// normalizer) but decodes byte-fallback pieces as their names ("<0x0A>"), with no special
/// tokens named (transformers would split "<s>" out of the text, sentencepiece does not).
/// Throws lat::Error for a .model that is not protobuf wire format.
nlohmann::ordered_json hf_subword_tokenizer_config_json(const SubwordModel& model);

/// tokenizer_config.json for a SentencePiece bpe model llama_tokenizer_reproduces:
/// LlamaTokenizer runs it exactly as sentencepiece does once told to add nothing (no BOS/EOS,
/// no prefix "▁", not the legacy handling) and to read "<s>" in a text as characters, as
/// sentencepiece does; it decodes byte-fallback pieces to their bytes.
nlohmann::ordered_json sentencepiece_llama_tokenizer_config();

/// The lat tokenizer a tokenizer.json of one of the two forms above describes; nullopt for any
/// other tokenizer, with the first difference in `why_not` (e.g. "model.merges is not empty").
std::optional<Tokenizer> tokenizer_from_hf_json(const nlohmann::json& tokenizer_json, std::string& why_not);

}  // namespace lat
