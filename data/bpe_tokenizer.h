// Byte-level BPE (Sennrich et al. 2016; GPT-2's byte-level form, Radford et al. 2019) read from
// a Hugging Face tokenizer.json and run as Hugging Face tokenizers runs it with
// add_special_tokens=False, so that lat's ids are tokenizers' ids:
//
//   1. added_tokens are cut out of the text first, leftmost-longest (special or not; single_word,
//      lstrip, rstrip as tokenizers honours them); those with normalized=false are matched in
//      the raw text, the others in the normalized text. Each takes the id tokenizers gives it
//      (a model.vocab token's id, else the next after the vocabulary), whatever its 'id' says;
//   2. the rest is normalized and pre-tokenized into words (data/bpe_pretokenizer.h);
//   3. each word's bytes, in the byte-level alphabet (data/byte_level.h), start as one symbol
//      per byte (a byte without a token is dropped, as tokenizers does without unk_token) and
//      merge pairwise, lowest merge rank first (leftmost among equals), until no pair has a
//      merge; with model.ignore_merges a word that is itself a token is that token.
// Decoding maps every token's characters back to bytes (an added token whose characters are
// not all byte-level characters gives its own text) and reads the bytes as UTF-8 with U+FFFD
// for each ill-formed sequence, as tokenizers' ByteLevel decoder does. The post_processor is
// not applied: it only adds tokens when a caller asks tokenizers for special tokens.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "data/subword_model.h"

namespace lat {

/// The largest id a tokenizer.json may give a token: lat's largest model.vocab_size.
inline constexpr int64_t kMaxBpeTokenId = (int64_t{1} << 24) - 1;

/// The byte-level BPE tokenizer `json_text` (a tokenizer.json's text) describes; `origin` names
/// the file in errors. type() "bpe", file_name() "tokenizer.json", file_contents() `json_text`.
/// Reads model.type BPE with vocab, merges ("a b" strings or [a, b] pairs; rank = index),
/// ignore_merges, dropout null, unk_token null, byte_fallback false, continuing_subword_prefix
/// and end_of_word_suffix null or ""; normalizer and pre_tokenizer as bpe_pretokenizer.h;
/// decoder ByteLevel; post_processor null, ByteLevel, TemplateProcessing or a Sequence of
/// them; truncation and padding null. Throws lat::Error "'<origin>': <key>: <why>" (one line)
/// for anything else, e.g. "'t.json': model.byte_fallback: lat reads false, got true", for
/// invalid JSON or nesting deeper than 64, for a merge whose parts or result are not tokens,
/// for an id outside [0, kMaxBpeTokenId], for two tokens with one id and for an added token
/// given twice.
std::shared_ptr<const SubwordModel> bpe_model_from_json(const std::string& json_text, const std::string& origin);

/// bpe_model_from_json for a text its caller has parsed already (`root`, the value of
/// `json_text`), so that a large vocabulary is parsed once; the same checks and errors but
/// those of parsing.
std::shared_ptr<const SubwordModel> bpe_model_from_json(std::string json_text, const nlohmann::json& root,
                                                        const std::string& origin);

}  // namespace lat
