// `lat plot`: the train and val loss of runs, read back from their metrics.jsonl
// (train/run/metrics.h writes it) and drawn into a PNG by gnuplot (Debian package gnuplot-nox,
// run by train/run/gnuplot.h without a shell; run directories reach it only as data).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace lat {

/// What the x axis counts: optimizer steps, training targets seen (tokens_seen), or wall
/// time in seconds (time_s, made cumulative over resumes).
enum class PlotAxis { step, tokens, time };

/// "step", "tokens" or "time" as a PlotAxis; throws ConfigError naming --x for anything else.
PlotAxis parse_plot_axis(const std::string& name);

/// One run's curves: (x, loss) points in file order.
struct RunCurves {
  std::string run_dir;
  std::vector<std::pair<double, double>> train;  ///< {"step", "loss", ...} records
  std::vector<std::pair<double, double>> val;    ///< {"step", "val_loss", ...} records over val batches
  /// {"step", "val_loss", ..., "whole_split": true} records: the final eval over the whole val
  /// split, a different measurement from the batches' one, so never joined to `val`.
  std::vector<std::pair<double, double>> val_whole_split;
};

/// Reads `run_dir`/metrics.jsonl. Val records are placed on the tokens and time axes by
/// linear interpolation between the train records around their step (from step 0 at 0;
/// past the last train record, in proportion to it); with no train record they are left
/// out there. Blank lines, null values and a torn last line (one without its '\n' that does
/// not parse: a run still writing it) are skipped. Throws ConfigError naming the file when it
/// is missing or has no loss record, or when --x tokens (time) is asked of records that lack
/// tokens_seen (time_s); lat::Error naming file:line (counting every line) for a line that is
/// not a JSON object.
RunCurves read_run_curves(const std::string& run_dir, PlotAxis x);

/// The gnuplot script that draws `runs` to gnuplot's stdout: pngcairo (png where gnuplot
/// lacks it), kPlotWidth x kPlotHeight pixels, the loss axis logarithmic when the losses span
/// a factor of 10 or more (linear otherwise); one colour per run, its train loss a solid line
/// titled with its directory, its val loss dashed with points, its whole-split val loss a
/// point of its own. Every run directory is written by gnuplot_string (data, never a
/// command). On the tokens axis the counts are shown in thousands, millions or billions
/// (named in the axis label) once they reach 10^4, 10^6 or 10^9.
std::string gnuplot_script(const std::vector<RunCurves>& runs, PlotAxis x);

constexpr int kPlotWidth = 960;
constexpr int kPlotHeight = 600;

/// `lat plot RUN_DIR [RUN_DIR ...] [--out FILE.png] [--x step|tokens|time]`.
struct PlotOptions {
  std::vector<std::string> run_dirs;  ///< at least one
  std::string out;                    ///< empty = run_dirs[0]/loss.png
  std::string x = "step";
};

/// Draws the runs and returns the PNG's path. gnuplot writes the PNG to its stdout, which is
/// `out`.tmp (opened by lat), renamed to `out` once complete, so a failed plot leaves no
/// file. Throws ConfigError (CLI exit 2) for no run directory, a bad --x, a bad --out or a
/// metrics.jsonl read_run_curves refuses; lat::Error when gnuplot is not on PATH (naming the package gnuplot-nox) or fails (with its first error line).
std::string plot_runs(const PlotOptions& options);

}  // namespace lat
