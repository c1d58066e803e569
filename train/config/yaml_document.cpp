// Where a second YAML document starts (yaml_document.h).
#include "train/config/yaml_document.h"

#include <sstream>

namespace lat {

int second_document_line(const std::string& text, const std::vector<YAML::Node>& documents) {
  // yaml-cpp marks a document at its content (0-based lines; an empty document on the line
  // after its '---'): the last line starting with "---" after the first document's content
  // and not below that mark is where the second begins.
  const int first = documents[0].Mark().line, mark = documents[1].Mark().line;
  int start = mark + 1;
  std::istringstream lines(text);
  std::string line;
  for (int i = 0; i <= mark && std::getline(lines, line); ++i)
    if (i > first && line.rfind("---", 0) == 0) start = i + 1;
  return start;
}

}  // namespace lat
