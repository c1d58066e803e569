// Loss curves: metrics.jsonl to points, points to a gnuplot script, the script through a pipe.
#include "train/run/plot.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/regular_file.h"
#include "train/config/config_types.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

// One colour per run (matplotlib's tab10), repeated past ten runs.
const char* const kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// A gnuplot single-quoted string: '' stands for one quote, nothing else is special.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A shell single-quoted word.
std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A number of a record, or NaN when absent or null (NaN losses are written as null).
double number_or_nan(const nlohmann::json& record, const char* key) {
  auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : std::nan("");
}

// The full path of `name` on PATH, or "" when no executable of that name is there.
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return candidate.string();
  }
  return "";
}

// Ignores SIGPIPE for its lifetime, so that a gnuplot that died early makes the writes to its
// pipe fail (reported with its own message) instead of killing lat.
class IgnoreSigpipe {
 public:
  IgnoreSigpipe() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &previous_);
  }
  ~IgnoreSigpipe() { sigaction(SIGPIPE, &previous_, nullptr); }
  IgnoreSigpipe(const IgnoreSigpipe&) = delete;
  IgnoreSigpipe& operator=(const IgnoreSigpipe&) = delete;

 private:
  struct sigaction previous_ {};
};

// The first line of `path` that gnuplot marks as an error, else its first line.
std::string gnuplot_error(const fs::path& path) {
  std::ifstream in(path);
  std::string first, line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t^") == std::string::npos) continue;  // gnuplot's column markers
    if (first.empty()) first = line;
    if (line.find("rror") != std::string::npos) return line;
  }
  return first.empty() ? "no message" : first;
}

}  // namespace

PlotAxis parse_plot_axis(const std::string& name) {
  if (name == "step") return PlotAxis::step;
  if (name == "tokens") return PlotAxis::tokens;
  if (name == "time") return PlotAxis::time;
  throw ConfigError("plot: --x: expected step, tokens or time, got '" + name + "'");
}

RunCurves read_run_curves(const std::string& run_dir, PlotAxis x) {
  const fs::path path = fs::path(run_dir) / "metrics.jsonl";
  if (const std::optional<std::string> kind = non_regular_file_kind(path.string()))
    throw ConfigError("plot: " + path.string() + ": " + *kind + ", expected a regular file");
  std::ifstream in(path);
  if (!in) {
    std::error_code ec;
    throw ConfigError("plot: " + path.string() + ": " +
                      (fs::exists(path, ec) ? "cannot be read" : "no such file (is " + run_dir + " a run directory?)"));
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);

  // step -> (tokens_seen, cumulative time) of each train record; val records as (step, loss).
  std::map<double, std::pair<double, double>> train_at;
  std::vector<std::pair<double, double>> val_steps;
  RunCurves curves;
  curves.run_dir = run_dir;
  double time_offset = 0.0, last_time = 0.0;
  for (size_t i = 0; i < lines.size(); ++i) {
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(lines[i]);
    } catch (const nlohmann::json::parse_error&) {
      if (i + 1 == lines.size()) break;  // torn last line: the run is still writing it
      throw Error("plot: " + path.string() + ":" + std::to_string(i + 1) + ": not a JSON object");
    }
    if (!record.is_object()) throw Error("plot: " + path.string() + ":" + std::to_string(i + 1) + ": not a JSON object");
    const double step = number_or_nan(record, "step");
    if (std::isnan(step)) continue;
    if (record.contains("loss")) {
      const double loss = number_or_nan(record, "loss");
      double time = number_or_nan(record, "time_s");
      // time_s counts from each process's first step: a resumed run starts again near 0.
      if (time < last_time) time_offset += last_time;
      last_time = time;
      train_at[step] = {number_or_nan(record, "tokens_seen"), time + time_offset};
      const double at = x == PlotAxis::step ? step : x == PlotAxis::tokens ? train_at[step].first : train_at[step].second;
      if (std::isfinite(loss) && std::isfinite(at)) curves.train.emplace_back(at, loss);
    } else if (record.contains("val_loss")) {
      const double loss = number_or_nan(record, "val_loss");
      if (std::isfinite(loss)) val_steps.emplace_back(step, loss);
    }
  }
  for (const auto& [step, loss] : val_steps) {
    if (x == PlotAxis::step) {
      curves.val.emplace_back(step, loss);
      continue;
    }
    if (train_at.empty()) continue;
    auto value = [&](const std::pair<double, double>& v) { return x == PlotAxis::tokens ? v.first : v.second; };
    auto above = train_at.lower_bound(step);
    double at;
    if (above == train_at.end()) {
      const auto& [last_step, last] = *train_at.rbegin();
      at = value(last) * step / last_step;
    } else {
      const double step1 = above->first, x1 = value(above->second);
      const double step0 = above == train_at.begin() ? 0.0 : std::prev(above)->first;
      const double x0 = above == train_at.begin() ? 0.0 : value(std::prev(above)->second);
      at = step1 == step0 ? x1 : x0 + (x1 - x0) * (step - step0) / (step1 - step0);
    }
    if (std::isfinite(at)) curves.val.emplace_back(at, loss);
  }
  if (curves.train.empty() && curves.val.empty())
    throw ConfigError("plot: " + path.string() + ": no loss records" + (lines.empty() ? " (empty)" : ""));
  return curves;
}

std::string gnuplot_script(const std::vector<RunCurves>& runs, PlotAxis x, const std::string& png_path) {
  // A log scale once the losses span a decade (gnuplot labels only whole decades there).
  double low = std::numeric_limits<double>::infinity(), high = 0.0;
  for (const RunCurves& run : runs)
    for (const auto* points : {&run.train, &run.val})
      for (const auto& point : *points) {
        low = std::min(low, point.second);
        high = std::max(high, point.second);
      }
  const bool log_scale = low > 0 && high >= 10 * low;
  std::ostringstream s;
  s.precision(10);
  const std::string size = "size " + std::to_string(kPlotWidth) + "," + std::to_string(kPlotHeight);
  // noenhanced: run directories are shown as they are (no _ subscripts).
  s << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
    << "  set terminal pngcairo " << size << " noenhanced font 'sans,11'\n"
    << "} else {\n"
    << "  set terminal png " << size << " noenhanced\n"
    << "}\n"
    << "set output " << quoted(png_path) << "\n"
    << "set title 'train and val loss'\n"
    << "set xlabel "
    << quoted(x == PlotAxis::step ? "step" : x == PlotAxis::tokens ? "training targets seen" : "wall time (s)") << "\n"
    << "set ylabel " << quoted(log_scale ? "loss (nats per target, log scale)" : "loss (nats per target)") << "\n"
    << (log_scale ? "set logscale y\n" : "")
    << "set autoscale xfix\n"
    << "set autoscale yfix\n"  // the data's range, not whole decades; a margin instead:
    << "set offsets 0, 0, graph 0.05, graph 0.05\n"
    << "set format y '%g'\n"
    << "set grid xtics ytics\n"
    << "set key outside right top\n";
  if (x == PlotAxis::tokens) s << "set format x '%.0s%c'\n";
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const auto& [name, points] : {std::pair{"train", &runs[r].train}, std::pair{"val", &runs[r].val}}) {
      if (points->empty()) continue;
      s << "$" << name << r << " << EOD\n";
      for (const auto& [px, py] : *points) s << px << " " << py << "\n";
      s << "EOD\n";
    }
  }
  std::vector<std::string> plots;
  for (size_t r = 0; r < runs.size(); ++r) {
    const std::string colour = std::string("lc rgb '") + kColours[r % std::size(kColours)] + "'";
    // The legend names each run once: on its train line, or its val line when it has no train records.
    const std::string title = "title " + quoted(runs[r].run_dir);
    if (!runs[r].train.empty()) plots.push_back("$train" + std::to_string(r) + " using 1:2 with lines lw 2 " + colour + " " + title);
    if (!runs[r].val.empty())
      plots.push_back("$val" + std::to_string(r) + " using 1:2 with linespoints dt 2 pt 7 ps 0.8 lw 1.5 " + colour + " " +
                      (runs[r].train.empty() ? title : "notitle"));
  }
  plots.push_back("keyentry with lines lw 2 lc rgb 'black' title 'train loss'");
  plots.push_back("keyentry with linespoints dt 2 pt 7 ps 0.8 lw 1.5 lc rgb 'black' title 'val loss'");
  s << "plot ";
  for (size_t i = 0; i < plots.size(); ++i) s << (i ? ", \\\n     " : "") << plots[i];
  s << "\nunset output\n";
  return s.str();
}

namespace {

/// The picture's path must name a file in an existing directory, checked before gnuplot runs so
/// that the error is one line and nothing is left behind. Throws ConfigError.
/// The name must end in .png, and an existing file there must be a PNG: --out never replaces
/// a checkpoint, metrics.jsonl or any other file of a run.
void check_output_path(const fs::path& out) {
  std::error_code ec;
  if (fs::is_directory(out, ec))
    throw ConfigError("plot: --out: expected a PNG file name, got the directory '" + out.string() + "'");
  std::string extension = out.extension().string();
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (extension != ".png")
    throw ConfigError("plot: --out: expected a file name ending in .png, got '" + out.string() + "'");
  if (fs::exists(out, ec)) {
    if (const std::optional<std::string> kind = non_regular_file_kind(out.string()))
      throw ConfigError("plot: --out: '" + out.string() + "' " + *kind + ", expected a PNG file to replace");
    static constexpr char kPngSignature[] = "\x89PNG\r\n\x1a\n";
    char head[8] = {};
    std::ifstream(out, std::ios::binary).read(head, sizeof head);
    if (std::memcmp(head, kPngSignature, sizeof head) != 0)
      throw ConfigError("plot: --out: '" + out.string() + "' exists and is not a PNG: refusing to replace it");
  }
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!fs::is_directory(parent, ec))
    throw ConfigError("plot: --out: the directory '" + parent.string() + "' of '" + out.string() +
                      "' does not exist");
}

}  // namespace

std::string plot_runs(const PlotOptions& options) {
  if (options.run_dirs.empty()) throw ConfigError("plot: expected at least one RUN_DIR");
  const PlotAxis x = parse_plot_axis(options.x);
  std::vector<RunCurves> runs;
  for (const std::string& dir : options.run_dirs) runs.push_back(read_run_curves(dir, x));

  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty())
    throw Error("plot: gnuplot not found on PATH: install the Debian package gnuplot-nox (apt-get install gnuplot-nox)");

  const fs::path out = options.out.empty() ? fs::path(options.run_dirs.front()) / "loss.png" : fs::path(options.out);
  check_output_path(out);
  const fs::path tmp = out.string() + ".tmp";
  const fs::path log = out.string() + ".gnuplot.log";
  const std::string script = gnuplot_script(runs, x, tmp.string());
  int status = -1;
  bool written = false;
  {
    IgnoreSigpipe guard;
    const std::string command = shell_quoted(gnuplot) + " 2>" + shell_quoted(log.string());
    FILE* pipe = ::popen(command.c_str(), "w");
    LAT_CHECK(pipe != nullptr, "plot: cannot start " << gnuplot);
    written = std::fwrite(script.data(), 1, script.size(), pipe) == script.size() && std::fflush(pipe) == 0;
    status = ::pclose(pipe);
  }
  std::error_code ec;
  if (!written || status != 0 || !fs::exists(tmp, ec) || fs::file_size(tmp, ec) == 0) {
    const std::string message = gnuplot_error(log);
    fs::remove(tmp, ec);
    fs::remove(log, ec);
    throw Error("plot: gnuplot failed drawing " + out.string() + ": " + message);
  }
  fs::remove(log, ec);
  fs::rename(tmp, out, ec);
  if (ec) {
    const std::string reason = ec.message();
    fs::remove(tmp, ec);
    throw Error("plot: cannot rename '" + tmp.string() + "' to '" + out.string() + "': " + reason);
  }
  return out.string();
}

}  // namespace lat
