// Byte-level BPE from a Hugging Face tokenizer.json (bpe_tokenizer.h).
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "data/bpe_pretokenizer.h"
#include "data/byte_level.h"
#include "data/utf8.h"
#include "lat/error.h"

namespace lat {
namespace {

using nlohmann::json;

constexpr int kMaxJsonNesting = 64;        // what read_json_file allows: real files nest 5 deep
constexpr size_t kMaxCachedWordBytes = 256;  // longer words (runs of spaces) are merged anew
constexpr size_t kCacheShards = 16;          // one lock each: encode runs on several threads
constexpr size_t kMaxWordsPerShard = 4096;   // a full shard keeps what it has

// Heterogeneous lookup: find a std::string key by std::string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct StringEqual {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, StringEqual>;

struct AddedToken {
  std::string content;  // as matched: normalized for normalized tokens
  int64_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false;
};

bool is_whitespace(char32_t cp) {  // Unicode White_Space, what Rust's \s matches
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// Rust regex's \w (what tokenizers' single_word tests): letters, marks, decimal and letter
// numbers, connector punctuation, joiners.
bool is_word_char(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return cp == 0x200C || cp == 0x200D;
  }
}

// The start of the character that ends before `pos` (valid UTF-8, pos > 0).
size_t previous_char_start(std::string_view text, size_t pos) {
  size_t back = pos - 1;
  while (back > 0 && (static_cast<unsigned char>(text[back]) & 0xC0) == 0x80) --back;
  return back;
}

/// Added tokens of one kind (matched in the raw or the normalized text), leftmost-longest.
class AddedTokenMatcher {
 public:
  void add(AddedToken token) {
    const auto first = static_cast<unsigned char>(token.content.front());
    by_first_byte_[first].push_back(tokens_.size());
    tokens_.push_back(std::move(token));
    // Longest first, so the first that matches at a position is the longest there.
    std::stable_sort(by_first_byte_[first].begin(), by_first_byte_[first].end(),
                     [&](size_t a, size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
  }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  /// Calls piece(text, -1) for the text between matches and piece(text, id) for each match
  /// (widened over whitespace by lstrip/rstrip), covering `text` in order, as tokenizers'
  /// AddedVocabulary::find_matches does.
  template <class F>
  void split(std::string_view text, F&& piece) const {
    if (tokens_.empty()) {
      piece(text, -1);
      return;
    }
    size_t done = 0;  // end of the last piece given
    size_t pos = 0;
    while (pos < text.size()) {
      const AddedToken* match = nullptr;
      for (size_t index : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
        const std::string& c = tokens_[index].content;
        if (text.compare(pos, c.size(), c) == 0) {
          match = &tokens_[index];
          break;
        }
      }
      if (!match) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + match->content.size();
      pos = stop;  // the search goes on after the match, whatever stripping does
      if (match->single_word && !(is_word_boundary_before(text, start) && is_word_boundary_after(text, stop))) continue;
      if (start < done) continue;  // inside whitespace an rstrip took
      if (match->lstrip) {  // not into the previous match
        while (start > done) {
          size_t back = previous_char_start(text, start);
          if (back < done || !is_whitespace(next_code_point(text, back, "added token"))) break;
          start = previous_char_start(text, start);
        }
      }
      if (match->rstrip) {
        while (stop < text.size()) {
          size_t p = stop;
          if (!is_whitespace(next_code_point(text, p, "added token"))) break;
          stop = p;
        }
      }
      if (start > done) piece(text.substr(done, start - done), -1);
      piece(text.substr(start, stop - start), match->id);
      done = stop;
    }
    if (done < text.size() || text.empty()) piece(text.substr(done), -1);
  }

 private:
  static bool is_word_boundary_before(std::string_view text, size_t pos) {
    if (pos == 0) return true;
    size_t back = previous_char_start(text, pos);
    return !is_word_char(next_code_point(text, back, "added token"));
  }
  static bool is_word_boundary_after(std::string_view text, size_t pos) {
    return pos == text.size() || !is_word_char(next_code_point(text, pos, "added token"));
  }

  std::vector<AddedToken> tokens_;
  std::array<std::vector<size_t>, 256> by_first_byte_;
};

struct Merge {
  int32_t rank;
  int32_t new_id;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

json parse_tokenizer_json(const std::string& text, const std::string& origin) {
  // nlohmann's parser does not recurse, but walking a deep value would: refuse deep nesting.
  const json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonNesting)
      throw Error("'" + origin + "': nests arrays or objects deeper than " + std::to_string(kMaxJsonNesting) + " levels");
    return true;
  };
  try {
    return json::parse(text, limit_depth);
  } catch (const json::exception& e) {
    throw Error("'" + origin + "': not valid JSON: " + e.what());
  }
}

const json& member(const json& object, const char* key) {
  static const json null_value;
  const auto it = object.find(key);
  return it == object.end() ? null_value : *it;
}

class BpeModel final : public SubwordModel {
 public:
  BpeModel(std::string contents, const json& root, const std::string& origin) : contents_(std::move(contents)) {
    if (!root.is_object()) throw_tokenizer_json_error(origin, "tokenizer.json", "expected an object");
    for (const char* key : {"truncation", "padding"})
      if (!member(root, key).is_null())
        throw_tokenizer_json_error(origin, key, "lat reads null, got " + tokenizer_json_excerpt(root[key]));
    pretokenizer_ = std::make_unique<BpePretokenizer>(member(root, "normalizer"), member(root, "pre_tokenizer"), origin);
    const StringMap<int32_t> vocab = read_model(member(root, "model"), origin);
    read_added_tokens(member(root, "added_tokens"), vocab, origin);
    check_decoder(member(root, "decoder"), origin);
    check_post_processor(member(root, "post_processor"), "post_processor", origin);
    bool newline_in_added = false;
    for (const AddedTokenMatcher* m : {&raw_added_, &normalized_added_})
      for (const AddedToken& t : m->tokens()) newline_in_added |= t.lstrip || t.content.find('\n') != std::string::npos;
    splits_after_newline_ = pretokenizer_->splits_after_newline() && !newline_in_added;
  }

  const std::string& type() const override { return type_; }
  int64_t vocab_size() const override { return vocab_size_; }
  bool has_token(int64_t id) const override { return token_bytes_.count(id) > 0; }
  bool splits_after_newline() const override { return splits_after_newline_; }
  const std::string& file_contents() const override { return contents_; }
  const char* file_name() const override { return "tokenizer.json"; }

  std::vector<int64_t> encode(std::string_view text) const override {
    check_utf8(text, "BPE encode");
    std::vector<int64_t> ids;
    ids.reserve(text.size() / 3);
    raw_added_.split(text, [&](std::string_view piece, int64_t id) {
      if (id >= 0) {
        ids.push_back(id);
        return;
      }
      const std::string normalized = pretokenizer_->normalize(piece);
      normalized_added_.split(normalized, [&](std::string_view part, int64_t part_id) {
        if (part_id >= 0) {
          ids.push_back(part_id);
          return;
        }
        pretokenizer_->split(part, [&](std::string_view word) { encode_word(word, ids); });
      });
    });
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string bytes;
    for (int64_t id : ids) {
      LAT_CHECK(id >= 0 && id < vocab_size(),
                "BPE decode: id " << id << " is outside [0, " << vocab_size() << ") of the bpe tokenizer");
      const auto it = token_bytes_.find(id);
      LAT_CHECK(it != token_bytes_.end(),
                "BPE decode: id " << id << " has no token in the bpe tokenizer (a hole in its vocabulary)");
      bytes += it->second;
    }
    return utf8_lossy(bytes);
  }

 private:
  // Reads model: the vocabulary (returned: token -> id), the merges and the options lat honours.
  StringMap<int32_t> read_model(const json& model, const std::string& origin) {
    if (!model.is_object()) throw_tokenizer_json_error(origin, "model", "expected an object, got " + tokenizer_json_excerpt(model));
    const json& type = member(model, "type");
    if (type != "BPE") throw_tokenizer_json_error(origin, "model.type", "lat reads BPE, got " + tokenizer_json_excerpt(type));
    auto require = [&](const char* key, bool ok, const char* expected) {
      if (!ok) throw_tokenizer_json_error(origin, std::string("model.") + key,
                                          std::string("lat reads ") + expected + ", got " + tokenizer_json_excerpt(model[key]));
    };
    const json& dropout = member(model, "dropout");
    require("dropout", dropout.is_null() || (dropout.is_number() && dropout.get<double>() == 0.0), "null");
    require("unk_token", member(model, "unk_token").is_null(), "null");
    const json& byte_fallback = member(model, "byte_fallback");
    require("byte_fallback", byte_fallback.is_null() || byte_fallback == false, "false");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json& v = member(model, key);
      require(key, v.is_null() || v == "", "null or \"\"");
    }
    const json& ignore_merges = member(model, "ignore_merges");
    require("ignore_merges", ignore_merges.is_null() || ignore_merges.is_boolean(), "true or false");
    ignore_merges_ = ignore_merges.is_boolean() && ignore_merges.get<bool>();

    const json& vocab = member(model, "vocab");
    if (!vocab.is_object()) throw_tokenizer_json_error(origin, "model.vocab", "expected an object {token: id}");
    StringMap<int32_t> ids;
    std::unordered_map<int64_t, const std::string*> token_of_id;
    ids.reserve(vocab.size());
    token_of_id.reserve(vocab.size());
    word_ids_.reserve(vocab.size());
    token_bytes_.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const int64_t id =
          read_id(it.value(), origin, [&] { return "model.vocab[" + tokenizer_json_excerpt(it.key()) + "]"; });
      if (const auto [other, added] = token_of_id.emplace(id, &it.key()); !added)
        throw_tokenizer_json_error(origin, "model.vocab", "tokens " + tokenizer_json_excerpt(*other->second) + " and " +
                                                              tokenizer_json_excerpt(it.key()) + " both have id " + std::to_string(id));
      ids.emplace(it.key(), static_cast<int32_t>(id));
      std::string bytes = from_byte_level(it.key());
      // A word is looked up by its bytes: only tokens written in the byte-level alphabet can match.
      if (to_byte_level(bytes) == it.key()) word_ids_.emplace(bytes, static_cast<int32_t>(id));
      define(id, std::move(bytes));
    }
    byte_ids_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      std::string c;
      append_utf8(c, byte_level_char(static_cast<unsigned char>(b)));
      if (const auto it = ids.find(c); it != ids.end()) byte_ids_[b] = it->second;
    }

    const json& merges = member(model, "merges");
    if (!merges.is_array() && !merges.is_null())
      throw_tokenizer_json_error(origin, "model.merges", "expected an array of \"a b\" strings or [a, b] pairs");
    if (merges.is_null()) return ids;
    merges_.reserve(merges.size());
    std::string joined;  // reused: a large vocabulary has hundreds of thousands of merges
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const json& m = merges[rank];
      const auto key = [rank] { return "model.merges[" + std::to_string(rank) + "]"; };
      std::string_view left, right;
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          throw_tokenizer_json_error(origin, key(), "expected \"a b\" (two tokens and one space), got " + tokenizer_json_excerpt(m));
        left = std::string_view(s).substr(0, space);
        right = std::string_view(s).substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get_ref<const std::string&>();
        right = m[1].get_ref<const std::string&>();
      } else {
        throw_tokenizer_json_error(origin, key(), "expected \"a b\" or [a, b], got " + tokenizer_json_excerpt(m));
      }
      joined.assign(left).append(right);
      const auto l = ids.find(left), r = ids.find(right), merged = ids.find(std::string_view(joined));
      using Lookup = std::pair<StringMap<int32_t>::const_iterator, std::string_view>;
      for (const auto& [it, part] : {Lookup{l, left}, Lookup{r, right}, Lookup{merged, joined}})
        if (it == ids.end())
          throw_tokenizer_json_error(origin, key(), "token " + tokenizer_json_excerpt(std::string(part)) + " is not in model.vocab");
      // A repeated pair takes its last rank, as tokenizers' map of merges does.
      merges_[pair_key(l->second, r->second)] = Merge{static_cast<int32_t>(rank), merged->second};
    }
    return ids;
  }

  void read_added_tokens(const json& added, const StringMap<int32_t>& vocab, const std::string& origin) {
    if (added.is_null()) return;
    if (!added.is_array()) throw_tokenizer_json_error(origin, "added_tokens", "expected an array");
    StringMap<size_t> seen;
    int64_t largest_added = -1;
    for (size_t i = 0; i < added.size(); ++i) {
      const json& t = added[i];
      const std::string key = "added_tokens[" + std::to_string(i) + "]";
      if (!t.is_object() || !member(t, "content").is_string())
        throw_tokenizer_json_error(origin, key, "expected an object with a string 'content', got " + tokenizer_json_excerpt(t));
      auto flag = [&](const char* name, bool absent) {
        const json& v = member(t, name);
        if (v.is_null()) return absent;
        if (!v.is_boolean()) throw_tokenizer_json_error(origin, key + "." + name, "expected true or false, got " + tokenizer_json_excerpt(v));
        return v.get<bool>();
      };
      AddedToken token;
      token.content = t["content"].get<std::string>();
      read_id(member(t, "id"), origin, [&] { return key + ".id"; });
      token.single_word = flag("single_word", false);
      token.lstrip = flag("lstrip", false);
      token.rstrip = flag("rstrip", false);
      const bool normalized = flag("normalized", true);
      flag("special", false);
      if (token.content.empty()) continue;  // tokenizers ignores an empty added token
      if (const auto [it, added_now] = seen.emplace(token.content, i); !added_now)
        throw_tokenizer_json_error(origin, key + ".content",
                                   tokenizer_json_excerpt(token.content) + " repeats added_tokens[" + std::to_string(it->second) + "]");
      // The id tokenizers gives it, whatever 'id' says (it only warns): a token of model.vocab
      // keeps its id; a new one takes the next id after the vocabulary's entry count or the
      // largest added id.
      const int64_t entries = static_cast<int64_t>(vocab.size());
      if (const auto it = vocab.find(token.content); it != vocab.end())
        token.id = it->second;
      else
        token.id = largest_added >= entries || entries == 0 ? largest_added + 1 : entries;
      if (token.id > kMaxBpeTokenId)
        throw_tokenizer_json_error(origin, key + ".id", "more ids than the " + std::to_string(kMaxBpeTokenId + 1) + " lat reads");
      largest_added = std::max(largest_added, token.id);
      // The id decodes to the added token's text (tokenizers looks added tokens up first).
      define(token.id, from_byte_level(token.content));
      if (normalized) {
        token.content = pretokenizer_->normalize(token.content);
        normalized_added_.add(std::move(token));
      } else {
        raw_added_.add(std::move(token));
      }
    }
  }

  static void check_decoder(const json& decoder, const std::string& origin) {
    const json& type = decoder.is_object() ? member(decoder, "type") : json();
    if (type == "ByteLevel") return;
    if (type == "Sequence" && member(decoder, "decoders").is_array() && member(decoder, "decoders").size() == 1) {
      check_decoder(decoder["decoders"][0], origin);
      return;
    }
    throw_tokenizer_json_error(origin, "decoder", "lat reads a ByteLevel decoder, got " + tokenizer_json_excerpt(decoder));
  }

  // The post-processor only acts when tokenizers is asked to add special tokens, which lat's
  // encode never does; one lat does not know may do more, so it is refused.
  static void check_post_processor(const json& p, const std::string& key, const std::string& origin) {
    if (p.is_null()) return;
    const json& type = p.is_object() ? member(p, "type") : json();
    if (type == "ByteLevel" || type == "TemplateProcessing") return;
    if (type == "Sequence" && member(p, "processors").is_array()) {
      for (size_t i = 0; i < p["processors"].size(); ++i)
        check_post_processor(p["processors"][i], key + ".processors[" + std::to_string(i) + "]", origin);
      return;
    }
    throw_tokenizer_json_error(origin, key, "lat reads null, ByteLevel, TemplateProcessing or a Sequence of them, got " +
                                                tokenizer_json_excerpt(type.is_null() ? p : type));
  }

  // `key` makes the key path only for the error: a vocabulary has 10^5 entries.
  template <class KeyFn>
  static int64_t read_id(const json& value, const std::string& origin, KeyFn key) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxBpeTokenId)
      throw_tokenizer_json_error(origin, key(), "expected an id in [0, " + std::to_string(kMaxBpeTokenId) + "], got " +
                                                    tokenizer_json_excerpt(value));
    return value.get<int64_t>();
  }

  void define(int64_t id, std::string bytes) {
    vocab_size_ = std::max(vocab_size_, id + 1);
    token_bytes_[id] = std::move(bytes);
  }

  // Appends the ids of one word (its bytes, before the byte-level mapping).
  void encode_word(std::string_view word, std::vector<int64_t>& ids) const {
    if (ignore_merges_) {
      if (const auto it = word_ids_.find(word); it != word_ids_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    const bool cacheable = word.size() <= kMaxCachedWordBytes;
    const size_t hash = StringHash{}(word);
    CacheShard& shard = cache_[hash % kCacheShards];
    if (cacheable) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      if (const auto it = shard.words.find(word); it != shard.words.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> merged = merge_word(word);
    ids.insert(ids.end(), merged.begin(), merged.end());
    if (cacheable) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      if (shard.words.size() < kMaxWordsPerShard) shard.words.emplace(std::string(word), std::move(merged));
    }
  }

  // BPE on one word: one symbol per byte, then the lowest-ranked adjacent pair (leftmost among
  // equal ranks) merged until no pair has a merge. A heap of candidate pairs keyed by
  // (rank, position) with stale entries skipped: O(n log n) in the word's length n.
  std::vector<int32_t> merge_word(std::string_view word) const {
    std::vector<int32_t> symbol;  // -1: merged into its left neighbour
    symbol.reserve(word.size());
    for (char c : word)
      if (const int32_t id = byte_ids_[static_cast<unsigned char>(c)]; id >= 0) symbol.push_back(id);
    const int n = static_cast<int>(symbol.size());
    std::vector<int> prev(n), next(n);
    for (int i = 0; i < n; ++i) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Candidate {
      int32_t rank;
      int pos;
      int32_t new_id;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    auto push_pair = [&](int left) {
      if (left < 0 || next[left] < 0) return;
      if (const auto it = merges_.find(pair_key(symbol[left], symbol[next[left]])); it != merges_.end())
        heap.push({it->second.rank, left, it->second.new_id});
    };
    for (int i = 0; i + 1 < n; ++i) push_pair(i);
    while (!heap.empty()) {
      const Candidate top = heap.top();
      heap.pop();
      if (symbol[top.pos] < 0 || next[top.pos] < 0) continue;
      const int right = next[top.pos];
      const auto it = merges_.find(pair_key(symbol[top.pos], symbol[right]));
      if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // the pair has changed since
      symbol[top.pos] = top.new_id;
      symbol[right] = -1;
      next[top.pos] = next[right];
      if (next[right] >= 0) prev[next[right]] = top.pos;
      push_pair(prev[top.pos]);
      push_pair(top.pos);
    }
    std::vector<int32_t> out;
    for (int i = n > 0 ? 0 : -1; i >= 0; i = next[i]) out.push_back(symbol[i]);
    return out;
  }

  struct CacheShard {
    std::mutex mutex;
    StringMap<std::vector<int32_t>> words;
  };

  std::string type_ = "bpe";
  std::string contents_;
  std::unique_ptr<BpePretokenizer> pretokenizer_;
  bool ignore_merges_ = false;
  bool splits_after_newline_ = false;
  std::array<int32_t, 256> byte_ids_{};         // byte -> id of its byte-level character, -1 if none
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and merged id
  StringMap<int32_t> word_ids_;                 // a token's bytes -> id (ignore_merges)
  std::unordered_map<int64_t, std::string> token_bytes_;  // id -> the bytes it decodes to (ids may be sparse)
  int64_t vocab_size_ = 0;
  AddedTokenMatcher raw_added_, normalized_added_;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace

std::shared_ptr<const SubwordModel> bpe_model_from_json(const std::string& json_text, const std::string& origin) {
  return std::make_shared<BpeModel>(json_text, parse_tokenizer_json(json_text, origin), origin);
}

std::shared_ptr<const SubwordModel> bpe_model_from_json(std::string json_text, const nlohmann::json& root,
                                                        const std::string& origin) {
  return std::make_shared<BpeModel>(std::move(json_text), root, origin);
}

}  // namespace lat
