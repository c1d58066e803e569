// `lat plot` (train/plot.h): metrics.jsonl read back into curves (step, tokens and time axes,
// resumes, torn lines, whole-split evals), the errors for missing or empty metrics and a missing
// gnuplot, the PNG gnuplot writes (its signature and IHDR size, read back from the file), and
// run directories and --out names holding gnuplot and shell commands that must stay names.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/config.h"
#include "train/run/gnuplot.h"
#include "train/run/plot.h"

namespace fs = std::filesystem;
using namespace lat;
using lat::testing::contains;
using lat::testing::expect_error;

namespace {

using Points = std::vector<std::pair<double, double>>;

// Two train records 10 steps apart, an eval between them and one after the last; then a
// resumed process whose time_s starts again.
const char* const kMetrics =
    R"({"step":10,"loss":4.0,"lr":0.001,"grad_norm":1.0,"tokens_seen":1000,"tokens_per_s":100.0,"time_s":10.0})" "\n"
    R"({"step":15,"val_loss":3.5,"val_bpc":5.0})" "\n"
    R"({"step":20,"loss":3.0,"lr":0.001,"grad_norm":null,"tokens_seen":2000,"tokens_per_s":100.0,"time_s":20.0})" "\n"
    R"({"step":30,"loss":2.0,"lr":0.001,"grad_norm":1.0,"tokens_seen":3000,"tokens_per_s":100.0,"time_s":5.0})" "\n"
    R"({"step":40,"val_loss":1.5,"val_bpc":2.0})" "\n";

// Width and height from a PNG's IHDR chunk (bytes 16-23, big-endian), after checking the
// 8-byte signature and that IHDR is the first chunk.
struct PngSize {
  uint32_t width = 0, height = 0;
};

PngSize png_size(const std::string& bytes) {
  EXPECT_GE(bytes.size(), 24u);
  if (bytes.size() < 24) return {};
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

// Sets PATH for its lifetime.
class ScopedPath {
 public:
  explicit ScopedPath(const std::string& value) : saved_(std::getenv("PATH") ? std::getenv("PATH") : "") {
    setenv("PATH", value.c_str(), 1);
  }
  ~ScopedPath() { setenv("PATH", saved_.c_str(), 1); }

 private:
  std::string saved_;
};

class PlotTest : public lat::testing::TempDirTest {
 protected:
  std::string run_dir(const std::string& name, const std::string& metrics) const {
    fs::create_directories(dir_ / name);
    lat::testing::write_bytes(dir_ / name / "metrics.jsonl", metrics);
    return path(name);
  }

  // gnuplot is one of the packages tools/install_deps.sh installs; CI must have it.
  void require_gnuplot() {
    if (std::system("command -v gnuplot > /dev/null 2>&1") == 0) return;
    if (std::getenv("CI") != nullptr) FAIL() << "gnuplot not found (tools/install_deps.sh installs gnuplot-nox)";
    GTEST_SKIP() << "gnuplot not found: apt-get install gnuplot-nox";
  }
};

}  // namespace

TEST_F(PlotTest, CurvesOnEachAxisWithValPointsPlacedBetweenTrainRecords) {
  const std::string run = run_dir("run", kMetrics);
  const RunCurves steps = read_run_curves(run, PlotAxis::step);
  EXPECT_EQ(steps.run_dir, run);
  EXPECT_EQ(steps.train, (Points{{10, 4.0}, {20, 3.0}, {30, 2.0}}));
  EXPECT_EQ(steps.val, (Points{{15, 3.5}, {40, 1.5}}));
  // tokens: step 15 halfway between 1000 and 2000; step 40 past the last record: 3000 * 40/30.
  const RunCurves tokens = read_run_curves(run, PlotAxis::tokens);
  EXPECT_EQ(tokens.train, (Points{{1000, 4.0}, {2000, 3.0}, {3000, 2.0}}));
  ASSERT_EQ(tokens.val.size(), 2u);
  EXPECT_DOUBLE_EQ(tokens.val[0].first, 1500);
  EXPECT_DOUBLE_EQ(tokens.val[1].first, 4000);
  // time: the resumed process's 5 s come after the first one's 20 s.
  const RunCurves time = read_run_curves(run, PlotAxis::time);
  EXPECT_EQ(time.train, (Points{{10, 4.0}, {20, 3.0}, {25, 2.0}}));
  ASSERT_EQ(time.val.size(), 2u);
  EXPECT_DOUBLE_EQ(time.val[0].first, 15);
  EXPECT_DOUBLE_EQ(time.val[1].first, 25 * 40.0 / 30.0);
}

TEST_F(PlotTest, TornLastLineIsSkippedAndABadLineInsideIsAnErrorNamingIt) {
  const std::string torn = run_dir("torn", std::string(kMetrics) + R"({"step":50,"lo)");
  EXPECT_EQ(read_run_curves(torn, PlotAxis::step).train.size(), 3u);
  const std::string bad = run_dir("bad", std::string("not json\n") + kMetrics);
  expect_error([&] { read_run_curves(bad, PlotAxis::step); }, {"bad/metrics.jsonl:1"});
}

TEST_F(PlotTest, MissingOrEmptyMetricsAreConfigErrorsNamingTheFile) {
  fs::create_directories(dir_ / "no_metrics");
  expect_error<ConfigError>([&] { read_run_curves(path("no_metrics"), PlotAxis::step); },
                            {path("no_metrics") + "/metrics.jsonl: no such file"});
  const std::string empty = run_dir("empty", "");
  expect_error<ConfigError>([&] { read_run_curves(empty, PlotAxis::step); }, {"empty/metrics.jsonl: no loss records"});
  expect_error<ConfigError>([] { parse_plot_axis("epochs"); }, {"--x"});
}

TEST_F(PlotTest, MissingGnuplotIsAnErrorNamingThePackage) {
  const std::string run = run_dir("run", kMetrics);
  fs::create_directories(dir_ / "empty_bin");
  ScopedPath path_without_gnuplot(path("empty_bin"));
  expect_error([&] { plot_runs({{run}, "", "step"}); }, {"gnuplot-nox"});
  EXPECT_FALSE(fs::exists(dir_ / "run" / "loss.png"));
}

TEST_F(PlotTest, OutThatIsADirectoryOrInAMissingDirectoryIsAConfigErrorLeavingNothing) {
  const std::string run = run_dir("run", kMetrics);
  expect_error<ConfigError>([&] { plot_runs({{run}, path("run"), "step"}); },
                            {"--out: expected a PNG file name, got the directory"});
  expect_error<ConfigError>([&] { plot_runs({{run}, path("nodir/sub/x.png"), "step"}); },
                            {"the directory '" + path("nodir/sub") + "'", "does not exist"});
  EXPECT_FALSE(fs::exists(dir_ / "run.tmp"));
  EXPECT_FALSE(fs::exists(dir_ / "nodir"));
}

TEST_F(PlotTest, OutNeverReplacesARunFileOrAnotherNonPng) {
  const std::string run = run_dir("run", kMetrics);
  const fs::path ckpt = fs::path(run) / "ckpt_00000030.h5";
  std::ofstream(ckpt) << "checkpoint bytes";
  expect_error<ConfigError>([&] { plot_runs({{run}, ckpt.string(), "step"}); },
                            {"--out: expected a file name ending in .png, got '" + ckpt.string() + "'"});
  expect_error<ConfigError>([&] { plot_runs({{run}, (fs::path(run) / "metrics.jsonl").string(), "step"}); },
                            {"ending in .png"});
  const fs::path fake = fs::path(run) / "notes.png";
  std::ofstream(fake) << "not a picture";
  expect_error<ConfigError>([&] { plot_runs({{run}, fake.string(), "step"}); },
                            {"'" + fake.string() + "' exists and is not a PNG: refusing to replace it"});
  EXPECT_EQ(lat::testing::read_bytes(ckpt), "checkpoint bytes");
  EXPECT_EQ(lat::testing::read_bytes(fake), "not a picture");
}

TEST_F(PlotTest, PngOfSeveralRunsHasThePngSignatureAndItsSize) {
  require_gnuplot();
  const std::string a = run_dir("run_a", kMetrics), b = run_dir("run_b", kMetrics);
  // Default output: the first run's loss.png.
  EXPECT_EQ(plot_runs({{a, b}, "", "tokens"}), (fs::path(a) / "loss.png").string());
  const PngSize size = png_size(lat::testing::read_bytes(fs::path(a) / "loss.png"));
  EXPECT_EQ(size.width, static_cast<uint32_t>(kPlotWidth));
  EXPECT_EQ(size.height, static_cast<uint32_t>(kPlotHeight));
  EXPECT_FALSE(fs::exists(fs::path(a) / "loss.png.tmp"));
  EXPECT_EQ(plot_runs({{a}, path("time.png"), "time"}), path("time.png"));
  EXPECT_EQ(png_size(lat::testing::read_bytes(path("time.png"))).width, static_cast<uint32_t>(kPlotWidth));
}

TEST_F(PlotTest, CommandPrintsThePathAndExitsTwoOnMissingMetrics) {
  require_gnuplot();
  const std::string run = run_dir("run", kMetrics);
  auto lat = [&](const std::string& args) {
    const std::string command = std::string("'") + LAT_BINARY_DIR + "/lat' plot " + args + " >'" + path("out") +
                                "' 2>'" + path("err") + "'";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(lat("'" + run + "' --x step"), 0) << lat::testing::read_bytes(path("err"));
  EXPECT_EQ(lat::testing::read_bytes(path("out")), run + "/loss.png\n");
  EXPECT_EQ(png_size(lat::testing::read_bytes(fs::path(run) / "loss.png")).height, static_cast<uint32_t>(kPlotHeight));

  fs::create_directories(dir_ / "no_metrics");
  EXPECT_EQ(lat("'" + run + "' '" + path("no_metrics") + "'"), 2);
  const std::string err = lat::testing::read_bytes(path("err"));
  EXPECT_EQ(err.rfind("error: ", 0), 0u) << err;
  EXPECT_TRUE(contains(err, "no_metrics/metrics.jsonl")) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST_F(PlotTest, LineNumbersCountEveryLineAndOnlyAnUnterminatedLastLineIsTorn) {
  // Lines 1 and 3 blank, 2 whitespace, 4-8 kMetrics, 9 garbage.
  const std::string head = std::string("\n \t\r\n\n") + kMetrics;
  expect_error([&] { read_run_curves(run_dir("middle", head + "garbage\n" + kMetrics), PlotAxis::step); },
               {"middle/metrics.jsonl:9: not a JSON object"});
  // A garbage last line with its '\n' was written whole: an error, not a torn line.
  expect_error([&] { read_run_curves(run_dir("last", head + "garbage\n"), PlotAxis::step); },
               {"last/metrics.jsonl:9: not a JSON object"});
  expect_error([&] { read_run_curves(run_dir("array", head + "[1, 2]\n"), PlotAxis::step); },
               {"array/metrics.jsonl:9: not a JSON object"});
  const RunCurves torn = read_run_curves(run_dir("torn", head + R"({"step":50,"lo)"), PlotAxis::step);
  EXPECT_EQ(torn.train, (Points{{10, 4.0}, {20, 3.0}, {30, 2.0}}));
  expect_error<ConfigError>([&] { read_run_curves(run_dir("blank", "\n  \n"), PlotAxis::step); },
                            {"blank/metrics.jsonl: no loss records (empty)"});
}

TEST_F(PlotTest, TokensOrTimeAxisOfRecordsWithoutThemNamesTheMissingKey) {
  const std::string run = run_dir("bare", R"({"step":10,"loss":4.0})" "\n" R"({"step":20,"val_loss":3.0})" "\n");
  EXPECT_EQ(read_run_curves(run, PlotAxis::step).train, (Points{{10, 4.0}}));
  expect_error<ConfigError>([&] { read_run_curves(run, PlotAxis::tokens); },
                            {"bare/metrics.jsonl: the records lack tokens_seen, which --x tokens needs (--x step plots them)"});
  expect_error<ConfigError>([&] { read_run_curves(run, PlotAxis::time); },
                            {"bare/metrics.jsonl: the records lack time_s, which --x time needs"});
}

TEST_F(PlotTest, WholeSplitEvalIsASeriesOfItsOwn) {
  // A fine-tune: val loss over eval batches at step 0, then the final eval over the whole split.
  const std::string run = run_dir(
      "finetune", R"({"step":0,"val_loss":3.5,"val_bpc":5.0})" "\n"
                  R"({"step":10,"loss":3.0,"lr":0.001,"grad_norm":1.0,"tokens_seen":1000000,"tokens_per_s":1.0,"time_s":1.0})" "\n"
                  R"({"step":20,"loss":2.0,"lr":0.001,"grad_norm":1.0,"tokens_seen":2000000,"tokens_per_s":1.0,"time_s":2.0})" "\n"
                  R"({"step":20,"val_loss":2.5,"val_bpc":3.6,"whole_split":true})" "\n");
  const RunCurves steps = read_run_curves(run, PlotAxis::step);
  EXPECT_EQ(steps.val, (Points{{0, 3.5}}));
  EXPECT_EQ(steps.val_whole_split, (Points{{20, 2.5}}));
  const RunCurves tokens = read_run_curves(run, PlotAxis::tokens);
  EXPECT_EQ(tokens.val, (Points{{0, 3.5}}));
  EXPECT_EQ(tokens.val_whole_split, (Points{{2000000, 2.5}}));

  // Millions of tokens are labelled as millions: plain %g ticks, never two ticks both "2M".
  const std::string script = gnuplot_script({tokens}, PlotAxis::tokens);
  EXPECT_TRUE(contains(script, "set xlabel \"training targets seen \\050millions\\051\"\n")) << script;
  EXPECT_TRUE(contains(script, "set format x \"%g\"\n")) << script;
  EXPECT_TRUE(contains(script, "$train0 << EOD\n1 3\n2 2\nEOD\n")) << script;
  EXPECT_TRUE(contains(script, "$val0 << EOD\n0 3.5\nEOD\n")) << script;
  EXPECT_TRUE(contains(script, "$whole0 << EOD\n2 2.5\nEOD\n")) << script;
  EXPECT_TRUE(contains(script, "$whole0 using 1:2 with points")) << script;
  EXPECT_TRUE(contains(script, "title \"val loss\\054 whole split\"")) << script;
  EXPECT_TRUE(contains(gnuplot_script({read_run_curves(run_dir("small", kMetrics), PlotAxis::tokens)}, PlotAxis::tokens),
                       "set xlabel \"training targets seen\"\n"));

  require_gnuplot();
  EXPECT_EQ(png_size(lat::testing::read_bytes(plot_runs({{run}, "", "tokens"}))).width, static_cast<uint32_t>(kPlotWidth));
}

TEST_F(PlotTest, GnuplotStringEscapesEveryByteButPlainOnesAndGnuplotReadsItBack) {
  EXPECT_EQ(gnuplot_string("run_1/a-b.c Z"), "\"run_1/a-b.c Z\"");
  EXPECT_EQ(gnuplot_string("a'\n\"\\`$@!"), "\"a\\047\\012\\042\\134\\140\\044\\100\\041\"");
  EXPECT_EQ(gnuplot_string("\xc3\xa9"), "\"\\303\\251\"");

  require_gnuplot();
  std::string every_byte;
  for (int byte = 1; byte < 256; ++byte) every_byte += static_cast<char>(byte);
  const std::string printed = path("printed");
  const GnuplotOutcome outcome = run_gnuplot(find_on_path("gnuplot"),
                                             "set print \"-\"\nprint " + gnuplot_string(every_byte) + "\n", printed);
  ASSERT_TRUE(outcome.succeeded) << outcome.error;
  EXPECT_EQ(lat::testing::read_bytes(printed), every_byte + "\n");
}

namespace {

// Runs build/lat with `args` as its arguments, no shell in between, in the directory `cwd`;
// its stdout and stderr go to the files `out` and `err`. Returns its exit status (-1 when it
// did not exit).
int run_lat_in(const fs::path& cwd, const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  const std::string program = std::string(LAT_BINARY_DIR) + "/lat";
  std::vector<std::string> words = {program};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out_fd < 0 || err_fd < 0 || ::chdir(cwd.c_str()) != 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0)
      _exit(126);
    ::execv(program.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_F(PlotTest, RunDirectoriesAndOutNamesHoldingCommandsAreOnlyNames) {
  require_gnuplot();
  // Each name holds a command that would create the marker file `pwned_<case>` in the working
  // directory if gnuplot or a shell ran it.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"newline", "a\nsystem(\"touch pwned_newline\")\nb"},
      {"single_quote", "a'\nsystem('touch pwned_single_quote')\n'b"},
      {"double_quote", "a\"\nsystem(\"touch pwned_double_quote\")\n\"b"},
      {"backslash", "a\\\"\nsystem(\"touch pwned_backslash\")\n#\\"},
      {"system", "system(\"touch pwned_system\")"},
      {"bang", "a\n!touch pwned_bang\nb"},
      {"backtick", "`touch pwned_backtick`"},
      {"dollar", "$(touch pwned_dollar)"},
      {"at_macro", "a\nx = \"system('touch pwned_at_macro')\"\n@x\nb"},
  };
  const fs::path work = dir_ / "work";
  fs::create_directories(work);
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    fs::create_directories(work / text);
    lat::testing::write_bytes(work / text / "metrics.jsonl", kMetrics);
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";

    // The default output, the run directory's loss.png.
    // A failed plot is reported and the loop goes on, so the marker check below still runs.
    const int status = run_lat_in(work, {"plot", text}, out, err);
    EXPECT_EQ(status, 0) << lat::testing::read_bytes(err);
    if (status == 0) {
      EXPECT_EQ(lat::testing::read_bytes(out), (fs::path(text) / "loss.png").string() + "\n");
      EXPECT_EQ(png_size(lat::testing::read_bytes(work / text / "loss.png")).width, static_cast<uint32_t>(kPlotWidth));
    }

    // The name as --out too, with the run given twice (its name twice in the legend).
    const std::string png = text + ".png";
    const int out_status = run_lat_in(work, {"plot", text, text, "--out", png, "--x", "tokens"}, out, err);
    EXPECT_EQ(out_status, 0) << lat::testing::read_bytes(err);
    if (out_status == 0) {
      EXPECT_EQ(lat::testing::read_bytes(out), png + "\n");
      EXPECT_EQ(png_size(lat::testing::read_bytes(work / png)).height, static_cast<uint32_t>(kPlotHeight));
    }
    EXPECT_FALSE(fs::exists(work / (png + ".tmp")));
  }
  for (const auto& entry : fs::recursive_directory_iterator(dir_))
    EXPECT_NE(entry.path().filename().string().rfind("pwned_", 0), 0u) << "a command ran: " << entry.path();
  for (const auto& [name, text] : cases) EXPECT_FALSE(fs::exists(work / ("pwned_" + name))) << name;
}
