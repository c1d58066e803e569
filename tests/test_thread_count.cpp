// The thread count's choice (train/config/thread_count.h): OMP_NUM_THREADS's parsing and the
// order --threads > train.threads > OMP_NUM_THREADS > the command's default.
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
}

TEST(ThreadCount, BadOmpNumThreadsIsAConfigErrorNamingIt) {
  for (const char* text : {"0", "-1", "1025", "four", "4x", " 4", ",4", "99999999999"})
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

}  // namespace
