// Loss curves: metrics.jsonl to points, points to a gnuplot script, the script through
// train/run/gnuplot.h into OUT.tmp, renamed to OUT.
#include "train/run/plot.h"

#include <algorithm>
#include <cctype>
#include <cmath>
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
#include "train/run/gnuplot.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

// One colour per run (matplotlib's tab10), repeated past ten runs.
const char* const kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// The styles of the three kinds of curve, shared by each run's curves and the legend's keys.
const char* const kTrainStyle = "with lines lw 2";
const char* const kValStyle = "with linespoints dt 2 pt 7 ps 0.8 lw 1.5";
const char* const kWholeSplitStyle = "with points pt 5 ps 1.4";

// A number of a record, or NaN when absent or null (NaN losses are written as null).
double number_or_nan(const nlohmann::json& record, const char* key) {
  auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : std::nan("");
}

// Whether the file at `path` begins with the 8-byte PNG signature.
bool starts_with_png_signature(const fs::path& path) {
  static constexpr char kPngSignature[] = "\x89PNG\r\n\x1a\n";
  char head[8] = {};
  std::ifstream(path, std::ios::binary).read(head, sizeof head);
  return std::memcmp(head, kPngSignature, sizeof head) == 0;
}

// The unit the tokens axis counts in: its numbers stay below 10^4 (gnuplot's own "%c" prefixes
// round 1.5k and 2.5k to the same label).
struct TokenUnit {
  double size;
  const char* name;
};

TokenUnit token_unit(double largest) {
  if (largest >= 1e9) return {1e9, " (billions)"};
  if (largest >= 1e6) return {1e6, " (millions)"};
  if (largest >= 1e4) return {1e3, " (thousands)"};
  return {1, ""};
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
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    throw ConfigError("plot: " + path.string() + ": " +
                      (fs::exists(path, ec) ? "cannot be read" : "no such file (is " + run_dir + " a run directory?)"));
  }

  // step -> (tokens_seen, cumulative time) of each train record.
  std::map<double, std::pair<double, double>> train_at;
  struct ValRecord {
    double step, loss;
    bool whole_split;
  };
  std::vector<ValRecord> val_records;
  RunCurves curves;
  curves.run_dir = run_dir;
  bool any_record = false;   // a line that is not blank
  bool any_loss = false;     // a record with a finite loss or val_loss
  double time_offset = 0.0, last_time = 0.0;
  int64_t line_number = 0;  // every line counts, blank ones too, as an editor shows them
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const bool unterminated = in.eof();
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    any_record = true;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() && unterminated) break;  // torn last line: the run is still writing it
    if (!record.is_object())
      throw Error("plot: " + path.string() + ":" + std::to_string(line_number) + ": not a JSON object");
    const double step = number_or_nan(record, "step");
    if (std::isnan(step)) continue;
    if (record.contains("loss")) {
      const double loss = number_or_nan(record, "loss");
      double time = number_or_nan(record, "time_s");
      if (std::isfinite(time)) {
        // time_s counts from each process's first step: a resumed run starts again near 0.
        if (time < last_time) time_offset += last_time;
        last_time = time;
      }
      train_at[step] = {number_or_nan(record, "tokens_seen"), time + time_offset};
      const double at = x == PlotAxis::step ? step : x == PlotAxis::tokens ? train_at[step].first : train_at[step].second;
      any_loss = any_loss || std::isfinite(loss);
      if (std::isfinite(loss) && std::isfinite(at)) curves.train.emplace_back(at, loss);
    } else if (record.contains("val_loss")) {
      const double loss = number_or_nan(record, "val_loss");
      const auto whole_split = record.find("whole_split");
      any_loss = any_loss || std::isfinite(loss);
      if (std::isfinite(loss))
        val_records.push_back({step, loss, whole_split != record.end() && *whole_split == true});
    }
  }
  for (const ValRecord& v : val_records) {
    auto& points = v.whole_split ? curves.val_whole_split : curves.val;
    if (x == PlotAxis::step) {
      points.emplace_back(v.step, v.loss);
      continue;
    }
    if (train_at.empty()) continue;
    auto value = [&](const std::pair<double, double>& p) { return x == PlotAxis::tokens ? p.first : p.second; };
    auto above = train_at.lower_bound(v.step);
    double at;
    if (above == train_at.end()) {
      const auto& [last_step, last] = *train_at.rbegin();
      at = value(last) * v.step / last_step;
    } else {
      const double step1 = above->first, x1 = value(above->second);
      const double step0 = above == train_at.begin() ? 0.0 : std::prev(above)->first;
      const double x0 = above == train_at.begin() ? 0.0 : value(std::prev(above)->second);
      at = step1 == step0 ? x1 : x0 + (x1 - x0) * (v.step - step0) / (step1 - step0);
    }
    if (std::isfinite(at)) points.emplace_back(at, v.loss);
  }
  if (curves.train.empty() && curves.val.empty() && curves.val_whole_split.empty()) {
    if (any_loss && x != PlotAxis::step) {
      const std::string key = x == PlotAxis::tokens ? "tokens_seen" : "time_s";
      const std::string axis = x == PlotAxis::tokens ? "tokens" : "time";
      throw ConfigError("plot: " + path.string() + ": the records lack " + key + ", which --x " + axis +
                        " needs (--x step plots them)");
    }
    throw ConfigError("plot: " + path.string() + ": no loss records" + (any_record ? "" : " (empty)"));
  }
  return curves;
}

std::string gnuplot_script(const std::vector<RunCurves>& runs, PlotAxis x) {
  // A log scale once the losses span a decade (gnuplot labels only whole decades there).
  double low = std::numeric_limits<double>::infinity(), high = 0.0, largest_x = 0.0;
  for (const RunCurves& run : runs)
    for (const auto* points : {&run.train, &run.val, &run.val_whole_split})
      for (const auto& [px, py] : *points) {
        low = std::min(low, py);
        high = std::max(high, py);
        largest_x = std::max(largest_x, std::abs(px));
      }
  const bool log_scale = low > 0 && high >= 10 * low;
  const TokenUnit unit = x == PlotAxis::tokens ? token_unit(largest_x) : TokenUnit{1, ""};
  const std::string xlabel = x == PlotAxis::step     ? "step"
                             : x == PlotAxis::tokens ? std::string("training targets seen") + unit.name
                                                     : "wall time (s)";
  std::ostringstream s;
  s.precision(10);
  const std::string size = "size " + std::to_string(kPlotWidth) + "," + std::to_string(kPlotHeight);
  // No `set output`: the image goes to gnuplot's stdout, a file lat opened.
  // noenhanced: run directories are shown as they are (no _ subscripts).
  s << "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
    << "  set terminal pngcairo " << size << " noenhanced font \"sans,11\"\n"
    << "} else {\n"
    << "  set terminal png " << size << " noenhanced\n"
    << "}\n"
    << "set title \"train and val loss\"\n"
    << "set xlabel " << gnuplot_string(xlabel) << "\n"
    << "set ylabel "
    << gnuplot_string(log_scale ? "loss (nats per target, log scale)" : "loss (nats per target)") << "\n"
    << (log_scale ? "set logscale y\n" : "")
    << "set autoscale xfix\n"
    << "set autoscale yfix\n"  // the data's range, not whole decades; a margin instead:
    << "set offsets 0, 0, graph 0.05, graph 0.05\n"
    << "set format x \"%g\"\n"
    << "set format y \"%g\"\n"
    << "set grid xtics ytics\n"
    << "set key outside right top\n";
  struct Series {
    const char* name;
    const std::vector<std::pair<double, double>>* points;
    const char* style;
  };
  std::vector<std::string> plots;
  bool any_train = false, any_val = false, any_whole_split = false;
  for (size_t r = 0; r < runs.size(); ++r) {
    const std::string colour = std::string("lc rgb \"") + kColours[r % std::size(kColours)] + "\"";
    bool titled = false;  // the legend names each run once, on its first curve
    for (const Series& series : {Series{"train", &runs[r].train, kTrainStyle}, Series{"val", &runs[r].val, kValStyle},
                                 Series{"whole", &runs[r].val_whole_split, kWholeSplitStyle}}) {
      if (series.points->empty()) continue;
      std::string block = "$";
      block += series.name;
      block += std::to_string(r);
      s << block << " << EOD\n";
      for (const auto& [px, py] : *series.points) s << px / unit.size << " " << py << "\n";
      s << "EOD\n";
      plots.push_back(block + " using 1:2 " + series.style + " " + colour + " " +
                      (titled ? "notitle" : "title " + gnuplot_string(runs[r].run_dir)));
      titled = true;
      any_train = any_train || series.points == &runs[r].train;
      any_val = any_val || series.points == &runs[r].val;
      any_whole_split = any_whole_split || series.points == &runs[r].val_whole_split;
    }
  }
  const std::string black = " lc rgb \"black\" title ";
  if (any_train) plots.push_back(std::string("keyentry ") + kTrainStyle + black + gnuplot_string("train loss"));
  if (any_val) plots.push_back(std::string("keyentry ") + kValStyle + black + gnuplot_string("val loss"));
  if (any_whole_split)
    plots.push_back(std::string("keyentry ") + kWholeSplitStyle + black + gnuplot_string("val loss, whole split"));
  s << "plot ";
  for (size_t i = 0; i < plots.size(); ++i) s << (i ? ", \\\n     " : "") << plots[i];
  s << "\n";
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
    if (!starts_with_png_signature(out))
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
  // Only a regular file there is ours to remove: a symlink or directory of that name is refused
  // by run_gnuplot and left alone.
  auto remove_tmp = [&] {
    std::error_code ec;
    if (fs::is_regular_file(fs::symlink_status(tmp, ec))) fs::remove(tmp, ec);
  };
  GnuplotOutcome outcome;
  try {
    outcome = run_gnuplot(gnuplot, gnuplot_script(runs, x), tmp.string());
  } catch (const Error&) {
    remove_tmp();
    throw;
  }
  if (!outcome.succeeded || !starts_with_png_signature(tmp)) {
    remove_tmp();
    throw Error("plot: gnuplot failed drawing " + out.string() + ": " +
                (outcome.succeeded ? std::string("it wrote no PNG") : outcome.error));
  }
  std::error_code ec;
  fs::rename(tmp, out, ec);
  if (ec) {
    const std::string reason = ec.message();
    remove_tmp();
    throw Error("plot: cannot rename '" + tmp.string() + "' to '" + out.string() + "': " + reason);
  }
  return out.string();
}

}  // namespace lat
