// A lat tokenizer as llama.cpp's tokenizer.ggml.* metadata, chosen so that llama.cpp's own
// tokenizer gives lat's ids for every text lat encodes and decodes them to the same text:
//
//   char   model "llama" (llama.cpp's SentencePiece tokenizer): one token per character in
//          lat's id order, all NORMAL with score 0, ' ' spelled U+2581 (llama.cpp replaces each
//          space with it before tokenizing and back when decoding), add_space_prefix false. Whole
//          characters are the only tokens, so no two merge.
//   byte   model "gpt2", pre "qwen2", no merges: token i is byte i in GPT-2's byte-to-unicode
//          alphabet, which llama.cpp's byte-level tokenizer maps every byte of a text to.
//   bpe    (a byte-level BPE tokenizer.json) model "gpt2": its tokens in id order (ids the file
//          leaves out become "[PAD<id>]", UNUSED), merges in rank order, NORMAL / CONTROL (special
//          added tokens) / USER_DEFINED (other added tokens), pre by the pre-tokenizer pattern
//          (gpt-2, llama-bpe, qwen2, qwen35).
//   sentencepiece (a .model of model_type bpe or char, identity normalization) model "llama":
//          its pieces, scores and piece types (llama.cpp's token types), add_space_prefix and
//          remove_extra_whitespaces as the model's normalizer sets them, its <unk> as unknown
//          and its "</s>" as BOS/EOS/padding when it has one.
// lat's models end no text with a special token, while llama.cpp stops generating at its EOS
// and defaults it to a real token (11 for gpt2, 2 for llama). So one CONTROL token
// "<|endoftext|>" is appended after lat's vocabulary (id = the model's vocab size; a BPE
// vocabulary's own "<|endoftext|>" instead, as llama.cpp needs distinct token texts, and a
// SentencePiece model's "</s>") and named BOS, EOS and padding; add_bos_token and add_eos_token are false. The export gives an appended
// token zero embedding and output rows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "train/files/gguf_writer.h"

namespace lat {

/// llama.cpp's token types (llama.h's llama_token_type).
enum class GgufTokenType : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

/// tokenizer.ggml.* of one tokenizer, before it is written.
struct GgufVocabulary {
  std::string model;                      // tokenizer.ggml.model: "llama" or "gpt2"
  std::string pre;                        // tokenizer.ggml.pre (gpt2 only)
  std::vector<std::string> tokens;        // in id order, the appended end-of-text token last
  std::vector<int32_t> token_types;       // GgufTokenType per token
  std::vector<float> scores;              // llama only
  std::vector<std::string> merges;        // gpt2 only: "left right" in rank order
  int64_t end_of_text_id = -1;            // BOS, EOS and padding
  int64_t unknown_id = -1;                // sentencepiece's <unk>; -1: none written
  bool add_space_prefix = false;          // llama only: SentencePiece's add_dummy_prefix
  bool remove_extra_whitespaces = false;  // llama only
};

/// The metadata for `tokenizer` in a model of `model_vocab_size` embedding rows (DESIGN.md
/// "Interop (llama.cpp, GGUF)"): ids the tokenizer lacks up to that size become "[PAD<id>]",
/// UNUSED. Throws ConfigError "export --format gguf: tokenizer <type>: ..." for what llama.cpp
/// cannot reproduce: more tokens than embedding rows, a char vocabulary holding U+2581
/// (llama.cpp's escaped space), a sentencepiece model that is unigram or word, normalizes text or
/// does not escape spaces, a tokenizer.json that is not a BPE or whose pre-tokenizer llama.cpp
/// lacks.
GgufVocabulary gguf_vocabulary(const Tokenizer& tokenizer, int64_t model_vocab_size);

/// Adds tokenizer.ggml.* for `vocab` to `writer`.
void add_gguf_vocabulary(GgufWriter& writer, const GgufVocabulary& vocab);

}  // namespace lat
