// The thread count's choice (train/config/thread_count.h): OMP_NUM_THREADS's parsing and the
// order --threads > train.threads > OMP_NUM_THREADS > the command's default.
#include <cstdlib>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "train/config/config_types.h"
#include "train/config/thread_count.h"

namespace {

using lat::parse_omp_num_threads;

TEST(ThreadCount, OmpNumThreadsIsItsFirstEntryAndUnsetWhenEmpty) {
  EXPECT_EQ(parse_omp_num_threads(std::nullopt), std::nullopt);
  EXPECT_EQ(parse_omp_num_threads(""), std::nullopt);
  EXPECT_EQ(parse_omp_num_threads("4"), 4);
  EXPECT_EQ(parse_omp_num_threads("4,2"), 4);  // one count per nesting level; lat runs the first
  EXPECT_EQ(parse_omp_num_threads("1024"), 1024);
  EXPECT_EQ(parse_omp_num_threads(" 4 ,2"), 4);  // blanks around the entry, as libgomp allows
}

TEST(ThreadCount, BadOmpNumThreadsIsAConfigErrorNamingIt) {
  for (const char* text : {"0", "-1", "1025", "four", "4x", " ", "4 4", ",4", "99999999999"})
    lat::testing::expect_error<lat::ConfigError>(
        [&] { parse_omp_num_threads(std::string(text)); },
        {"OMP_NUM_THREADS: expected an int in [1, 1024] (or a comma list of them), got '" + std::string(text) + "'"});
}

TEST(ThreadCount, FlagBeatsConfiguredBeatsOmpNumThreadsBeatsFallback) {
  EXPECT_EQ(lat::choose_threads({.flag = 5, .configured = 7, .omp_num_threads = 3, .fallback = 2}), 5);
  EXPECT_EQ(lat::choose_threads({.flag = 0, .configured = 7, .omp_num_threads = 3, .fallback = 2}), 7);
  EXPECT_EQ(lat::choose_threads({.flag = 0, .configured = 0, .omp_num_threads = 3, .fallback = 2}), 3);
  EXPECT_EQ(lat::choose_threads({.flag = 0, .configured = 0, .omp_num_threads = std::nullopt, .fallback = 2}), 2);
  // At least one thread.
  EXPECT_EQ(lat::choose_threads({.flag = 0, .configured = 0, .omp_num_threads = std::nullopt, .fallback = 0}), 1);
}

// lat train: train.threads > 0, else OMP_NUM_THREADS (ignored before, with train.threads 0),
// else the cores among the ranks.
TEST(ThreadCount, TrainingThreadsAreTheConfiguredCountElseOmpNumThreadsElseTheFallback) {
  const char* inherited = std::getenv("OMP_NUM_THREADS");
  const std::optional<std::string> saved = inherited ? std::optional<std::string>(inherited) : std::nullopt;
  setenv("OMP_NUM_THREADS", "3", 1);
  EXPECT_EQ(lat::training_threads(1, 2), 1);
  EXPECT_EQ(lat::training_threads(0, 2), 3);
  EXPECT_EQ(lat::training_threads(100000, 2), 1024);  // the validator refuses more; never more than the bound
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(lat::training_threads(0, 2), 2);
  setenv("OMP_NUM_THREADS", "", 1);
  EXPECT_EQ(lat::training_threads(0, 2), 2) << "empty is unset, as libgomp reads it";
  setenv("OMP_NUM_THREADS", "two", 1);
  lat::testing::expect_error<lat::ConfigError>([] { lat::training_threads(0, 2); },
                                               {"OMP_NUM_THREADS: expected an int in [1, 1024] (or a comma list of "
                                                "them), got 'two'"});
  // An explicit count decides alone: the variable is then not read, bad or not.
  EXPECT_EQ(lat::training_threads(1, 2), 1);
  EXPECT_EQ(lat::inference_threads(2), 2);
  if (saved) setenv("OMP_NUM_THREADS", saved->c_str(), 1);
  else unsetenv("OMP_NUM_THREADS");
}

}  // namespace
