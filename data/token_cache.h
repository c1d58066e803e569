// The token ids of a text corpus, kept beside the run that encoded them, so that a resumed or
// repeated run does not encode the text again. The file is named after a hash of the text and
// the tokenizer, and its header repeats the hash: a cache for other text or another tokenizer
// is never read as this one's. Layout (little-endian):
//   magic "LATTOKEN" (8 bytes), version u32 (2), id width u32 (2 or 4 bytes),
//   hash u64, text bytes u64, token count u64, crc32 u32 of the id bytes (zlib's CRC-32),
//   then count ids of that width.
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace lat {

/// The bytes every token cache starts with, and the header's size.
inline constexpr std::string_view kTokenCacheMagic = "LATTOKEN";
inline constexpr size_t kTokenCacheHeaderBytes = 44;

/// What a cache holds: `text`, encoded by `tokenizer`. The hash covers the text's bytes and the
/// tokenizer's identity (its type and its file's bytes, or the char vocabulary).
struct TokenCacheKey {
  uint64_t hash = 0;
  uint64_t text_bytes = 0;
  int64_t vocab_size = 0;  // every cached id is below it

  static TokenCacheKey of(std::string_view text, const Tokenizer& tokenizer);
  /// "tokens-<hash as 16 hex digits>.bin".
  std::string file_name() const;
};

/// Writes the cache of `ids` (each in [0, key.vocab_size)) for `key` to `out`.
void write_token_cache(std::ostream& out, const TokenCacheKey& key, const std::vector<int32_t>& ids);

/// The ids of a cache file's `bytes` when they are a cache for `key`. Throws lat::Error
/// saying what is wrong (magic, version, id width, hash, text size, a count that disagrees
/// with the size or exceeds what the text can give, ids that do not match their checksum, an id
/// outside the vocabulary).
std::vector<int32_t> parse_token_cache(std::string_view bytes, const TokenCacheKey& key);

/// A cache looked up in a run directory (load_data with a cache directory).
struct TokenCacheLookup {
  std::string path;        // dir/file_name(): read when reused, else where to write
  TokenCacheKey key;
  bool reused = false;     // the ids came from `path`
  std::string note;        // why a cache file there was not used ("" when none was found)
  std::vector<std::string> stale;  // other caches in dir (other text or tokenizer): remove after writing
};

/// Looks for the cache of `key` in `dir`: reads `ids` from it when it is whole, else explains in
/// `note` (a damaged file) and lists other caches in `stale`. Never throws for a bad file.
TokenCacheLookup find_token_cache(const std::string& dir, const TokenCacheKey& key, std::vector<int32_t>& ids);

}  // namespace lat
