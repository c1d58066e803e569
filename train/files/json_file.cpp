// JSON files of an export directory (json_file.h).
#include "train/files/json_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "lat/error.h"

namespace lat {

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("load_model_weights: '" + source + "' is not valid JSON: " + e.what());
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("load_model_weights: cannot open " + what + " '" + path + "': " + std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_json(buffer.str(), path);
}

}  // namespace lat
