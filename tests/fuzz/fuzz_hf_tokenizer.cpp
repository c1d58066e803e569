// Fuzzes the tokenizer.json readers: the input is written to a file, read by read_json_file
// and taken as a Hugging Face tokenizer (tokenizer_from_hf_json, as a Qwen3.5 directory is
// read) and as lat's own export form (read_tokenizer_json); a tokenizer that comes back must
// decode each of its ids and encode that text back to the id. A lat::Error is the expected
// answer to a bad file; anything else escaping, a crash, a sanitizer report, a hang or a huge
// allocation is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "lat/error.h"
#include "tests/fuzz/fuzz_files.h"
#include "train/files/hf_tokenizer.h"
#include "train/files/json_file.h"
#include "train/files/tokenizer_files.h"

namespace {

/// Aborts (a finding) when `tokenizer` does not give back each id from its decoded text.
void expect_round_trip(const lat::Tokenizer& tokenizer, const char* reader) {
  if (tokenizer.type() != "char") return;  // byte ids do not each decode to valid text alone
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::vector<int64_t> back = tokenizer.encode(tokenizer.decode_one(id));
    if (back.size() != 1 || back[0] != id) {
      std::fprintf(stderr, "fuzz: %s: id %lld does not come back from its text\n", reader, static_cast<long long>(id));
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path path = lat::fuzz::scratch_dir() / "tokenizer.json";
  lat::fuzz::write_file(path, data, size);
  try {
    std::string why_not;
    const std::optional<lat::Tokenizer> hf =
        lat::tokenizer_from_hf_json(lat::read_json_file(path.string(), "the tokenizer file"), why_not);
    if (hf) expect_round_trip(*hf, "tokenizer_from_hf_json");
  } catch (const lat::Error&) {
  }
  try {
    lat::Checkpoint ckpt;
    lat::read_tokenizer_json(path.string(), ckpt);
    if (const std::optional<lat::Tokenizer> tokenizer = lat::checkpoint_tokenizer(ckpt))
      expect_round_trip(*tokenizer, "read_tokenizer_json");
  } catch (const lat::Error&) {
  }
  return 0;
}
