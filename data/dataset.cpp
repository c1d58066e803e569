// Dataset split and the format dispatch of load_data.
#include "data/dataset.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "data/parallel_encode.h"
#include "data/regular_file.h"
#include "data/token_files.h"
#include "lat/error.h"

namespace lat {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The first `n` bytes of a file ("" when it cannot be read; load_data reports that later).
std::string file_prefix(const std::string& path, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return {};
  std::string bytes(n, '\0');
  bytes.resize(std::fread(bytes.data(), 1, n, f));
  std::fclose(f);
  return bytes;
}

// With model.vocab_size 0 the vocabulary is the largest id + 1, so one stray id (a wrong
// data.bin_dtype, a file that is not token ids) would size the embedding: bound it first.
void check_ids_for_data_vocabulary(const std::vector<int32_t>& tokens, const DataOptions& options,
                                   const std::string& format) {
  const auto bad = std::find_if(tokens.begin(), tokens.end(), [](int32_t id) { return id >= kMaxDataVocabSize; });
  const std::string setting = format == "bin" ? "data.bin_dtype (read as " + options.bin_dtype +
                                                    " unless an llm.c header says otherwise)"
                                              : "data.h5_dataset ('" + options.h5_dataset + "')";
  LAT_CHECK(bad == tokens.end(), "load_data: " << options.path << ": token id " << *bad << " at offset "
                                               << (bad - tokens.begin()) << " is not below " << kMaxDataVocabSize
                                               << ", the largest vocabulary lat takes from the data "
                                               << "(model.vocab_size: 0; set model.vocab_size for more); check "
                                               << setting << " and data.format");
}

}  // namespace

const char* split_name(Split split) { return split == Split::train ? "train" : "val"; }

Dataset::Dataset(std::vector<int32_t> tokens, double val_fraction, int64_t block_size)
    : tokens_(std::move(tokens)), block_size_(block_size) {
  LAT_CHECK(val_fraction > 0.0 && val_fraction < 1.0,
            "Dataset: data.val_fraction: expected a value in (0, 1), got " << val_fraction);
  LAT_CHECK(block_size >= 1, "Dataset: data.block_size: expected >= 1, got " << block_size);
  n_train_ = static_cast<int64_t>(static_cast<double>(size()) * (1.0 - val_fraction));
  for (Split split : {Split::train, Split::val}) {
    LAT_CHECK(split_size(split) >= block_size + 1,
              "Dataset: the " << split_name(split) << " split has " << split_size(split) << " tokens (of " << size()
                              << ", data.val_fraction " << val_fraction << "), fewer than data.block_size + 1 = "
                              << block_size + 1);
  }
}

Dataset::Dataset(std::vector<int32_t> tokens, double val_fraction, int64_t block_size,
                 const std::vector<int32_t>& separator)
    : Dataset(std::move(tokens), val_fraction, block_size) {
  documents_.emplace(tokens_, separator);
}

int64_t Dataset::num_targets(Split split) const {
  const int64_t begin = split_begin(split), last = begin + split_size(split) - 1;
  // Token p (begin < p <= last) is the target of token p - 1 unless a document starts at p.
  const int64_t starts = documents_ ? static_cast<int64_t>(documents_->starts_in(begin, last).size()) : 0;
  return last - begin - starts;
}

int32_t Dataset::max_id() const { return *std::max_element(tokens_.begin(), tokens_.end()); }

void check_token_ids(const std::vector<int32_t>& tokens, int64_t vocab_size, const std::string& source) {
  auto bad = std::find_if(tokens.begin(), tokens.end(), [&](int32_t id) { return id >= vocab_size; });
  LAT_CHECK(bad == tokens.end(), "dataset: " << source << ": token id " << *bad << " at offset "
                                             << (bad - tokens.begin()) << " is >= vocab_size " << vocab_size
                                             << " (model.vocab_size)");
}

void Dataset::check_ids(int64_t vocab_size, const std::string& source) const {
  check_token_ids(tokens_, vocab_size, source);
}

std::string format_by_extension(const std::string& path) {
  if (ends_with(path, ".txt")) return "text";
  if (ends_with(path, ".bin")) return "bin";
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) return "h5";
  return "";
}

std::string resolve_format(const std::string& path, const std::string& format) {
  if (format != "auto") {
    LAT_CHECK(format == "text" || format == "bin" || format == "h5",
              "load_data: data.format: expected auto, text, bin or h5, got '" << format << "'");
    return format;
  }
  if (std::string by_name = format_by_extension(path); !by_name.empty()) return by_name;
  // Sniffing opens the file: a FIFO would block there.
  if (const std::optional<std::string> kind = non_regular_file_kind(path))
    throw Error("load_data: data.path '" + path + "' " + *kind + ", expected a regular file");
  std::string prefix = file_prefix(path, 8);
  if (prefix == kHdf5Signature) return "h5";
  if (prefix.size() >= 4) {
    int32_t magic;
    std::memcpy(&magic, prefix.data(), 4);
    if (magic == kLlmcMagic) return "bin";
  }
  return "text";
}

LoadedData load_data(const DataOptions& options, const std::optional<Tokenizer>& tokenizer,
                     const std::string& token_cache_dir) {
  LAT_CHECK(!options.path.empty(), "load_data: data.path: expected a file path, got an empty string");
  std::string format = resolve_format(options.path, options.format);
  const std::string mismatch = doc_separator_mismatch(options.doc_separator, format);
  LAT_CHECK(mismatch.empty(), "load_data: data.doc_separator: " << mismatch << " (" << options.path << ")");
  LAT_CHECK(!options.packing || !std::holds_alternative<std::monostate>(options.doc_separator),
            "load_data: data.packing: needs data.doc_separator, the string (text) or token id (bin, h5) that ends "
            "each document");
  std::vector<int32_t> tokens;
  std::optional<Tokenizer> used;
  std::optional<TokenCacheLookup> cache;
  if (format == "text") {
    std::string text = read_text_file(options.path);
    LAT_CHECK(!text.empty(), "load_data: " << options.path << " is empty");
    // A char vocabulary is stored as one C string in checkpoints: a NUL would be found only
    // at the first save, after the training it was meant to keep.
    if (const size_t nul = text.find('\0'); nul != std::string::npos && !tokenizer && options.tokenizer == "char")
      throw Error("load_data: " + options.path + ": NUL byte at offset " + std::to_string(nul) +
                  ": not text for the char tokenizer (token ids? set data.format: bin; binary text? "
                  "data.tokenizer: byte)");
    used = tokenizer ? *tokenizer : Tokenizer::create(options.tokenizer, text);
    if (!token_cache_dir.empty()) cache = find_token_cache(token_cache_dir, TokenCacheKey::of(text, *used), tokens);
    if (!cache || !cache->reused) {
      std::vector<int64_t> ids;
      try {
        ids = parallel_encode(*used, text);
      } catch (const Error& e) {  // the tokenizer names a character, not the file it came from
        throw Error("load_data: " + options.path + ": " + e.what());
      }
      tokens.assign(ids.begin(), ids.end());
    }
  } else if (format == "bin") {
    tokens = read_bin_tokens(options.path, options.bin_dtype);
  } else {
    tokens = read_h5_tokens(options.path, options.h5_dataset);
  }
  if (options.vocab_size > 0)
    check_token_ids(tokens, options.vocab_size, options.path);
  else if (format != "text")
    check_ids_for_data_vocabulary(tokens, options, format);
  if (!options.packing)
    return LoadedData{Dataset(std::move(tokens), options.val_fraction, options.block_size), used, format, cache};
  Dataset packed(std::move(tokens), options.val_fraction, options.block_size,
                 doc_separator_ids(options.doc_separator, used, options.path));
  // A separator that never splits the stream would silently train on one long document:
  // most likely a YAML string in single quotes, where '\n' is a backslash and an n.
  LAT_CHECK(packed.documents()->num_starts() > 0, "load_data: data.doc_separator "
                                                      << describe_doc_separator(options.doc_separator)
                                                      << " separates no two documents of " << options.path);
  // Every token a separator leaves nothing to predict inside a document: the loss would be
  // 0 / 0 at the first step.
  for (Split split : {Split::train, Split::val})
    LAT_CHECK(packed.num_targets(split) > 0,
              "load_data: " << options.path << ": no targets in the " << split_name(split) << " split ("
                            << packed.split_size(split) << " tokens): every token after its first is "
                            << "data.doc_separator " << describe_doc_separator(options.doc_separator)
                            << ", so each document ends where it starts");
  return LoadedData{std::move(packed), used, format, cache};
}

}  // namespace lat
