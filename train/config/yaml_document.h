// Whether a YAML text holds more than one document: a config file and a --set value each hold
// exactly one, so that a second one (after a '---' line, or text after the first document
// that YAML cannot read) is an error rather than silently ignored, as YAML::Load ignores it.
// Internal to train/config/.
#pragma once
#include <optional>
#include <string>

namespace lat {

/// The 1-based line of `text` where a second YAML document starts (its '---' line), or nullopt
/// when the text holds one document or none. Throws YAML::ParserException for a syntax error
/// in the first two documents.
std::optional<int> second_document_line(const std::string& text);

}  // namespace lat
