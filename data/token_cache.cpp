// Token cache files (token_cache.h): hash, write, parse, look up.
#include "data/token_cache.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "data/regular_file.h"
#include "lat/error.h"

namespace lat {
namespace {

// Version 2 added the CRC-32 of the ids: ids changed within the vocabulary are otherwise read as valid.
constexpr uint32_t kTokenCacheVersion = 2;

// CRC-32 (zlib) of `bytes`, fed in pieces that fit zlib's uInt length.
uint32_t crc32_of_bytes(std::string_view bytes, uint32_t crc = 0) {
  constexpr size_t kPiece = size_t{1} << 30;
  for (size_t at = 0; at < bytes.size(); at += kPiece) {
    const size_t n = std::min(kPiece, bytes.size() - at);
    crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n)));
  }
  return crc;
}

// A bound on the ids of a text of `text_bytes` bytes, far above what tokenizers give (a token
// covers a byte of text or more, except for a prefix a tokenizer adds, such as SentencePiece's
// dummy space, and the pieces of a character that normalization expands): it keeps a damaged
// count from sizing anything, while the file's own size decides what is read.
uint64_t max_tokens(uint64_t text_bytes) { return 64 * (text_bytes + 1); }

template <class T>
void put(std::string& header, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // lat runs on little-endian hosts only
  header.append(bytes, sizeof(T));
}

template <class T>
T get(std::string_view bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// `crc` as 8 lowercase hex digits, as train/files/checksum.h writes it (data/ does not depend on train/).
std::string hex8(uint32_t crc) {
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return hex;
}

int id_width(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

}  // namespace

TokenCacheKey TokenCacheKey::of(std::string_view text, const Tokenizer& tokenizer) {
  std::string identity = tokenizer.type() + '\0';
  if (const SubwordModel* model = tokenizer.subword_model())
    identity += model->file_contents();
  else if (tokenizer.type() == "char")
    identity += tokenizer.vocab_string();
  TokenCacheKey key;
  key.hash = uint64_t{crc32_of_bytes(text)} << 32 | crc32_of_bytes(identity);
  key.text_bytes = text.size();
  key.vocab_size = tokenizer.vocab_size();
  return key;
}

std::string TokenCacheKey::file_name() const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return "tokens-" + std::string(hex) + ".bin";
}

void write_token_cache(std::ostream& out, const TokenCacheKey& key, const std::vector<int32_t>& ids) {
  const int width = id_width(key.vocab_size);
  std::string header(kTokenCacheMagic);
  put<uint32_t>(header, kTokenCacheVersion);
  put<uint32_t>(header, static_cast<uint32_t>(width));
  put<uint64_t>(header, key.hash);
  put<uint64_t>(header, key.text_bytes);
  put<uint64_t>(header, ids.size());
  std::vector<char> body(ids.size() * static_cast<size_t>(width));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (width == 2) {
      const uint16_t id = static_cast<uint16_t>(ids[i]);
      std::memcpy(body.data() + 2 * i, &id, 2);
    } else {
      std::memcpy(body.data() + 4 * i, &ids[i], 4);
    }
  }
  put<uint32_t>(header, crc32_of_bytes(std::string_view(body.data(), body.size())));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(body.data(), static_cast<std::streamsize>(body.size()));
}

std::vector<int32_t> parse_token_cache(std::string_view bytes, const TokenCacheKey& key) {
  LAT_CHECK(bytes.size() >= kTokenCacheHeaderBytes,
            bytes.size() << " bytes, shorter than the " << kTokenCacheHeaderBytes << "-byte header");
  LAT_CHECK(bytes.substr(0, kTokenCacheMagic.size()) == kTokenCacheMagic, "no token cache magic");
  const uint32_t version = get<uint32_t>(bytes, 8), width = get<uint32_t>(bytes, 12);
  LAT_CHECK(version == kTokenCacheVersion, "version " << version << ", expected " << kTokenCacheVersion);
  LAT_CHECK(width == static_cast<uint32_t>(id_width(key.vocab_size)),
            "ids of " << width << " bytes, expected " << id_width(key.vocab_size) << " for a vocabulary of "
                      << key.vocab_size);
  LAT_CHECK(get<uint64_t>(bytes, 16) == key.hash, "its hash is not this text's and tokenizer's");
  const uint64_t text_bytes = get<uint64_t>(bytes, 24), count = get<uint64_t>(bytes, 32);
  LAT_CHECK(text_bytes == key.text_bytes, "made from " << text_bytes << " bytes of text, the text has " << key.text_bytes);
  // The count is checked against what the text can give before it sizes anything.
  LAT_CHECK(count <= max_tokens(key.text_bytes),
            count << " ids, more than a text of " << key.text_bytes << " bytes encodes to");
  LAT_CHECK(bytes.size() - kTokenCacheHeaderBytes == count * width,
            "the header says " << count << " ids of " << width << " bytes, but " << bytes.size() - kTokenCacheHeaderBytes
                               << " bytes follow it");
  const uint32_t stored_crc = get<uint32_t>(bytes, 40);
  const uint32_t actual_crc = crc32_of_bytes(bytes.substr(kTokenCacheHeaderBytes));
  LAT_CHECK(stored_crc == actual_crc, "ids do not match their checksum: stored crc32 "
                                          << hex8(stored_crc) << ", the ids have " << hex8(actual_crc));
  std::vector<int32_t> ids(count);
  const char* body = bytes.data() + kTokenCacheHeaderBytes;
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t id = 0;
    if (width == 2) {
      uint16_t narrow;
      std::memcpy(&narrow, body + 2 * i, 2);
      id = narrow;
    } else {
      std::memcpy(&id, body + 4 * i, 4);
    }
    LAT_CHECK(id < static_cast<uint64_t>(key.vocab_size),
              "id " << id << " at offset " << i << " is outside the vocabulary of " << key.vocab_size);
    ids[i] = static_cast<int32_t>(id);
  }
  return ids;
}

TokenCacheLookup find_token_cache(const std::string& dir, const TokenCacheKey& key, std::vector<int32_t>& ids) {
  namespace fs = std::filesystem;
  TokenCacheLookup lookup;
  lookup.key = key;
  lookup.path = (fs::path(dir) / key.file_name()).string();
  std::error_code ec;
  if (fs::exists(lookup.path, ec)) {
    try {
      const size_t max_bytes = kTokenCacheHeaderBytes + 4 * max_tokens(key.text_bytes);
      ids = parse_token_cache(read_bounded_file(lookup.path, max_bytes, "token cache"), key);
      lookup.reused = true;
      return lookup;
    } catch (const Error& e) {
      lookup.note = lookup.path + " is damaged (" + e.what() + ")";
    }
  }
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name != key.file_name() && name.rfind("tokens-", 0) == 0 && name.size() == key.file_name().size() &&
        name.ends_with(".bin"))
      lookup.stale.push_back(it->path().string());
  }
  std::sort(lookup.stale.begin(), lookup.stale.end());
  if (lookup.note.empty() && !lookup.stale.empty())
    lookup.note = lookup.stale.front() + " is for other text or another tokenizer";
  return lookup;
}

}  // namespace lat
