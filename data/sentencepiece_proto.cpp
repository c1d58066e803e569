// The wire-format reader behind read_sentencepiece_proto (sentencepiece_proto.h).
#include "data/sentencepiece_proto.h"

#include <cstring>

#include "lat/error.h"

namespace lat {
namespace {

/// Walks the fields of one protobuf message in wire format: varints, 32- and 64-bit values,
/// length-delimited bytes.
class ProtoFields {
 public:
  explicit ProtoFields(std::string_view bytes) : bytes_(bytes) {}

  struct Field {
    uint32_t number = 0, wire_type = 0;
    uint64_t value = 0;      // varint, fixed32 or fixed64 bits
    std::string_view bytes;  // length-delimited
  };

  /// The next field, or false at the end. Throws lat::Error for malformed bytes.
  bool next(Field& f) {
    if (pos_ >= bytes_.size()) return false;
    const uint64_t key = varint();
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire_type = static_cast<uint32_t>(key & 7);
    f.bytes = {};
    switch (f.wire_type) {
      case 0: f.value = varint(); break;
      case 1: f.value = fixed(8); break;
      case 5: f.value = fixed(4); break;
      case 2: {
        const uint64_t n = varint();
        LAT_CHECK(n <= bytes_.size() - pos_, "SentencePiece model: a field runs past the end");
        f.bytes = bytes_.substr(pos_, n);
        pos_ += n;
        break;
      }
      default: LAT_CHECK(false, "SentencePiece model: wire type " << f.wire_type << " unexpected");
    }
    return true;
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      LAT_CHECK(pos_ < bytes_.size(), "SentencePiece model: a varint runs past the end");
      const auto b = static_cast<uint8_t>(bytes_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    LAT_CHECK(false, "SentencePiece model: a varint longer than 10 bytes");
    return 0;
  }
  uint64_t fixed(size_t n) {
    LAT_CHECK(n <= bytes_.size() - pos_, "SentencePiece model: a value runs past the end");
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
    pos_ += n;
    return v;
  }

  std::string_view bytes_;
  size_t pos_ = 0;
};

}  // namespace

// Field numbers of sentencepiece_model.proto: ModelProto pieces = 1 {piece = 1, score = 2,
// type = 3}, trainer_spec = 2 {model_type = 3, byte_fallback = 35}, normalizer_spec = 3 {name
// = 1, precompiled_charsmap = 2, add_dummy_prefix = 3, remove_extra_whitespaces = 4,
// escape_whitespaces = 5}.
SentencePieceProto read_sentencepiece_proto(std::string_view bytes) {
  SentencePieceProto proto;
  ProtoFields top(bytes);
  ProtoFields::Field f;
  while (top.next(f)) {
    if (f.number == 1 && f.wire_type == 2) {
      SentencePieceProto::Piece piece;
      ProtoFields fields(f.bytes);
      ProtoFields::Field p;
      while (fields.next(p)) {
        if (p.number == 1 && p.wire_type == 2) piece.piece = std::string(p.bytes);
        if (p.number == 2 && p.wire_type == 5) {
          const auto bits = static_cast<uint32_t>(p.value);
          std::memcpy(&piece.score, &bits, sizeof(piece.score));
        }
        if (p.number == 3 && p.wire_type == 0) piece.type = static_cast<int32_t>(p.value);
      }
      proto.pieces.push_back(std::move(piece));
    } else if (f.number == 2 && f.wire_type == 2) {
      ProtoFields fields(f.bytes);
      ProtoFields::Field t;
      while (fields.next(t)) {
        if (t.number == 3 && t.wire_type == 0) proto.model_type = static_cast<SentencePieceModelType>(t.value);
        if (t.number == 35 && t.wire_type == 0) proto.byte_fallback = t.value != 0;
      }
    } else if (f.number == 3 && f.wire_type == 2) {
      ProtoFields fields(f.bytes);
      ProtoFields::Field n;
      while (fields.next(n)) {
        if (n.number == 1 && n.wire_type == 2) proto.normalizer_name = std::string(n.bytes);
        if (n.number == 2 && n.wire_type == 2) proto.precompiled_charsmap = !n.bytes.empty();
        if (n.number == 3 && n.wire_type == 0) proto.add_dummy_prefix = n.value != 0;
        if (n.number == 4 && n.wire_type == 0) proto.remove_extra_whitespaces = n.value != 0;
        if (n.number == 5 && n.wire_type == 0) proto.escape_whitespaces = n.value != 0;
      }
    }
  }
  return proto;
}

bool llama_tokenizer_reproduces(const SentencePieceProto& proto) {
  return proto.model_type == SentencePieceModelType::bpe && proto.byte_fallback && !proto.precompiled_charsmap &&
         !proto.add_dummy_prefix && !proto.remove_extra_whitespaces && proto.escape_whitespaces;
}

}  // namespace lat
