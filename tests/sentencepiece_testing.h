// A SentencePiece model trained inside a test (libsentencepiece_train), and a text to train it
// on: lines of English, accents, CJK, emoji and digits.
#pragma once
#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <string>

namespace lat::testing {

/// `lines` lines cycling through a few sentences in several scripts, each numbered.
inline std::string multilingual_lines(int lines) {
  const char* sentences[] = {
      "First Citizen: Before we proceed any further, hear me speak.",
      "Caf\xC3\xA9 cr\xC3\xA8me br\xC3\xBBl\xC3\xA9""e, na\xC3\xAF""ve fa\xC3\xA7""ade.",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE6\x96\x87\xE7\xAB\xA0\xE3\x81\xA7\xE3\x81\x99\xE3\x80\x82",
      "Emoji \xF0\x9F\x98\x80 and \xF0\x9F\x8E\x89 between words.",
      "  runs   of    spaces\tand tabs",
      "All: Speak, speak. You are all resolved rather to die than to famish?",
  };
  std::string text;
  for (int i = 0; i < lines; ++i) text += std::string(sentences[i % 6]) + " " + std::to_string(i * 7919 % 1000) + "\n";
  return text;
}

/// Trains a byte-fallback BPE SentencePiece model of `vocab_size` pieces on the file `corpus`,
/// writing `<prefix>.model`; returns that path. The trainer reads the corpus line by line, so
/// no piece holds a newline.
inline std::string train_sentencepiece(const std::string& corpus, const std::string& prefix, int vocab_size) {
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + corpus + " --model_prefix=" + prefix + " --vocab_size=" + std::to_string(vocab_size) +
      " --model_type=bpe --byte_fallback=true --character_coverage=1.0 --normalization_rule_name=identity"
      " --add_dummy_prefix=false --remove_extra_whitespaces=false --num_threads=1 --minloglevel=2");
  EXPECT_TRUE(status.ok()) << status.ToString();
  return prefix + ".model";
}

}  // namespace lat::testing
