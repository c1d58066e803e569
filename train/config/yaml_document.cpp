// Where a second YAML document starts (yaml_document.h).
#include "train/config/yaml_document.h"

#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

namespace lat {
namespace {

/// Parser events that keep only where the last document started.
class DocumentStart : public YAML::EventHandler {
 public:
  YAML::Mark mark;

  void OnDocumentStart(const YAML::Mark& at) override { mark = at; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

std::optional<int> second_document_line(const std::string& text) {
  // Two documents at most, not YAML::LoadAll: on text it cannot read after a document,
  // yaml-cpp 0.7 returns empty documents at the same place forever.
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  DocumentStart start;
  if (!parser.HandleNextDocument(start) || !parser.HandleNextDocument(start)) return std::nullopt;
  return start.mark.line + 1;
}

}  // namespace lat
