// `lat plot RUN_DIR [RUN_DIR ...] [--out FILE.png] [--x step|tokens|time]`.
#include <iostream>
#include <memory>

#include "train/cli/command.h"
#include "train/run/plot.h"

namespace lat::cli {

Command add_plot_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("plot", "Draw the train and val loss of runs into a PNG (with gnuplot)");
  auto o = std::make_shared<PlotOptions>();
  sub->add_option("run_dirs", o->run_dirs, "run directories (each with its metrics.jsonl)")->required();
  sub->add_option("--out", o->out, "the PNG to write (default: the first RUN_DIR/loss.png)");
  sub->add_option("--x", o->x, "x axis: optimizer steps, training targets seen, or wall time")
      ->check(CLI::IsMember({"step", "tokens", "time"}))
      ->capture_default_str();
  sub->footer("One colour per run (the legend names its directory): train loss solid, val loss dashed with points, "
              "on a log scale when they span a factor of 10. Needs gnuplot (Debian: gnuplot-nox). Prints the PNG's path.");
  return {sub, [o] {
            std::cout << plot_runs(*o) << std::endl;
            return 0;
          }};
}

}  // namespace lat::cli
