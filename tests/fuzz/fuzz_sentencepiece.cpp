// Fuzzes the SentencePiece reader: the input is taken as a .model file's bytes by
// sentencepiece_model (as data.tokenizer and --tokenizer read one); a model that loads must
// encode a multilingual text to ids inside its vocabulary, and decode those ids and each of its
// first ids without failing; its proto fields (read_sentencepiece_proto, as the GGUF and Hugging
// Face exports read them) must read or be refused. A lat::Error is the expected answer to a bad file; anything else
// escaping, a crash, a sanitizer report, a hang or a huge allocation is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "data/sentencepiece_proto.h"
#include "data/sentencepiece_tokenizer.h"
#include "lat/error.h"

namespace {

// Accents, CJK, an emoji, spaces, a tab, a newline, digits and "<s>" written as text.
const std::string kText = "Café 中文 🙂  x\t1 <s>\n";

/// The most ids decoded one at a time (a model may hold millions).
constexpr int64_t kMaxIdsDecoded = 512;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const lat::SubwordModel> model;
  try {
    model = lat::sentencepiece_model(std::string(reinterpret_cast<const char*>(data), size), "fuzz.model");
  } catch (const lat::Error&) {
    return 0;
  }
  try {
    const std::vector<int64_t> ids = model->encode(kText);
    for (int64_t id : ids) {
      if (!model->has_token(id)) {
        std::fprintf(stderr, "fuzz: encode gave id %lld outside [0, %lld)\n", static_cast<long long>(id),
                     static_cast<long long>(model->vocab_size()));
        std::abort();
      }
    }
    model->decode(ids);
    for (int64_t id = 0; id < std::min(model->vocab_size(), kMaxIdsDecoded); ++id) model->decode({id});
  } catch (const lat::Error&) {
  }
  try {
    const lat::SentencePieceProto proto = lat::read_sentencepiece_proto(model->file_contents());
    lat::llama_tokenizer_reproduces(proto);
  } catch (const lat::Error&) {
  }
  return 0;
}
