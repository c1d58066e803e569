// SentencePiece through libsentencepiece (sentencepiece_tokenizer.h).
#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <exception>

#include "data/utf8.h"
#include "lat/error.h"

namespace lat {
namespace {

class SentencePieceModel final : public SubwordModel {
 public:
  SentencePieceModel(std::string contents, const std::string& origin) : contents_(std::move(contents)) {
    LAT_CHECK(contents_.size() <= kMaxSentencePieceModelBytes,
              "'" << origin << "': a SentencePiece model of " << contents_.size() << " bytes, more than the "
                  << kMaxSentencePieceModelBytes << " lat reads");
    sentencepiece::util::Status status;
    try {
      status = processor_.LoadFromSerializedProto(contents_);
    } catch (const std::exception& e) {
      // Its trie builder (darts-clone) throws on some damaged models, e.g. an empty piece.
      LAT_CHECK(false, "'" << origin << "': not a SentencePiece model sentencepiece loads: " << e.what());
    }
    LAT_CHECK(status.ok(), "'" << origin << "': not a SentencePiece model sentencepiece loads: " << status.ToString());
    vocab_size_ = processor_.GetPieceSize();
    LAT_CHECK(vocab_size_ > 0, "'" << origin << "': a SentencePiece model without pieces");
  }

  const std::string& type() const override { return type_; }
  int64_t vocab_size() const override { return vocab_size_; }
  bool has_token(int64_t id) const override { return id >= 0 && id < vocab_size_; }
  // A piece may hold a newline in a model trained on text with newlines inside its sentences.
  bool splits_after_newline() const override { return false; }
  const std::string& file_contents() const override { return contents_; }
  const char* file_name() const override { return "tokenizer.model"; }

  std::vector<int64_t> encode(std::string_view text) const override {
    check_utf8(text, "SentencePiece encode");
    std::vector<int> ids;
    const sentencepiece::util::Status status = processor_.Encode(text, &ids);
    LAT_CHECK(status.ok(), "SentencePiece encode: " << status.ToString());
    return std::vector<int64_t>(ids.begin(), ids.end());
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<int> narrow;
    narrow.reserve(ids.size());
    for (int64_t id : ids) {
      LAT_CHECK(has_token(id), "SentencePiece decode: id " << id << " is outside [0, " << vocab_size_
                                                            << ") of the sentencepiece tokenizer");
      narrow.push_back(static_cast<int>(id));
    }
    std::string text;
    const sentencepiece::util::Status status = processor_.Decode(narrow, &text);
    LAT_CHECK(status.ok(), "SentencePiece decode: " << status.ToString());
    return text;
  }

 private:
  std::string type_ = "sentencepiece";
  std::string contents_;
  sentencepiece::SentencePieceProcessor processor_;
  int64_t vocab_size_ = 0;
};

}  // namespace

std::shared_ptr<const SubwordModel> sentencepiece_model(const std::string& contents, const std::string& origin) {
  return std::make_shared<SentencePieceModel>(contents, origin);
}

}  // namespace lat
