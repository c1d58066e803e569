// Where a YAML text's second document starts: a config file and a --set value each hold
// exactly one document, so that one after a '---' line is an error rather than silently
// ignored (YAML::Load reads the first only). Internal to train/config/.
#pragma once
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace lat {

/// The 1-based line of `text` where documents[1] (of YAML::LoadAll(text), at least two) starts:
/// its '---' line, or where its content starts when no '---' precedes it.
int second_document_line(const std::string& text, const std::vector<YAML::Node>& documents);

}  // namespace lat
