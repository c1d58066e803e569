// Reading sharded Hugging Face weights and checking the index against the shards (hf_shards.h).
#include "train/files/hf_shards.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>

#include <nlohmann/json.hpp>

#include "lat/error.h"
#include "train/files/finite_weights.h"
#include "train/files/json_file.h"
#include "train/files/safetensors.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

/// A SAX pass over the index text that finds a tensor weight_map lists twice: the JSON
/// reader refuses any repeated key, but only this pass sees both shards to name them. It
/// builds no value and stops at anything else wrong (invalid JSON, too deep), which
/// parse_json_text then reports.
class RepeatedWeightMapEntry {
 public:
  using json = nlohmann::json;

  explicit RepeatedWeightMapEntry(std::string where) : where_(std::move(where)) {}

  bool null() { return value("null"); }
  bool boolean(bool b) { return value(b ? "true" : "false"); }
  bool number_integer(json::number_integer_t n) { return value(std::to_string(n)); }
  bool number_unsigned(json::number_unsigned_t n) { return value(std::to_string(n)); }
  bool number_float(json::number_float_t, const json::string_t& text) { return value(text); }
  bool string(json::string_t& s) { return value(std::string("'").append(excerpt(s)).append("'")); }
  bool binary(json::binary_t&) { return value("binary"); }
  bool start_object(std::size_t) { return enter("an object", Container::object); }
  bool start_array(std::size_t) { return enter("an array", Container::array); }
  bool end_object() { return leave(); }
  bool end_array() { return leave(); }
  bool key(json::string_t& k) {
    if (depth_ == 1) top_key_ = k;
    if (in_weight_map()) tensor_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  /// Inside the object weight_map (a root object's key), at its entries' depth.
  bool in_weight_map() const { return depth_ == 2 && weight_map_; }

  /// A value at the current depth; `shard` describes it for the message.
  bool value(const std::string& shard) {
    if (!in_weight_map()) return true;
    auto [it, fresh] = shards_.emplace(tensor_, shard);
    if (!fresh)
      throw Error(where_ + "weight_map lists tensor '" + excerpt(tensor_) + "' twice, in shards " + it->second +
                  " and " + shard);
    return true;
  }

  enum class Container { object, array };

  bool enter(const std::string& kind, Container container) {
    if (!value(kind)) return false;
    ++depth_;
    if (depth_ == 2) weight_map_ = top_key_ == "weight_map" && container == Container::object;
    return depth_ <= kMaxJsonDepth;
  }

  bool leave() {
    if (depth_ == 2) weight_map_ = false;
    --depth_;
    return true;
  }

  std::string where_;
  int depth_ = 0;
  std::string top_key_;
  bool weight_map_ = false;
  std::string tensor_;
  std::map<std::string, std::string> shards_;  // tensor -> its first shard, as described
};

/// A shard is a plain file beside the index: nothing outside the directory is read, and a
/// NUL or other control character cannot make the name opened differ from the name checked.
bool is_plain_file_name(const nlohmann::json& shard) {
  if (!shard.is_string()) return false;
  const std::string& name = shard.get_ref<const std::string&>();
  return !name.empty() && name != "." && name != ".." && std::none_of(name.begin(), name.end(), [](char c) {
    return c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  });
}

/// weight_map as tensor -> shard, every shard name checked.
std::map<std::string, std::string> read_weight_map(const std::string& index_path, const std::string& where) {
  const std::string text = read_json_file_text(index_path, "the weight index");
  RepeatedWeightMapEntry repeated(where);
  nlohmann::json::sax_parse(text, &repeated);
  const nlohmann::json index = parse_json_text(text, "load_model_weights: '" + index_path + "'");
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(where + "expected an object with 'weight_map': {tensor: shard file}");
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!is_plain_file_name(shard))
      throw Error(where + "weight_map '" + excerpt(name) + "': expected a file name in the same directory, got " +
                  json_excerpt(shard));
    weight_map.emplace(name, shard.get<std::string>());
  }
  return weight_map;
}

}  // namespace

NamedTensors load_hf_shards(const std::string& index_path) {
  const std::string where = "load_model_weights: '" + index_path + "': ";
  const std::map<std::string, std::string> weight_map = read_weight_map(index_path, where);
  const fs::path dir = fs::path(index_path).parent_path();

  std::map<std::string, std::string> first_tensor;  // shard -> a tensor weight_map places there
  for (const auto& [name, shard] : weight_map) first_tensor.emplace(shard, name);
  for (const auto& [shard, name] : first_tensor) {
    std::error_code ec;  // a name too long for the file system is an error code, not an exception
    if (!fs::exists(dir / shard, ec))
      throw Error(where + "weight_map '" + excerpt(name) + "': shard '" + excerpt(shard) + "' does not exist" +
                  (ec ? " (" + ec.message() + ")" : ""));
  }

  NamedTensors tensors;
  std::map<std::string, std::string> holder;  // tensor -> the shard that holds it
  for (const auto& shard_tensor : first_tensor) {
    const std::string& shard = shard_tensor.first;
    const SafetensorsFile file = load_safetensors((dir / shard).string());
    check_finite_weights(file.tensors, file.path);
    for (const auto& [name, tensor] : file.tensors) {
      const std::string tensor_in = "tensor '" + excerpt(name) + "' ";
      const auto listed = weight_map.find(name);
      const std::string listed_shard = listed == weight_map.end() ? "" : listed->second;
      if (auto [it, fresh] = holder.emplace(name, shard); !fresh)
        throw Error(where + tensor_in + "is in two shards, '" + excerpt(it->second) + "' and '" + excerpt(shard) +
                    "' (weight_map places it in '" + excerpt(listed_shard) + "')");
      if (listed == weight_map.end())
        throw Error(where + tensor_in + "is in shard '" + excerpt(shard) + "', but weight_map does not list it");
      if (listed_shard != shard)
        throw Error(where + tensor_in + "is in shard '" + excerpt(shard) + "', but weight_map places it in '" +
                    excerpt(listed_shard) + "'");
      tensors.emplace_back(name, tensor);
    }
  }
  for (const auto& [name, shard] : weight_map)
    if (holder.count(name) == 0)
      throw Error(where + "weight_map places tensor '" + excerpt(name) + "' in shard '" + excerpt(shard) +
                  "', which does not hold it");
  return tensors;
}

}  // namespace lat
