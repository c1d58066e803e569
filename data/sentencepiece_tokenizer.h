// SentencePiece models (Kudo & Richardson 2018): a .model file (a serialized ModelProto) read
// and run by libsentencepiece, so that lat's ids are sentencepiece's by construction.
#pragma once
#include <memory>
#include <string>

#include "data/subword_model.h"

namespace lat {

/// The largest .model file lat reads (the biggest published SentencePiece models are a few MiB).
inline constexpr size_t kMaxSentencePieceModelBytes = size_t{64} << 20;

/// The SentencePiece model serialized in `contents` (a .model file's bytes); `origin` names the
/// file in errors. Throws lat::Error naming `origin` when `contents` is larger than
/// kMaxSentencePieceModelBytes or sentencepiece refuses it (its message appended).
std::shared_ptr<const SubwordModel> sentencepiece_model(const std::string& contents, const std::string& origin);

}  // namespace lat
