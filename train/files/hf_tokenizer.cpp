// lat's tokenizers as Hugging Face tokenizer.json (hf_tokenizer.h).
#include "train/files/hf_tokenizer.h"

#include <array>
#include <map>

#include "data/sentencepiece_proto.h"
#include "lat/error.h"

namespace lat {
namespace {

/// GPT-2's byte-level alphabet (tokenizers' ByteLevel, `bytes_to_unicode`): printable bytes
/// stand for themselves, the others for 256, 257, ... in byte order. UTF-8 of each.
const std::array<std::string, 256>& byte_level_chars() {
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> out;
    auto printable = [](int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const int cp = printable(b) ? b : next++;  // every code point < 0x800: one or two UTF-8 bytes
      out[static_cast<size_t>(b)] = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                                              : std::string{static_cast<char>(0xC0 | (cp >> 6)),
                                                            static_cast<char>(0x80 | (cp & 0x3F))};
    }
    return out;
  }();
  return chars;
}

/// ByteLevel without a prefix space or the GPT-2 regex split: bytes map one to one to tokens.
nlohmann::ordered_json byte_level() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
}

nlohmann::ordered_json bpe_without_merges(const nlohmann::ordered_json& vocab) {
  return {{"type", "BPE"},           {"dropout", nullptr},       {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
          {"byte_fallback", false},  {"ignore_merges", false},   {"vocab", vocab},
          {"merges", nlohmann::ordered_json::array()}};
}

/// `j[key]` is null or absent.
bool null_or_absent(const nlohmann::json& j, const char* key) { return !j.contains(key) || j[key].is_null(); }

/// The vocab of a BPE model without merges as id -> token (dense ids 0..n-1); empty with
/// `why_not` set otherwise.
std::vector<std::string> bpe_tokens_by_id(const nlohmann::json& j, std::string& why_not) {
  const nlohmann::json& model = j["model"];
  if (!model.is_object() || model.value("type", "") != "BPE") {
    why_not = "model is not BPE";
    return {};
  }
  if (model.contains("merges") && !(model["merges"].is_array() && model["merges"].empty())) {
    why_not = "model.merges is not empty";
    return {};
  }
  if (!model.contains("vocab") || !model["vocab"].is_object() || model["vocab"].empty()) {
    why_not = "model.vocab is not a non-empty object";
    return {};
  }
  const nlohmann::json& vocab = model["vocab"];
  std::vector<std::string> tokens(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<uint64_t>() >= tokens.size() ||
        !tokens[id.get<size_t>()].empty() || token.empty()) {
      why_not = "model.vocab's ids are not 0 .. " + std::to_string(tokens.size() - 1) + " once each";
      return {};
    }
    tokens[id.get<size_t>()] = token;
  }
  return tokens;
}

}  // namespace

nlohmann::ordered_json hf_tokenizer_json(const Tokenizer& tokenizer) {
  const bool byte = tokenizer.type() == "byte";
  LAT_CHECK(byte || tokenizer.type() == "char",
            "hf_tokenizer_json: expected a char or byte tokenizer, got '" << tokenizer.type() << "'");
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id)
    vocab[byte ? byte_level_chars()[static_cast<size_t>(id)] : tokenizer.decode_one(id)] = id;
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = nlohmann::ordered_json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte ? byte_level() : nlohmann::ordered_json(nullptr);
  j["post_processor"] = nullptr;
  j["decoder"] = byte ? byte_level() : nlohmann::ordered_json{{"type", "Fuse"}};
  j["model"] = bpe_without_merges(vocab);
  return j;
}

nlohmann::ordered_json hf_tokenizer_config_json() {
  nlohmann::ordered_json j;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  j["clean_up_tokenization_spaces"] = false;
  j["model_input_names"] = {"input_ids", "attention_mask"};
  return j;
}

nlohmann::ordered_json hf_subword_tokenizer_config_json(const SubwordModel& model) {
  nlohmann::ordered_json j;
  if (model.type() == "sentencepiece") {
    if (llama_tokenizer_reproduces(read_sentencepiece_proto(model.file_contents())))
      return sentencepiece_llama_tokenizer_config();
    j["tokenizer_class"] = "SentencePieceBackend";
  } else {
    j["tokenizer_class"] = "PreTrainedTokenizerFast";
    nlohmann::ordered_json special = nlohmann::ordered_json::array();
    // The file was parsed when the model was built; a second parse here is one file at export.
    const nlohmann::json file = nlohmann::json::parse(model.file_contents(), nullptr, false);
    if (file.is_object() && file.contains("added_tokens") && file["added_tokens"].is_array())
      for (const nlohmann::json& token : file["added_tokens"])
        if (token.is_object() && token.value("special", false) && token.contains("content") &&
            token["content"].is_string())
          special.push_back(token["content"].get<std::string>());
    j["extra_special_tokens"] = special;
  }
  j["add_bos_token"] = false;
  j["add_eos_token"] = false;
  j["clean_up_tokenization_spaces"] = false;
  j["model_input_names"] = {"input_ids", "attention_mask"};
  return j;
}

nlohmann::ordered_json sentencepiece_llama_tokenizer_config() {
  return {
      {"tokenizer_class", "LlamaTokenizer"}, {"add_bos_token", false},
      {"add_eos_token", false},              {"add_prefix_space", false},
      {"legacy", false},                     {"split_special_tokens", true},
      {"clean_up_tokenization_spaces", false}, {"unk_token", "<unk>"},
      {"bos_token", "<s>"},                  {"eos_token", "</s>"},
  };
}

std::optional<Tokenizer> tokenizer_from_hf_json(const nlohmann::json& j, std::string& why_not) {
  if (!j.is_object() || !j.contains("model")) {
    why_not = "no model";
    return std::nullopt;
  }
  if (!null_or_absent(j, "normalizer")) {
    why_not = "it has a normalizer";
    return std::nullopt;
  }
  if (!null_or_absent(j, "post_processor")) {
    why_not = "it has a post_processor";
    return std::nullopt;
  }
  if (j.contains("added_tokens") && !(j["added_tokens"].is_array() && j["added_tokens"].empty())) {
    why_not = "it has added_tokens";
    return std::nullopt;
  }
  const std::vector<std::string> tokens = bpe_tokens_by_id(j, why_not);
  if (tokens.empty()) return std::nullopt;
  if (null_or_absent(j, "pre_tokenizer")) {  // char
    std::string vocab;
    for (const std::string& t : tokens) vocab += t;
    try {
      Tokenizer tokenizer = Tokenizer::char_from_vocab(vocab);
      if (tokenizer.vocab_size() == static_cast<int64_t>(tokens.size())) return tokenizer;
    } catch (const Error&) {  // invalid UTF-8: not lat's char form
    }
    why_not = "model.vocab has entries that are not single characters";
    return std::nullopt;
  }
  const nlohmann::json& pre = j["pre_tokenizer"];
  if (!pre.is_object() || pre.value("type", "") != "ByteLevel" || pre.value("add_prefix_space", true) ||
      pre.value("use_regex", true)) {
    why_not = "pre_tokenizer is not ByteLevel without prefix space and regex";
    return std::nullopt;
  }
  if (tokens.size() != 256) {
    why_not = "a ByteLevel vocab of " + std::to_string(tokens.size()) + " tokens, not the 256 bytes";
    return std::nullopt;
  }
  for (size_t b = 0; b < 256; ++b) {
    if (tokens[b] != byte_level_chars()[b]) {
      why_not = "model.vocab does not give byte " + std::to_string(b) + " id " + std::to_string(b);
      return std::nullopt;
    }
  }
  return Tokenizer::byte();
}

}  // namespace lat
