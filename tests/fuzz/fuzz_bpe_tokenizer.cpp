// Fuzzes the byte-level BPE reader (data/bpe_tokenizer.h): the input is a tokenizer.json's
// text for bpe_model_from_json; a model that comes back encodes a short text (ASCII, an added
// token's look, digits, newline runs, accents, CJK, emoji), decodes those ids, and decodes
// each of its first ids that has a token. A lat::Error is the expected answer to a bad file;
// anything else escaping, a crash, a sanitizer report, a hang or a huge allocation is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/bpe_tokenizer.h"
#include "lat/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kText = "the cat <|endoftext|> in 2024, 12345\n\n  \tcafé e\xCC\x81 日本語 🚀 I'm";
  try {
    const auto model = lat::bpe_model_from_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
    model->decode(model->encode(kText));
    for (int64_t id = 0; id < std::min<int64_t>(model->vocab_size(), 1024); ++id)
      if (model->has_token(id)) model->decode({id});
  } catch (const lat::Error&) {
  }
  return 0;
}
