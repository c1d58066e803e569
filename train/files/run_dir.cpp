// The run directory's files besides the checkpoints themselves (run_dir.h).
#include "train/files/run_dir.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/regular_file.h"
#include "train/config/config.h"
#include "train/files/atomic_file.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

constexpr const char* kLatest = "latest";

/// Whether `name` has the form ckpt_*.h5, whatever lies between.
bool looks_like_checkpoint(const std::string& name) {
  const std::string prefix = "ckpt_", suffix = ".h5";
  return name.size() >= prefix.size() + suffix.size() && name.rfind(prefix, 0) == 0 &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The warning for an ignored ckpt_*.h5 name of `out_dir`.
std::string ignored_checkpoint_warning(const std::string& out_dir, const std::string& name) {
  return "ignoring " + (fs::path(out_dir) / name).string() +
         ": not a checkpoint name lat writes (ckpt_<step>.h5, the step an int64 in 8 or more digits)";
}

/// The file name `out_dir/latest` holds, or "" when there is no `latest`.
std::string read_latest(const std::string& out_dir) {
  const fs::path path = fs::path(out_dir) / kLatest;
  if (std::optional<std::string> kind = non_regular_file_kind(path.string()))
    throw Error("read_latest: '" + path.string() + "' " + *kind + ", expected a text file naming a checkpoint");
  std::ifstream in(path);
  if (!in) return "";
  // A checkpoint name is short; a damaged `latest` may be huge: read a bounded prefix.
  constexpr std::streamsize kMaxLatestBytes = 256;
  std::string name(kMaxLatestBytes + 1, '\0');
  in.read(name.data(), kMaxLatestBytes + 1);
  name.resize(static_cast<size_t>(in.gcount()));
  LAT_CHECK(name.size() <= static_cast<size_t>(kMaxLatestBytes),
            "read_latest: '" << path.string() << "': more than " << kMaxLatestBytes
                             << " bytes, expected one checkpoint file name");
  name = name.substr(0, name.find('\n'));
  name.erase(name.find_last_not_of(" \t\r\n") + 1);
  LAT_CHECK(!name.empty() && name.find('/') == std::string::npos,
            "read_latest: '" << path.string() << "': expected a checkpoint file name, got '" << name << "'");
  return name;
}

}  // namespace

std::string checkpoint_file_name(int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "ckpt_%08lld.h5", static_cast<long long>(step));
  return name;
}

std::optional<int64_t> checkpoint_step(const std::string& name) {
  if (!looks_like_checkpoint(name)) return std::nullopt;
  const char* first = name.data() + 5;               // after "ckpt_"
  const char* last = name.data() + name.size() - 3;  // before ".h5"
  int64_t step = 0;
  const auto [end, ec] = std::from_chars(first, last, step);
  // from_chars also takes a '-' sign; the round trip rejects it, an int64 overflow
  // (ec == result_out_of_range) and any non-canonical padding.
  if (ec != std::errc() || end != last || step < 0 || checkpoint_file_name(step) != name) return std::nullopt;
  return step;
}

CheckpointListing list_checkpoints(const std::string& out_dir) {
  CheckpointListing listing;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(out_dir, ec)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    if (!looks_like_checkpoint(name)) continue;
    if (auto step = checkpoint_step(name))
      listing.checkpoints.emplace_back(*step, name);
    else
      listing.ignored.push_back(name);
  }
  std::sort(listing.checkpoints.begin(), listing.checkpoints.end());
  std::sort(listing.ignored.begin(), listing.ignored.end());
  return listing;
}

void warn_on_stderr(const std::string& line) { std::cerr << "warning: " << line << "\n"; }

void write_latest(const std::string& out_dir, const std::string& file_name) {
  LAT_CHECK(checkpoint_step(file_name).has_value(),
            "write_latest: file_name: expected ckpt_<step>.h5, got '" << file_name << "'");
  write_text_atomically((fs::path(out_dir) / kLatest).string(), file_name + "\n", "write_latest");
}

namespace {

/// The one checkpoint newer than the one `latest` names, when it was written after `latest`
/// was: a run saves ckpt_<step>.h5 (renamed into place whole) and only then points `latest`
/// at it, so a run killed between the two leaves exactly this. Two newer files, or one older
/// than `latest` (`latest` edited back by hand), are not that, and stay for the resume checks
/// to refuse.
std::optional<std::string> checkpoint_published_after_latest(const std::string& out_dir,
                                                             const CheckpointListing& found,
                                                             const std::string& latest) {
  const std::optional<int64_t> latest_step = checkpoint_step(latest);
  if (!latest_step || found.checkpoints.empty()) return std::nullopt;
  const auto& [newest_step, newest_name] = found.checkpoints.back();
  const size_t n = found.checkpoints.size();
  const bool one_newer = newest_step > *latest_step && (n < 2 || found.checkpoints[n - 2].first <= *latest_step);
  if (!one_newer) return std::nullopt;
  std::error_code ec_newest, ec_latest;
  const auto newest_time = fs::last_write_time(fs::path(out_dir) / newest_name, ec_newest);
  const auto latest_time = fs::last_write_time(fs::path(out_dir) / kLatest, ec_latest);
  if (ec_newest || ec_latest || newest_time < latest_time) return std::nullopt;
  return newest_name;
}

}  // namespace

std::optional<std::string> find_latest_checkpoint(const std::string& out_dir, const WarningSink& warn) {
  const CheckpointListing found = list_checkpoints(out_dir);
  for (const std::string& name : found.ignored) warn(ignored_checkpoint_warning(out_dir, name));
  const std::string latest = read_latest(out_dir);
  if (!latest.empty()) {
    const fs::path path = fs::path(out_dir) / latest;
    LAT_CHECK(fs::is_regular_file(path), "find_latest_checkpoint: '" << (fs::path(out_dir) / kLatest).string()
                                             << "' names '" << latest << "', which does not exist");
    if (std::optional<std::string> unrecorded = checkpoint_published_after_latest(out_dir, found, latest)) {
      warn("'" + (fs::path(out_dir) / kLatest).string() + "' names " + latest + ", but " + *unrecorded +
           " was written after it (a run ended between publishing a checkpoint and updating 'latest'): using " +
           *unrecorded);
      return (fs::path(out_dir) / *unrecorded).string();
    }
    return path.string();
  }
  if (found.checkpoints.empty()) return std::nullopt;
  return (fs::path(out_dir) / found.checkpoints.back().second).string();
}

std::string resolve_checkpoint(const std::string& path, const WarningSink& warn) {
  std::error_code ec;
  // A path the user gave that leads to no checkpoint is bad input (ConfigError, exit code 2).
  if (!fs::exists(path, ec)) throw ConfigError("checkpoint '" + path + "': no such file or directory");
  if (!fs::is_directory(path, ec)) {
    if (std::optional<std::string> kind = non_regular_file_kind(path))
      throw ConfigError("checkpoint '" + path + "' " + *kind + ", expected a checkpoint file or a run directory");
    return path;
  }
  std::optional<std::string> latest = find_latest_checkpoint(path, warn);
  if (!latest)
    throw ConfigError("checkpoint '" + path +
                      "': no checkpoint in this run directory (no 'latest' file, no ckpt_*.h5)");
  return *latest;
}

std::vector<std::string> prune_checkpoints(const std::string& out_dir, int64_t keep_last) {
  LAT_CHECK(keep_last >= 0, "prune_checkpoints: keep_last: expected >= 0, got " << keep_last);
  std::vector<std::string> removed;
  if (keep_last == 0) return removed;
  const std::string latest = read_latest(out_dir);
  const auto found = list_checkpoints(out_dir).checkpoints;
  const size_t keep = static_cast<size_t>(std::min<int64_t>(keep_last, static_cast<int64_t>(found.size())));
  for (size_t i = 0; i + keep < found.size(); ++i) {
    const std::string& name = found[i].second;
    if (name == latest) continue;
    std::error_code ec;
    fs::remove(fs::path(out_dir) / name, ec);
    LAT_CHECK(!ec, "prune_checkpoints: cannot remove '" << (fs::path(out_dir) / name).string() << "': "
                                                         << ec.message());
    removed.push_back(name);
  }
  return removed;
}

std::vector<std::string> clean_stale_tmp(const std::string& out_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.size() <= 4 || name.compare(name.size() - 4, 4, ".tmp") != 0) continue;
    const std::string stem = name.substr(0, name.size() - 4);
    if (!checkpoint_step(stem) && stem != kLatest && stem != "metrics.jsonl" && stem != "config.yaml") continue;
    removed.push_back(name);
  }
  for (const std::string& name : removed) {
    fs::remove(fs::path(out_dir) / name, ec);
    LAT_CHECK(!ec, "clean_stale_tmp: cannot remove '" << (fs::path(out_dir) / name).string() << "': "
                                                       << ec.message());
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

int64_t truncate_metrics(const std::string& path, int64_t step) {
  if (std::optional<std::string> kind = non_regular_file_kind(path))
    throw Error("truncate_metrics: '" + path + "' " + *kind + ", expected the run's metrics file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  in.close();

  std::string kept;
  int64_t dropped = 0;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // A line torn by a crash does not parse; a complete record missing only its '\n' is kept.
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    const bool too_new = !record.is_discarded() && record.is_object() && record.contains("step") &&
                         record["step"].is_number() && record["step"].get<double>() > static_cast<double>(step);
    if (record.is_discarded() || too_new) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  // Rewrite also when the last line lacks its '\n', so the next record starts on a new line.
  if (dropped > 0 || (!text.empty() && text.back() != '\n')) write_text_atomically(path, kept, "truncate_metrics");
  return dropped;
}

}  // namespace lat
