// Fuzzes the token cache reader: the input is a cache file's bytes, parsed against the key of a
// fixed text under the byte tokenizer (2-byte ids) and against the same hash with a vocabulary
// above 65536 (4-byte ids), and looked up as a file in a run directory (find_token_cache, which
// never throws). lat::Error is the expected answer to bad bytes; anything else escaping, a crash,
// a sanitizer report or a huge allocation is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_cache.h"
#include "lat/error.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The seed corpus holds caches of this text (whole, cut short, with an id outside the vocabulary,
  // with a huge count), each with the checksum of its ids, so that the fuzzer starts past that check.
  static const lat::TokenCacheKey narrow = lat::TokenCacheKey::of("fuzz the token cache\n", lat::Tokenizer::byte());
  static const lat::TokenCacheKey wide = [] {
    lat::TokenCacheKey key = narrow;
    key.vocab_size = 70000;
    return key;
  }();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const lat::TokenCacheKey* key : {&narrow, &wide}) {
    try {
      lat::parse_token_cache(bytes, *key);
    } catch (const lat::Error&) {
    }
  }
  const std::filesystem::path dir = lat::fuzz::scratch_dir();
  lat::fuzz::write_file(dir / narrow.file_name(), data, size);
  std::vector<int32_t> ids;
  lat::find_token_cache(dir.string(), narrow, ids);
  return 0;
}
