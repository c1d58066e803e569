// Reading the JSON files of an export directory (config.json, tokenizer.json) with errors
// that name the file, as load_model_weights reports them.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace lat {

/// Parses `text`; throws lat::Error "load_model_weights: '<source>' is not valid JSON: ..."
/// when it does not parse.
nlohmann::json parse_json(const std::string& text, const std::string& source);

/// Reads and parses the JSON file `path`; `what` describes it in the error for a file that
/// cannot be opened ("load_model_weights: cannot open <what> '<path>': <reason>").
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace lat
