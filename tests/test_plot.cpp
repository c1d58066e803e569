// `lat plot` (train/plot.h): metrics.jsonl read back into curves (step, tokens and time axes,
// resumes, torn lines), the errors for missing or empty metrics and a missing gnuplot, and the
// PNG gnuplot writes: its signature and IHDR size, read back from the file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/config.h"
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
