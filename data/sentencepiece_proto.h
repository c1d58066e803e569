// The fields of a SentencePiece .model (a serialized sentencepiece_model.proto ModelProto) that
// other formats need to describe the same tokenizer: llama.cpp's GGUF vocabulary and the
// tokenizer class transformers should run. libsentencepiece runs the model but does not expose
// its proto without protobuf's headers, so these few fields are read from the wire format.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lat {

/// sentencepiece_model.proto's TrainerSpec.ModelType.
enum class SentencePieceModelType : int64_t { unigram = 1, bpe = 2, word = 3, character = 4 };

/// What a ModelProto says, with the proto's defaults for absent fields.
struct SentencePieceProto {
  struct Piece {
    std::string piece;
    float score = 0.0f;
    int32_t type = 1;  // ModelProto.SentencePiece.Type: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6
  };
  std::vector<Piece> pieces;                                            // field 1, in id order
  SentencePieceModelType model_type = SentencePieceModelType::unigram;  // trainer_spec.model_type
  bool byte_fallback = false;                                           // trainer_spec.byte_fallback
  std::string normalizer_name;                                          // normalizer_spec.name
  bool precompiled_charsmap = false;  // normalizer_spec has one: the model normalizes text
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

/// The ModelProto in `bytes` (a .model that libsentencepiece accepted). Unknown fields are
/// skipped. Throws lat::Error "SentencePiece model: ..." for bytes that are not protobuf wire
/// format (a field or varint running past the end, an unknown wire type).
SentencePieceProto read_sentencepiece_proto(std::string_view bytes);

/// Whether transformers' LlamaTokenizer, configured as sentencepiece_llama_tokenizer_config()
/// says, gives libsentencepiece's ids and text for this model: a bpe model with byte fallback
/// that neither normalizes text nor adds a dummy prefix nor removes whitespace (what `lat
/// tokenizer train` writes). Other models need transformers' SentencePieceBackend.
bool llama_tokenizer_reproduces(const SentencePieceProto& proto);

}  // namespace lat
